#pragma once
// Loadable modules. In the default build (TESSERA_MODULES=ON) libtessera holds the core and the
// CPU backend; every part that needs a vendor runtime or a large library is a shared module
// loaded with dlopen on first use: the backends cuda, hip, kokkos and emulated, the process-group
// transports mpi, nccl and rccl, and the benchmark's peers. A module that is absent, or whose
// vendor runtime is missing, makes that part unavailable with the loader's message; the program
// still starts. Modules are searched in TESSERA_BACKEND_PATH (':'-separated folders), then in the
// folder `tessera` beside libtessera (lib/libtessera.so -> lib/tessera/libtessera_cuda.so).
// The static build (TESSERA_MODULES=OFF) links everything into one archive and loads nothing.
#include <string>
#include <vector>

namespace tessera::modules {

/** One module of this build and what became of it. */
struct ModuleStatus {
  std::string name;    ///< "cuda", "mpi", "peers", ...
  std::string path;    ///< the file loaded, or the first one looked for
  bool loaded = false;
  std::string reason;  ///< why it is not loaded (empty when it is)
};

/** True when this build loads its parts as modules (TESSERA_MODULES=ON). */
bool enabled();
/** The modules this build made, in the order `status()` lists them. */
std::vector<std::string> built();
/** The folders searched, in order. */
std::vector<std::string> search_path();
/** The file name of module `name` ("libtessera_cuda.so"). */
std::string file_name(const std::string& name);

/**
 * Loads module `name` once (later calls give the first result: a module is never unloaded).
 * Returns the dlopen handle, or nullptr with `why` (when given) set to the reason: not built,
 * not found in the search path, the loader's message (a missing vendor library), or a module
 * built for another Tessera.
 */
void* load(const std::string& name, std::string* why = nullptr);
/** The address of `symbol` in module `name` (loading it), or nullptr with `why` set. */
void* symbol(const std::string& name, const char* symbol, std::string* why = nullptr);
/** Every module of this build, each loaded (or tried) now. */
std::vector<ModuleStatus> status();

}  // namespace tessera::modules

/** Marks a module's entry points (the functions the core finds with dlsym). */
#define TESSERA_MODULE_EXPORT extern "C" __attribute__((visibility("default")))
