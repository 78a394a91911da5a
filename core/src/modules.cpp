// The module loader (tessera/backend/modules.h): finds libtessera_<name>.so in the search path,
// dlopens it once, checks that it was built with this library, and remembers the outcome.
#include "tessera/backend/modules.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "tessera/error.h"
#include "tessera_build_config.h"

namespace tessera::modules {
namespace {

struct Loaded {
  void* handle = nullptr;
  ModuleStatus status;
};

struct State {
  std::mutex mutex;
  std::map<std::string, Loaded> modules;
};

State& state() {
  static State* s = new State();  // lives past static destruction: tensors may be freed late
  return *s;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// The folder that holds this library (libtessera.so, or the executable in a static build).
std::string library_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&library_directory), &info) == 0 || info.dli_fname == nullptr) return "";
  char* real = ::realpath(info.dli_fname, nullptr);
  if (!real) return directory_of(info.dli_fname);
  std::string dir = directory_of(real);
  std::free(real);
  return dir;
}

bool was_built(const std::string& name) {
  for (const auto& b : built()) {
    if (b == name) return true;
  }
  return false;
}

Loaded open_module(const std::string& name) {
  Loaded out;
  out.status.name = name;
  if (!enabled()) {
    out.status.reason = "this is a static build: its parts are linked in, none is loaded";
    return out;
  }
  if (!was_built(name)) {
    out.status.reason = "not built (no module '" + name + "' in this build)";
    return out;
  }
  const std::string file = file_name(name);
  std::string looked;
  for (const auto& dir : search_path()) {
    const std::string path = dir + "/" + file;
    if (out.status.path.empty()) out.status.path = path;
    if (!is_file(path)) {
      looked += (looked.empty() ? "" : ", ") + dir;
      continue;
    }
    out.status.path = path;
    ::dlerror();
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = ::dlerror();
      out.status.reason = e ? e : "dlopen failed";
      return out;
    }
    using BuildId = const char* (*)();
    auto build_id = reinterpret_cast<BuildId>(::dlsym(handle, "tessera_module_build_id"));
    if (!build_id) {
      out.status.reason = path + " is not a Tessera module (no tessera_module_build_id)";
      return out;  // left loaded: unloading code that may have run initialisers is not safe
    }
    if (std::string(build_id()) != TESSERA_MODULE_BUILD_ID) {
      out.status.reason = detail::concat(path, " was built for Tessera '", build_id(), "', this library is '", TESSERA_MODULE_BUILD_ID, "'");
      return out;
    }
    out.handle = handle;
    out.status.loaded = true;
    return out;
  }
  out.status.reason = detail::concat(file, " not found in ", looked.empty() ? std::string("(empty search path)") : looked,
                                     " (set TESSERA_BACKEND_PATH)");
  return out;
}

Loaded& get(const std::string& name) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.modules.find(name);
  if (it == s.modules.end()) {
    // Loading under the lock: a module's initialisers must not load another module through
    // this function (the backends register in tessera_module_register, called after this).
    it = s.modules.emplace(name, open_module(name)).first;
  }
  return it->second;
}

}  // namespace

bool enabled() { return TESSERA_MODULES_ENABLED != 0; }

std::vector<std::string> built() {
  std::vector<std::string> names;
#define TESSERA_LIST_MODULE(name) names.push_back(#name);
  TESSERA_BUILT_MODULES(TESSERA_LIST_MODULE)
#undef TESSERA_LIST_MODULE
  return names;
}

std::vector<std::string> search_path() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TESSERA_BACKEND_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = list.find(':', start);
      const std::string dir = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!dir.empty()) dirs.push_back(dir);
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  const std::string lib = library_directory();
  if (!lib.empty()) dirs.push_back(lib + "/tessera");
  return dirs;
}

std::string file_name(const std::string& name) { return "libtessera_" + name + ".so"; }

void* load(const std::string& name, std::string* why) {
  const Loaded& m = get(name);
  if (!m.handle && why) *why = m.status.reason;
  return m.handle;
}

void* symbol(const std::string& name, const char* sym, std::string* why) {
  void* handle = load(name, why);
  if (!handle) return nullptr;
  void* p = ::dlsym(handle, sym);
  if (!p && why) *why = detail::concat(file_name(name), " has no entry point ", sym);
  return p;
}

std::vector<ModuleStatus> status() {
  std::vector<ModuleStatus> out;
  for (const auto& name : built()) out.push_back(get(name).status);
  return out;
}

}  // namespace tessera::modules
