// The peers modules' entry points (perf/peers_module.h): one table each, built from the
// implementations compiled into the module.
#include "peers_module.h"

#include "tessera/backend/modules.h"

#if defined(TESSERA_PEERS_CPU_MODULE)
TESSERA_MODULE_EXPORT const tessera::bench::peers::CpuPeerTable* tessera_cpu_peers_table() {
  namespace p = tessera::bench::peers;
  static const p::CpuPeerTable table{&p::openblas_sgemm, &p::onednn_bf16_gemm, &p::have_torch,      &p::torch_mlp_step, &p::torch_cnn_step,
                                     &p::torch_conv2d,   &p::torch_add_1elem,  &p::torch_gpt_step, &p::library_info};
  return &table;
}
#endif
#if defined(TESSERA_PEERS_GPU_MODULE)
TESSERA_MODULE_EXPORT const tessera::bench::peers::GpuPeerTable* tessera_gpu_peers_table() {
  namespace p = tessera::bench::peers;
  static const p::GpuPeerTable table{&p::vendor_gemm, &p::device_copy};
  return &table;
}
#endif
