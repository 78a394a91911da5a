// The opt-in CPU fallback for ops a backend lacks (tessera/runtime.h, set_cpu_fallback).
#include "cpu_fallback.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "tessera/autograd.h"
#include "tessera/backend/registry.h"
#include "tessera/error.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"

namespace tessera {
namespace {

std::atomic<bool>& flag() {
  static std::atomic<bool> on = [] {
    const char* e = std::getenv("TESSERA_CPU_FALLBACK");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  return on;
}
std::atomic<int64_t> g_count{0};

}  // namespace

void set_cpu_fallback(bool on) { flag() = on; }
bool cpu_fallback() { return flag().load(std::memory_order_relaxed); }
int64_t cpu_fallback_count() { return g_count.load(); }

namespace detail {

bool run_cpu_fallback(OpId op, DType dtype, Backend& backend, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                      const OpAttrs& attrs) {
  if (!cpu_fallback() || backend.device_type() == DeviceType::cpu) return false;
  Backend* cpu = find_backend(DeviceType::cpu);
  if (!cpu || !cpu->supports(op, dtype)) return false;
  const KernelFn kernel = cpu->kernels()[op];
  {
    static std::mutex mutex;
    static std::set<std::pair<int, std::string>> logged;  // (op, dtype), backend
    std::lock_guard lock(mutex);
    if (logged.emplace(static_cast<int>(op) * kNumDTypes + static_cast<int>(dtype), backend.name()).second) {
      const bool missing = backend.kernels()[op] == nullptr;
      std::fprintf(stderr, "tessera: %s is not implemented on %s%s%s; running it on the cpu (TESSERA_CPU_FALLBACK)\n", op_name(op).data(),
                   backend.name(), missing ? "" : " for ", missing ? "" : dtype_name(dtype));
    }
  }
  const NoGradGuard no_grad;
  std::vector<Tensor> host_in, host_out;
  for (const Tensor& t : inputs) host_in.push_back(t.defined() ? t.to(kCPU).contiguous() : Tensor());
  for (const Tensor& t : outputs) host_out.push_back(t.defined() ? t.to(kCPU).contiguous() : Tensor());  // in-place ops read them
  kernel(KernelCall{op, host_in, host_out, attrs});
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined()) outputs[i].copy_(host_out[i]);
  }
  ++g_count;
  return true;
}

}  // namespace detail
}  // namespace tessera
