// The peers that need no big library: OpenBLAS sgemm (when found) and the STREAM triad.
#include "peers.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <memory>
#include <vector>

#ifdef TESSERA_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace tessera::bench::peers {

// In the module build the command compiles only the triad here (TESSERA_PEERS_FRONT); the rest
// is in the peers module, reached through peers_front.cpp.
#if !defined(TESSERA_PEERS_FRONT)
std::optional<Peer> openblas_sgemm(int64_t m, int64_t n, int64_t k, int threads) {
#ifdef TESSERA_HAVE_OPENBLAS
  auto a = std::make_shared<std::vector<float>>(static_cast<size_t>(m * k), 0.5f);
  auto b = std::make_shared<std::vector<float>>(static_cast<size_t>(k * n), 0.25f);
  auto c = std::make_shared<std::vector<float>>(static_cast<size_t>(m * n), 0.0f);
  Peer p{"openblas", [=] {
            openblas_set_num_threads(threads);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f,
                        a->data(), static_cast<int>(k), b->data(), static_cast<int>(n), 0.0f, c->data(), static_cast<int>(n));
          }};
  // Its workers spin after each call (THREAD_TIMEOUT, default 2^28 cycles): let them sleep
  // before the engine runs. Shortening the spin instead (OPENBLAS_THREAD_TIMEOUT=4) made
  // OpenBLAS's own back-to-back calls ~15% slower at n = 1024: not the peer at its best.
  p.settle_s = threads > 1 ? 0.15 : 0.0;
  return p;
#else
  (void)m, (void)n, (void)k, (void)threads;
  return std::nullopt;
#endif
}

#ifndef TESSERA_HAVE_ONEDNN
std::optional<Peer> onednn_bf16_gemm(int64_t, int64_t, int64_t, int) { return std::nullopt; }
#endif
#endif  // !TESSERA_PEERS_FRONT

Peer stream_triad(int64_t n, int threads) {
  auto a = std::make_shared<std::vector<float>>(static_cast<size_t>(n), 0.0f);
  auto b = std::make_shared<std::vector<float>>(static_cast<size_t>(n), 1.0f);
  auto c = std::make_shared<std::vector<float>>(static_cast<size_t>(n), 2.0f);
  auto arena = std::make_shared<tbb::task_arena>(threads);
  return Peer{"stream_triad", [=] {
                arena->execute([&] {
                  const int64_t chunks = threads * 4;
                  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t ch) {
                    const int64_t lo = n * ch / chunks, hi = n * (ch + 1) / chunks;
                    float* x = a->data();
                    const float* y = b->data();
                    const float* z = c->data();
                    for (int64_t i = lo; i < hi; ++i) x[i] = y[i] + 3.0f * z[i];
                  }, tbb::static_partitioner());
                });
              },
              12.0 * static_cast<double>(n)};
}

#if !defined(TESSERA_HAVE_TORCH) && !defined(TESSERA_PEERS_FRONT)
bool have_torch() { return false; }
std::optional<Peer> torch_mlp_step(int64_t, int) { return std::nullopt; }
std::optional<Peer> torch_cnn_step(int64_t, int) { return std::nullopt; }
std::optional<Peer> torch_conv2d(int64_t, int64_t, int64_t, int64_t, bool, bool, int) { return std::nullopt; }
std::optional<Peer> torch_add_1elem(int, int) { return std::nullopt; }
std::optional<Peer> torch_gpt_step(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int) { return std::nullopt; }
#endif

}  // namespace tessera::bench::peers
