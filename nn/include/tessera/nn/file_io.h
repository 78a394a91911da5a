#pragma once
// Careful file I/O for everything Tessera reads from or writes to disk: inputs must be regular
// files of bounded size (a FIFO would block forever, /dev/zero would never end), outputs are
// written to a temporary file in the same directory, fsync'd, checked through close() and
// renamed into place, so a crash, a full disk or a kill leaves the previous file intact.
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::nn {

/** The whole of a regular file of at most `max_bytes` bytes; errors are "<op>: '<path>' ...". */
std::string read_regular_file(const std::string& path, const char* op, uint64_t max_bytes);
/** At most the first `max_bytes` bytes of a regular file of any size. */
std::string read_regular_file_prefix(const std::string& path, const char* op, uint64_t max_bytes);

/**
 * Writes one file atomically. Creating it removes temporary files that killed processes left
 * behind for the same target (path.tmp.<pid> of a pid that no longer runs).
 */
class AtomicFileWriter {
 public:
  AtomicFileWriter(std::string path, const char* op);
  ~AtomicFileWriter();  ///< without commit(): the temporary file is removed, the target untouched
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  /** fsync, close (its error checked: NFS and full disks report there), rename, fsync the directory. */
  void commit();
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_, op_;
  int fd_ = -1;
};

/** Writes `text` to `path` through AtomicFileWriter. */
void write_file_atomic(const std::string& path, std::string_view text, const char* op);

/**
 * Checks, before any long job, that `path` can be written later: not a directory, its
 * directory exists and is writable, and if it exists it is a regular file. `flag` names the
 * option in the message ("--json").
 */
void check_output_path(const std::string& path, const char* op, const char* flag);

/** True when the two paths name the same file (or would, once created). */
bool same_file(const std::string& a, const std::string& b);

}  // namespace tessera::nn
