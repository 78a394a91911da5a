// `tessera bench --suite gpu-model`: the GPU performance table we can make without a GPU. Each
// case runs once on the emulated backend with the access counters on (backends/emulated/
// access_counters.h); per kernel it reports launches, blocks, 32-byte sectors per warp request
// and coalescing efficiency, the bytes it moves (distinct sectors touched x 32: a DRAM traffic
// estimate assuming each sector is fetched once), the case's FLOPs and host syncs, and a
// roofline time for an H100 SXM and an MI250X from their datasheet peaks:
//   time = sum over kernels of max(bytes / bandwidth, flops / f32 peak) + launches x 3 us.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "tessera/backend/registry.h"
#include "tessera/nn/optim.h"
#include "tessera/runtime.h"
#include "tessera/tessera.h"
#if defined(TESSERA_BENCH_EMULATED)
#include "../backends/emulated/access_counters.h"
#include "tessera/backend/modules.h"
#endif

namespace tessera::bench {
#if defined(TESSERA_BENCH_EMULATED)
namespace {

// The emulator's access counters: linked in (static build), or found in its module.
const emu::access::Api& access_api() {
#if defined(TESSERA_BENCH_MODULES)
  std::string why;
  auto entry = reinterpret_cast<const emu::access::Api* (*)()>(modules::symbol("emulated", "tessera_emulated_access_api", &why));
  if (!entry) throw Error("bench: the gpu-model suite needs the emulated module's access counters (" + why + ")");
  return *entry();
#else
  return emu::access::api();
#endif
}

struct ModelCase {
  std::string group, name;
  double flops;  // per run, analytic
  std::function<void()> run;
};

struct Roof {
  const char* name;
  double f32_tflops, tbps;
};
// Datasheet peaks (perf/peaks.cpp has the same figures): FP32 vector FLOP/s and HBM bandwidth.
constexpr Roof kRoofs[] = {{"H100 SXM", 67.0, 3.35}, {"MI250X", 47.9, 3.2}};
constexpr double kLaunchSeconds = 3e-6;  // launch + inter-kernel gap on a busy stream, both vendors

template <class... T> std::shared_ptr<std::vector<Tensor>> keep(T... ts) { return std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{ts...}); }

std::vector<ModelCase> model_cases(Device d, bool quick) {
  const int64_t n = quick ? (1 << 16) : (1 << 20), rows = quick ? 64 : 1024, cols = quick ? 256 : 1024;
  const auto f32 = DType::f32;
  std::vector<ModelCase> out;
  auto v = keep(rand({n}, f32, d), rand({n}, f32, d), rand({rows, cols}, f32, d), rand({cols}, f32, d), rand({cols}, f32, d));
  const double nn = static_cast<double>(n), rc = static_cast<double>(rows * cols);
  out.push_back({"elementwise", "add f32 [n]", nn, [v] { (void)add((*v)[0], (*v)[1]); }});
  out.push_back({"elementwise", "exp f32 [n]", nn, [v] { (void)exp((*v)[0]); }});
  out.push_back({"elementwise", "row broadcast add [r, c] + [c]", rc, [v] { (void)add((*v)[2], (*v)[3]); }});
  out.push_back({"elementwise", "cast f32 -> f16 [n]", 0, [v] { (void)(*v)[0].to(DType::f16); }});
  out.push_back({"reduce", "sum [n] (whole tensor)", nn, [v] { (void)sum((*v)[0]); }});
  out.push_back({"reduce", "sum [r, c] over rows", rc, [v] { (void)sum((*v)[2], {1}); }});
  out.push_back({"reduce", "amax [r, c] over columns", rc, [v] { (void)amax((*v)[2], {0}); }});
  out.push_back({"reduce", "argmax [r, c] over rows", rc, [v] { (void)argmax((*v)[2], 1); }});
  out.push_back({"reduce", "cumsum [r, c] over rows", rc, [v] { (void)cumsum((*v)[2], 1); }});
  out.push_back({"softmax", "softmax [r, c]", 4 * rc, [v] { (void)softmax((*v)[2], 1); }});
  out.push_back({"softmax", "log_softmax [r, c]", 4 * rc, [v] { (void)log_softmax((*v)[2], 1); }});
  out.push_back({"norm", "layer_norm fwd+bwd [r, c]", 16 * rc, [v] {
                   Tensor x = (*v)[2].detach(), g = (*v)[3].detach();
                   x.set_requires_grad(), g.set_requires_grad();
                   sum(layer_norm(x, 1, g, (*v)[4])).backward();
                 }});
  const int64_t bn = quick ? 4 : 32;
  auto img = keep(rand({bn, 32, 28, 28}, f32, d), rand({32}, f32, d), rand({32}, f32, d));
  const double imgs = static_cast<double>(bn * 32 * 28 * 28);
  out.push_back({"norm", "batch_norm fwd+bwd [N, 32, 28, 28]", 16 * imgs, [img] {
                   Tensor x = (*img)[0].detach();
                   x.set_requires_grad();
                   sum(batch_norm(x, Tensor(), Tensor(), (*img)[1], (*img)[2], true)).backward();
                 }});
  out.push_back({"pool", "max_pool2d 2x2 fwd+bwd [N, 32, 28, 28]", imgs, [img] {
                   Tensor x = (*img)[0].detach();
                   x.set_requires_grad();
                   sum(max_pool2d(x, {2, 2})).backward();
                 }});
  out.push_back({"pool", "avg_pool2d 2x2 fwd+bwd [N, 32, 28, 28]", imgs, [img] {
                   Tensor x = (*img)[0].detach();
                   x.set_requires_grad();
                   sum(avg_pool2d(x, {2, 2})).backward();
                 }});
  const int64_t classes = quick ? 100 : 1000;
  auto ce = keep(rand({rows, classes}, f32, d), randint(0, classes, {rows}, DType::i64, d));
  out.push_back({"loss", "cross_entropy fwd+bwd [r, 1000]", 8.0 * static_cast<double>(rows * classes), [ce] {
                   Tensor x = (*ce)[0].detach();
                   x.set_requires_grad();
                   cross_entropy(x, (*ce)[1]).backward();
                 }});
  const int64_t vocab = quick ? 1000 : 50000, ids = quick ? 256 : 4096;
  auto emb = keep(rand({vocab, 256}, f32, d), randint(0, vocab, {ids}, DType::i64, d), zeros({vocab, 256}, f32, d),
                  rand({ids, 256}, f32, d), randint(0, vocab, {ids, 256}, DType::i64, d));  // a contiguous scatter index
  out.push_back({"indexing", "embedding gather [ids] of [vocab, 256]", 0, [emb] { (void)embedding((*emb)[0], (*emb)[1]); }});
  out.push_back({"indexing", "scatter_add [ids, 256] into [vocab, 256]", static_cast<double>(ids * 256), [emb] {
                   Tensor acc = (*emb)[2];
                   scatter_add_(acc, 0, (*emb)[4], (*emb)[3]);
                 }});
  const int64_t m = quick ? 128 : 512;
  auto mm = keep(rand({m, m}, f32, d), rand({m, m}, f32, d));
  out.push_back({"gemm", "matmul f32 [m, m] x [m, m]", 2.0 * m * m * m, [mm] { (void)matmul((*mm)[0], (*mm)[1]); }});
  return out;
}

double roofline_s(const std::vector<emu::access::KernelCounters>& ks, double flops, const Roof& r) {
  double t = 0, bytes = 0;
  int64_t launches = 0;
  for (const auto& k : ks) bytes += static_cast<double>(k.footprint_sectors) * 32, launches += k.launches;
  t = std::max(bytes / (r.tbps * 1e12), flops / (r.f32_tflops * 1e12));
  return t + static_cast<double>(launches) * kLaunchSeconds;
}
}  // namespace

