#include "tessera/nn/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tessera/error.h"

namespace tessera::nn {

namespace fs = std::filesystem;

namespace {
std::string why() { return std::strerror(errno); }

fs::path directory_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}

// path.tmp.<pid> files whose writer is gone (kill -9 mid-write) are removed; a live pid's file
// may belong to a concurrent writer and is left alone.
void remove_stale_temps(const std::string& path) {
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_of(path), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(pid_text.c_str()));
    if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) fs::remove(entry.path(), ec);
  }
}
}  // namespace

namespace {
std::string read_file(const std::string& path, const char* op, uint64_t max_bytes, bool prefix) {
  struct stat st {};
  TESSERA_CHECK(::stat(path.c_str(), &st) == 0, op, "cannot open '", path, "': ", why());
  TESSERA_CHECK(S_ISREG(st.st_mode), op, "'", path, "' is not a regular file (a directory, FIFO or device); refusing to read it");
  TESSERA_CHECK(prefix || static_cast<uint64_t>(st.st_size) <= max_bytes, op, "'", path, "' is ", st.st_size,
                " bytes, more than the limit of ", max_bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TESSERA_CHECK(fd >= 0, op, "cannot open '", path, "': ", why());
  std::string data(static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), max_bytes)), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t r = ::read(fd, data.data() + got, data.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string reason = r < 0 ? why() : "file shrank while reading";
      ::close(fd);
      throw Error(detail::concat(op, ": reading '", path, "' failed: ", reason));
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return data;
}
}  // namespace

std::string read_regular_file(const std::string& path, const char* op, uint64_t max_bytes) {
  return read_file(path, op, max_bytes, false);
}
std::string read_regular_file_prefix(const std::string& path, const char* op, uint64_t max_bytes) {
  return read_file(path, op, max_bytes, true);
}

AtomicFileWriter::AtomicFileWriter(std::string path, const char* op) : path_(std::move(path)), op_(op) {
  TESSERA_CHECK(!path_.empty(), op_, "empty output path");
  remove_stale_temps(path_);
  tmp_ = (directory_of(path_) / (fs::path(path_).filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSERA_CHECK(fd_ >= 0, op_, "cannot create '", tmp_, "': ", why());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  TESSERA_CHECK(fd_ >= 0, op_, "write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    TESSERA_CHECK(w > 0, op_, "writing '", path_, "' failed: ", w < 0 ? why() : "no progress");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  TESSERA_CHECK(fd_ >= 0, op_, "commit twice");
  TESSERA_CHECK(::fsync(fd_) == 0, op_, "fsync of '", tmp_, "' failed: ", why());
  const int fd = fd_;
  fd_ = -1;
  TESSERA_CHECK(::close(fd) == 0, op_, "closing '", tmp_, "' failed: ", why());
  TESSERA_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, op_, "cannot rename '", tmp_, "' to '", path_, "': ", why());
  tmp_.clear();
  // Persist the rename itself.
  if (const int dfd = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view text, const char* op) {
  AtomicFileWriter w(path, op);
  w.write(text);
  w.commit();
}

void check_output_path(const std::string& path, const char* op, const char* flag) {
  TESSERA_CHECK(!path.empty(), op, flag, " is empty");
  const fs::path dir = directory_of(path);
  struct stat st {};
  TESSERA_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), op, flag, " '", path, "': directory '", dir.string(),
                "' does not exist");
  TESSERA_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, op, flag, " '", path, "': directory '", dir.string(),
                "' is not writable: ", why());
  if (::stat(path.c_str(), &st) == 0) {
    TESSERA_CHECK(S_ISREG(st.st_mode), op, flag, " '", path, "' exists and is not a regular file");
  }
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

}  // namespace tessera::nn
