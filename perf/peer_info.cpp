// The peers' libraries as they run here: versions, the OpenBLAS kernel ("core") in use, and
// whether that core is a fallback for this CPU. Debian's OpenBLAS 0.3.21 picks its core from
// cpuid when it loads and does not know recent Xeons (family 6, model 207): it silently runs
// its SSE3 "Prescott" kernel there at a fifth of the machine's speed, and libtorch's matmuls go
// through the same library. `tessera bench` therefore sets OPENBLAS_CORETYPE to the best core
// for the CPU before the library loads (tools/main.cpp re-executes itself with it) and warns
// when the core in use is still a fallback.
#include "peer_info.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef TESSERA_HAVE_OPENBLAS
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);
#endif
#ifdef TESSERA_HAVE_ONEDNN
#include <dnnl.h>
#endif
#ifdef TESSERA_HAVE_TORCH
#include <torch/version.h>
#endif

namespace tessera::bench::peers {

// TESSERA_CPU_ISA=avx2 makes this machine stand in for an AVX2-only one: the peers are held to
// AVX2 as well (OpenBLAS's Haswell/Zen core, oneDNN's AVX2 ISA), or the AVX2 kernel set would be
// compared with an AVX-512 OpenBLAS no AVX2 machine has.
bool held_to_avx2() {
  const char* isa = std::getenv("TESSERA_CPU_ISA");
  return isa != nullptr && std::string(isa) == "avx2";
}

namespace {

enum class IsaClass { other, avx2, avx512 };

IsaClass cpu_isa_class() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (!held_to_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return IsaClass::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return IsaClass::avx2;
#endif
  return IsaClass::other;
}

bool is_amd() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

bool in(const std::string& name, const std::vector<std::string>& set) {
  for (const std::string& s : set) {
    if (s == name) return true;
  }
  return false;
}

const std::vector<std::string> kAvx512Cores = {"SkylakeX", "Cooperlake", "SapphireRapids"};
const std::vector<std::string> kAvx2Cores = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};

}  // namespace

std::string best_openblas_core() {
  switch (cpu_isa_class()) {
    case IsaClass::avx512: {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
      if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
#endif
      return "SkylakeX";
    }
    case IsaClass::avx2: return is_amd() ? "Zen" : "Haswell";
    default: return "";
  }
}

bool openblas_core_is_fallback(const std::string& core) {
  switch (cpu_isa_class()) {
    case IsaClass::avx512: return !in(core, kAvx512Cores);
    case IsaClass::avx2: return !in(core, kAvx2Cores);
    default: return false;
  }
}

#if !defined(TESSERA_PEERS_FRONT)  // in the module build, the peers module's (peers_front.cpp)
LibraryInfo library_info() {
  LibraryInfo info;
#ifdef TESSERA_HAVE_OPENBLAS
  const std::string config = openblas_get_config();
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words.
  const size_t second_space = config.find(' ', config.find(' ') + 1);
  info.openblas_version = config.substr(0, second_space);
  info.openblas_core = openblas_get_corename();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  info.openblas_core_source = forced ? std::string("OPENBLAS_CORETYPE=") + forced : "OpenBLAS's own cpuid detection";
  if (openblas_core_is_fallback(info.openblas_core)) {
    info.warnings.push_back("OpenBLAS runs its " + info.openblas_core + " kernel, a fallback on this CPU (best: " + best_openblas_core() +
                            "); peer ratios against it flatter Tessera. Unset OPENBLAS_CORETYPE or set it to " + best_openblas_core());
  }
#endif
#ifdef TESSERA_HAVE_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  info.onednn_version = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
#endif
#ifdef TESSERA_HAVE_TORCH
  info.torch_version = "libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                       std::to_string(TORCH_VERSION_PATCH);
#endif
  return info;
}

#endif

}  // namespace tessera::bench::peers