void run_gpu_model(bool quick, const std::string& json_path) {
  const Device dev(DeviceType::emulated, 0);
  Backend* b = find_backend(DeviceType::emulated);
  if (!b || b->device_count() == 0) throw Error("bench: the gpu-model suite needs the emulated backend");
  std::printf("# gpu-model on %s (warp %s): access counters per kernel; roofline = sum max(bytes/BW, FLOPs/peak) + 3 us/launch\n",
              dev.str().c_str(), b->device_info(0).properties.front().second.c_str());
  std::printf("%-42s %-22s %5s %6s %7s %6s %10s %7s %5s %10s %10s\n", "case", "kernel", "launch", "blocks", "sec/req", "coal%",
              "bytes", "MFLOP", "syncs", "H100 us", "MI250X us");
  nlohmann::json arr = nlohmann::json::array();
  for (const ModelCase& c : model_cases(dev, quick)) {
    c.run();  // warm-up: lazily created state, allocator caches
    synchronize(dev);
    const emu::access::Api& access = access_api();
    access.reset();
    reset_host_sync_stats();
    access.set_enabled(true);
    c.run();
    synchronize(dev);
    access.set_enabled(false);
    const auto kernels = access.snapshot();
    const int64_t syncs = host_sync_stats().total - 1;  // less the synchronize above
    nlohmann::json jk = nlohmann::json::array();
    for (const auto& k : kernels) {
      std::printf("%-42s %-22s %5lld %6lld %7.2f %6.1f %10lld %7s %5s %10s %10s\n", c.name.c_str(), k.label.c_str(),
                  static_cast<long long>(k.launches), static_cast<long long>(k.blocks), k.sectors_per_request(), 100 * k.efficiency(),
                  static_cast<long long>(k.footprint_sectors * 32), "", "", "", "");
      jk.push_back({{"kernel", k.label}, {"launches", k.launches}, {"blocks", k.blocks}, {"threads", k.threads},
                    {"load_requests", k.loads.requests}, {"load_sectors", k.loads.sectors}, {"load_bytes", k.loads.bytes},
                    {"store_requests", k.stores.requests}, {"store_sectors", k.stores.sectors}, {"store_bytes", k.stores.bytes},
                    {"atomics", k.atomics}, {"sectors_per_request", k.sectors_per_request()}, {"coalescing", k.efficiency()},
                    {"bytes", k.footprint_sectors * 32}});
    }
    const double h100 = roofline_s(kernels, c.flops, kRoofs[0]), mi250 = roofline_s(kernels, c.flops, kRoofs[1]);
    std::printf("%-42s %-22s %5s %6s %7s %6s %10s %7.2f %5lld %10.2f %10.2f\n", c.name.c_str(), "= case", "", "", "", "", "",
                c.flops / 1e6, static_cast<long long>(syncs), h100 * 1e6, mi250 * 1e6);
    arr.push_back({{"group", c.group}, {"case", c.name}, {"flops", c.flops}, {"host_syncs", syncs}, {"kernels", jk},
                   {"roofline_us", {{kRoofs[0].name, h100 * 1e6}, {kRoofs[1].name, mi250 * 1e6}}}});
  }
  if (!json_path.empty()) {
    write_file_atomically(arr.dump(1) + "\n", json_path);
    std::printf("# wrote %zu gpu-model cases to %s\n", arr.size(), json_path.c_str());
  }
}
#else
void run_gpu_model(bool, const std::string&) {
  throw Error("bench: the gpu-model suite needs the emulated backend with access counters (a GCC build without sanitizers)");
}
#endif

}  // namespace tessera::bench
