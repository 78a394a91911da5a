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
  decltype(&openblas_sgemm) openblas_sgemm;
  decltype(&onednn_bf16_gemm) onednn_bf16_gemm;
  decltype(&have_torch) have_torch;
  decltype(&torch_mlp_step) torch_mlp_step;
  decltype(&torch_cnn_step) torch_cnn_step;
  decltype(&torch_conv2d) torch_conv2d;
  decltype(&torch_add_1elem) torch_add_1elem;
  decltype(&torch_gpt_step) torch_gpt_step;
  decltype(&library_info) library_info;
};

struct GpuPeerTable {
  decltype(&vendor_sgemm) vendor_sgemm;
  decltype(&device_copy) device_copy;
};

}  // namespace tessera::bench::peers
