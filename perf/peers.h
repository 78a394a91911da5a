#pragma once
// Peer implementations for `tessera bench`, each compiled only when its library was found
// (TESSERA_PERF_PEERS): OpenBLAS sgemm, a STREAM-triad loop (always), libtorch (Debian 1.13),
// and on GPUs cuBLAS and a device memcpy (gpu_peers.cpp).
#include <optional>

#include "bench.h"
#include "tessera/dtype.h"

namespace tessera::bench::peers {

/** C = A B with cblas_sgemm (row-major, m x k times k x n) on `threads` threads. */
std::optional<Peer> openblas_sgemm(int64_t m, int64_t n, int64_t k, int threads);
/** C (f32) = A (bf16) B (bf16) with oneDNN's matmul primitive (the bf16 GEMM bar); nullopt when
 *  oneDNN was not found at configure time. */
std::optional<Peer> onednn_bf16_gemm(int64_t m, int64_t n, int64_t k, int threads);
/** a[i] = b[i] + s * c[i] over n floats, split over `threads` threads (the bandwidth bar). */
Peer stream_triad(int64_t n, int threads);

/** GPU peers: the vendor sgemm (cuBLAS) and a device-to-device copy (work = bytes read + written). */
/** The vendor BLAS GEMM on dev (cuBLAS: cublasSgemm for f32, cublasGemmEx with f32 accumulation for
 *  bf16/f16), row-major m x k times k x n; none where the build has no vendor BLAS. */
std::optional<Peer> vendor_gemm(Device dev, DType dt, int64_t m, int64_t n, int64_t k);
std::optional<Peer> device_copy(Device dev, int64_t bytes);

bool have_torch();
/** libtorch peers, run with `threads` intra-op threads and OpenBLAS pinned to one thread. */
std::optional<Peer> torch_mlp_step(int64_t batch, int threads);
std::optional<Peer> torch_cnn_step(int64_t batch, int threads);
/** 3x3 padding-1 conv2d forward, then backward of its sum for the input and/or the weights. */
std::optional<Peer> torch_conv2d(int64_t n, int64_t c, int64_t h, int64_t o, bool grad_x, bool grad_w, int threads);
std::optional<Peer> torch_add_1elem(int calls, int threads);
/** One AdamW train step (clip 1.0) of the GPT of nn::GPT with these sizes on [batch, context] tokens
 *  (torch_gpt_peer.cpp). */
std::optional<Peer> torch_gpt_step(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t dim, int64_t batch, int threads);
/** The same step timed by perf/gpt_peer.py under python3-torch (`steps` timed steps, median), out
 *  of process; nullopt when python3 or its torch module is missing (python_peer.cpp). */
std::optional<Peer> python_gpt_step(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t dim, int64_t batch, int threads,
                                    int steps);

}  // namespace tessera::bench::peers
