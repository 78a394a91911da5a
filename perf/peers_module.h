#pragma once
// The peers as a run-time module (TESSERA_MODULES): libtessera_peers.so holds the CPU peers that
// need large libraries (OpenBLAS, oneDNN, libtorch), libtessera_gpu_peers.so the vendor ones
// (cuBLAS, device memcpy), so the tessera command itself needs none of them. Each exports one
// table; peers_front.cpp forwards peers.h's functions through it, and a peer whose module does
// not load is absent (nullopt), its reason printed by the bench.
#include "peer_info.h"
#include "peers.h"

namespace tessera::bench::peers {

struct CpuPeerTable {
  decltype(&openblas_sgemm) call_openblas_sgemm;
  decltype(&onednn_bf16_gemm) call_onednn_bf16_gemm;
  decltype(&have_torch) call_have_torch;
  decltype(&torch_mlp_step) call_torch_mlp_step;
  decltype(&torch_cnn_step) call_torch_cnn_step;
  decltype(&torch_conv2d) call_torch_conv2d;
  decltype(&torch_add_1elem) call_torch_add_1elem;
  decltype(&torch_gpt_step) call_torch_gpt_step;
  decltype(&library_info) call_library_info;
};

struct GpuPeerTable {
  decltype(&vendor_gemm) call_vendor_gemm;
  decltype(&device_copy) call_device_copy;
};

}  // namespace tessera::bench::peers
