// peers.h's functions in the module build: forwarded to the peers modules' tables, loaded on the
// first call. A module that does not load leaves its peers absent; library_info() says why.
#include <string>

#include "peers_module.h"
#include "tessera/backend/modules.h"

namespace tessera::bench::peers {
namespace {

template <class Table> const Table* table(const char* module, const char* entry, std::string* why = nullptr) {
  using Entry = const Table* (*)();
  auto f = reinterpret_cast<Entry>(modules::symbol(module, entry, why));
  return f ? f() : nullptr;
}
// Looked up once: a module is loaded (or found missing) for the life of the process.
const CpuPeerTable* cpu() {
  static const CpuPeerTable* t = table<CpuPeerTable>("peers", "tessera_cpu_peers_table");
  return t;
}
const GpuPeerTable* gpu() {
  static const GpuPeerTable* t = table<GpuPeerTable>("gpu_peers", "tessera_gpu_peers_table");
  return t;
}

}  // namespace

std::optional<Peer> openblas_sgemm(int64_t m, int64_t n, int64_t k, int threads) {
  return cpu() ? cpu()->call_openblas_sgemm(m, n, k, threads) : std::nullopt;
}
std::optional<Peer> onednn_bf16_gemm(int64_t m, int64_t n, int64_t k, int threads) {
  return cpu() ? cpu()->call_onednn_bf16_gemm(m, n, k, threads) : std::nullopt;
}
bool have_torch() { return cpu() && cpu()->call_have_torch(); }
std::optional<Peer> torch_mlp_step(int64_t batch, int threads) { return cpu() ? cpu()->call_torch_mlp_step(batch, threads) : std::nullopt; }
std::optional<Peer> torch_cnn_step(int64_t batch, int threads) { return cpu() ? cpu()->call_torch_cnn_step(batch, threads) : std::nullopt; }
std::optional<Peer> torch_conv2d(int64_t n, int64_t c, int64_t h, int64_t o, bool grad_x, bool grad_w, int threads) {
  return cpu() ? cpu()->call_torch_conv2d(n, c, h, o, grad_x, grad_w, threads) : std::nullopt;
}
std::optional<Peer> torch_add_1elem(int calls, int threads) { return cpu() ? cpu()->call_torch_add_1elem(calls, threads) : std::nullopt; }
std::optional<Peer> torch_gpt_step(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t dim, int64_t batch, int threads) {
  return cpu() ? cpu()->call_torch_gpt_step(vocab, context, layers, heads, dim, batch, threads) : std::nullopt;
}
std::optional<Peer> vendor_gemm(Device dev, DType dt, int64_t m, int64_t n, int64_t k) {
  return gpu() ? gpu()->call_vendor_gemm(dev, dt, m, n, k) : std::nullopt;
}
std::optional<Peer> device_copy(Device dev, int64_t bytes) { return gpu() ? gpu()->call_device_copy(dev, bytes) : std::nullopt; }

LibraryInfo library_info() {
  std::string why;
  if (const CpuPeerTable* t = table<CpuPeerTable>("peers", "tessera_cpu_peers_table", &why)) return t->call_library_info();
  LibraryInfo info;
  info.warnings.push_back("no CPU peers: " + why);
  return info;
}

}  // namespace tessera::bench::peers
