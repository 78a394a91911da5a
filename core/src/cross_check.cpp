// The CPU cross-check (tessera/runtime.h, set_check_against_cpu): each kernel launched on a
// non-CPU device is replayed on the CPU backend with host copies of its operands, and the outputs
// are compared. The device's results are what the program goes on with; the CPU's only judge them.
#include "cross_check.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <sstream>

#include "profiler_internal.h"
#include "tessera/autograd.h"
#include "tessera/backend/registry.h"
#include "tessera/error.h"
#include "tessera/profiler.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"

namespace tessera {
namespace {

std::atomic<bool> g_on{false};
std::atomic<int64_t> g_checked{0}, g_divergent{0};
std::mutex g_mutex;
std::optional<Divergence> g_first;
thread_local bool t_inside = false;  // the check's own copies and CPU kernels are not checked
// Marks the calling thread as doing the check's own work while it lives.
struct CheckerWork {
  CheckerWork() { t_inside = true; }
  ~CheckerWork() { t_inside = false; }
};

// Relative to the output's largest magnitude, and growing with the square root of the terms
// summed per output (estimated as input elements per output element): backends sum in different
// orders, and a weight gradient over 100,000 positions differs by far more than an exp does.
double tolerance_for(DType dt, double max_ref, double terms) {
  const double growth = std::sqrt(std::max(1.0, terms));
  switch (dt) {
    case DType::f64: return 1e-12 * growth * max_ref + 1e-14;
    case DType::f32: return 1e-5 * growth * max_ref + 1e-6;
    case DType::f16: return 2e-3 * max_ref + 1e-4;
    case DType::bf16: return 1e-2 * max_ref + 1e-3;
    default: return 0;  // integers and bool: exact
  }
}

std::string shapes_of(std::span<const Tensor> ins) {
  std::ostringstream s;
  for (size_t i = 0; i < ins.size(); ++i) {
    s << (i ? ", " : "");
    if (!ins[i].defined()) {
      s << "-";
      continue;
    }
    s << shape_str(ins[i].shape());
  }
  return s.str();
}

Tensor host_copy(const Tensor& t) { return t.defined() ? t.to(kCPU).contiguous() : Tensor(); }

std::vector<double> values(const Tensor& t) { return t.to(kCPU).to(DType::f64).contiguous().to_vector<double>(); }

}  // namespace

std::string Divergence::text() const {
  std::ostringstream s;
  s << op << " on " << device << " (" << dtype << ", inputs " << shapes << ") differs from the cpu backend by " << max_error
    << " (tolerance " << tolerance << "), the " << op_index + 1 << (op_index == 0 ? "st" : op_index == 1 ? "nd" : op_index == 2 ? "rd" : "th")
    << " kernel checked" << (scope.empty() ? "" : "; in " + scope);
  return s.str();
}

void set_check_against_cpu(bool on) {
  std::lock_guard lock(g_mutex);
  g_first.reset();
  g_checked = 0, g_divergent = 0;
  g_on = on;
  profile::detail::g_track_scopes = on;
}
bool check_against_cpu() { return g_on.load(std::memory_order_relaxed); }
std::optional<Divergence> first_divergence() {
  std::lock_guard lock(g_mutex);
  return g_first;
}
int64_t cross_checked_kernels() { return g_checked.load(); }
int64_t divergent_kernels() { return g_divergent.load(); }

namespace detail {

bool cross_check_wanted(Device device) { return g_on.load(std::memory_order_relaxed) && !t_inside && device.type != DeviceType::cpu; }

void run_cross_checked(OpId op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs, const OpAttrs& attrs,
                       const std::function<void()>& launch) {
  Backend* cpu = find_backend(DeviceType::cpu);
  const KernelFn cpu_kernel = cpu ? cpu->kernels()[op] : nullptr;
  if (!cpu_kernel) return launch();  // nothing to compare with
  const NoGradGuard no_grad;  // the copies and the replay are not part of any graph
  std::vector<Tensor> host_in, host_out;
  {
    const CheckerWork inside;
    for (const Tensor& t : inputs) host_in.push_back(host_copy(t));
    for (const Tensor& t : outputs) host_out.push_back(host_copy(t));  // previous contents: in-place ops read them
  }
  launch();
  const CheckerWork inside;
  cpu_kernel(KernelCall{op, host_in, host_out, attrs});
  const int64_t index = g_checked.fetch_add(1);
  double worst = 0, allowed = 0, in_elements = 0;
  bool differs = false;
  for (const Tensor& t : inputs) in_elements += t.defined() ? static_cast<double>(t.numel()) : 0.0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !host_out[i].defined() || outputs[i].numel() == 0) continue;
    const std::vector<double> got = values(outputs[i]), want = values(host_out[i]);
    double max_ref = 0, max_err = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      max_ref = std::max(max_ref, std::fabs(want[k]));
      const double e = std::fabs(got[k] - want[k]);
      if (std::isnan(got[k]) != std::isnan(want[k])) max_err = INFINITY;
      else if (!std::isnan(e)) max_err = std::max(max_err, e);
    }
    const double tol = tolerance_for(outputs[i].dtype(), max_ref, in_elements / static_cast<double>(outputs[i].numel()));
    if (max_err > tol) differs = true;
    if (max_err - tol > worst - allowed || i == 0) worst = max_err, allowed = tol;
  }
  if (!differs) return;
  ++g_divergent;
  std::lock_guard lock(g_mutex);
  if (g_first) return;
  g_first = Divergence{std::string(op_name(op)), device.str(), shapes_of(inputs),
                       std::string(dtype_name(outputs.empty() || !outputs[0].defined() ? DType::f32 : outputs[0].dtype())),
                       profile::scope_path(), worst, allowed, index};
}

}  // namespace detail

namespace {
KernelFn g_planted_original = nullptr;
void planted_wrong_kernel(const KernelCall& c) {
  g_planted_original(c);
  for (const Tensor& t : c.outputs) {
    Tensor out = t;
    if (out.defined() && is_floating(out.dtype())) out.mul_(1.01);
  }
}
}  // namespace

void plant_wrong_kernel(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string backend_name = colon == std::string::npos ? "cpu" : spec.substr(0, colon);
  const std::string op = colon == std::string::npos ? spec : spec.substr(colon + 1);
  TESSERA_CHECK(!g_planted_original, "plant_wrong_kernel", "a wrong kernel is already planted");
  Backend* backend = nullptr;
  for (Backend* b : registered_backends()) {
    if (backend_name == b->name()) backend = b;
  }
  TESSERA_CHECK(backend != nullptr, "plant_wrong_kernel", "no backend '", backend_name, "' in this build");
  for (int i = 0; i < kOpCount; ++i) {
    if (op_name(static_cast<OpId>(i)) != op) continue;
    TESSERA_CHECK(backend->kernels()[static_cast<OpId>(i)] != nullptr, "plant_wrong_kernel", backend_name, " has no ", op, " kernel");
    g_planted_original = backend->replace_kernel(static_cast<OpId>(i), &planted_wrong_kernel);
    return;
  }
  throw Error(detail::concat("plant_wrong_kernel: no op named '", op, "'"));
}

}  // namespace tessera
