#pragma once
// What the peer libraries are and which kernels they run on this CPU (peer_info.cpp).
#include <string>
#include <vector>

namespace tessera::bench::peers {

struct LibraryInfo {
  std::string openblas_version, openblas_core, openblas_core_source;  ///< empty without OpenBLAS
  std::string onednn_version, torch_version;                          ///< empty when not built in
  std::vector<std::string> warnings;                                  ///< e.g. a fallback OpenBLAS core
};

/** True under TESSERA_CPU_ISA=avx2: the machine stands in for an AVX2-only CPU, peers included. */
bool held_to_avx2();
/** The best OpenBLAS core for this CPU ("Cooperlake", "SkylakeX", "Zen", "Haswell"), or "" when
 *  the CPU has neither AVX-512 nor AVX2+FMA (then OpenBLAS's own choice stands). */
std::string best_openblas_core();
/** True when `core` runs narrower vectors than this CPU has (e.g. Prescott on an AVX-512 Xeon). */
bool openblas_core_is_fallback(const std::string& core);
/** Versions and the OpenBLAS core in use in this process, with warnings. */
LibraryInfo library_info();

}  // namespace tessera::bench::peers
