// oneDNN (Debian's libdnnl-dev) as the bf16 GEMM peer: a matmul primitive with bf16 source and
// weights and an f32 destination, the work of dnnl_gemm_bf16bf16f32 (oneDNN 2.6 exports that
// routine only internally; the matmul primitive is its public form and picks the same kernels:
// avx512_core_bf16 where the CPU has AVX512_BF16). Threads: oneDNN's OpenMP runtime.
#include <omp.h>

#include <dnnl.hpp>
#include <memory>

#include "peers.h"

namespace tessera::bench::peers {

std::optional<Peer> onednn_bf16_gemm(int64_t m, int64_t n, int64_t k, int threads) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  struct State {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    dnnl::memory a, b, c;
    dnnl::matmul prim;
  };
  auto s = std::make_shared<State>();
  const dnnl::memory::desc ad({m, k}, dt::bf16, tag::ab), bd({k, n}, dt::bf16, tag::ab), cd({m, n}, dt::f32, tag::ab);
  s->a = dnnl::memory(ad, s->engine);
  s->b = dnnl::memory(bd, s->engine);
  s->c = dnnl::memory(cd, s->engine);
  for (auto* mem : {&s->a, &s->b}) {  // 0.5 and 0.25 in bf16
    auto* p = static_cast<uint16_t*>(mem->get_data_handle());
    const size_t count = mem->get_desc().get_size() / 2;
    for (size_t i = 0; i < count; ++i) p[i] = mem == &s->a ? 0x3f00 : 0x3e80;
  }
  try {
    s->prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), s->engine));
  } catch (const dnnl::error&) {
    return std::nullopt;  // no bf16 matmul for this CPU, or oneDNN held to AVX2 (TESSERA_CPU_ISA=avx2)
  }
  return Peer{"onednn", [s, threads] {
                omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
                s->prim.execute(s->stream, {{DNNL_ARG_SRC, s->a}, {DNNL_ARG_WEIGHTS, s->b}, {DNNL_ARG_DST, s->c}});
                s->stream.wait();
              }};
}

}  // namespace tessera::bench::peers
