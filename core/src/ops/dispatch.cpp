#include "dispatch.h"

#include "cpu_fallback.h"
#include "cross_check.h"
#include "profiler_internal.h"
#include "tessera/graph.h"

#include "tessera/backend/registry.h"
#include "tessera/error.h"
#include "tessera/runtime.h"

namespace tessera::detail {

void check_defined(const Tensor& t, const char* op, const char* what) {
  TESSERA_CHECK(t.defined(), op, what, " is an undefined tensor");
}

Device common_device(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      throw Error(concat(op, ": expected all tensors on one device, got ", first->device().str(), " and ",
                         t->device().str()));
    }
  }
  TESSERA_CHECK(first != nullptr, op, "no defined tensor among the inputs");
  return first->device();
}

void run_kernel(OpId op, Device device, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                const OpAttrs& attrs) {
  const char* name = op_name(op).data();  // names are string literals, so NUL-terminated
  // Every operand on the kernel's device: a kernel reads its inputs through raw pointers, and a
  // CPU kernel handed device memory (or a GPU kernel host memory) faults on hardware, while the
  // emulator's device memory is host memory and would hide it. Ops check this first with their
  // own message; this is the floor under every one of them.
  for (std::span<const Tensor> group : {inputs, std::span<const Tensor>(outputs.data(), outputs.size())}) {
    for (const Tensor& t : group) {
      if (t.defined() && t.device() != device) {
        throw Error(concat(name, ": expected all tensors on ", device.str(), ", got one on ", t.device().str()));
      }
      // Checked here, on the calling thread: a kernel's worker threads cannot report it.
      if (t.defined() && t.storage()->released()) {
        throw Error(concat(name, ": the storage of its ", shape_str(t.shape()), " ", t.dtype(), " operand on ", t.device().str(),
                           " was released (a fully sharded parameter read outside its module's forward or backward: call the module "
                           "through operator() or Module::call so its parameters are gathered)"));
      }
    }
  }
  Backend& backend = backend_for_device(device, name);
  KernelFn fn = backend.kernels()[op];
  const DType dtype = kernel_dtype(op, inputs, outputs);
  if (!fn || !backend.supports(op, dtype)) {
    if (run_cpu_fallback(op, dtype, backend, inputs, outputs, attrs)) return;
    const char* hint = cpu_fallback() ? "" : " (TESSERA_CPU_FALLBACK=1 runs it on the cpu)";
    if (!fn) throw NotImplemented(concat(name, ": not implemented on ", backend.name(), hint));
    const KernelTable::Refusal& refusal = backend.kernels().refusal(op);
    if (refusal.dtypes.contains(dtype)) {
      throw NotImplemented(concat(name, ": ", backend.name(), " has no kernel for ", dtype, " (", refusal.why, ")", hint));
    }
    throw Error(concat(name, ": no kernel takes ", dtype, " (the op's kernels take ", op_dtypes(op).str(), ")"));
  }
  if (graph_capturing() && (op == OpId::RandUniform || op == OpId::RandNormal || op == OpId::RandInt || op == OpId::Bernoulli)) {
    throw Error(concat(name, ": random ops cannot be captured in a graph (their Philox seed and offset are launch "
                             "arguments: every replay would draw the same numbers)"));
  }
  const OpScope scope(name);
  // The kernel's device is current while it runs; the caller's is restored even if it throws.
  struct DeviceGuard {
    Backend& backend;
    int previous;
    ~DeviceGuard() { backend.set_current_device(previous); }
  } const guard{backend, backend.set_current_device(device.index)};
  const profile::detail::KernelSpan span(op, backend, device, inputs, outputs);
  if (cross_check_wanted(device)) return run_cross_checked(op, device, inputs, outputs, attrs, [&] { fn(KernelCall{op, inputs, outputs, attrs}); });
  fn(KernelCall{op, inputs, outputs, attrs});
}

void check_floating(const Tensor& x, const char* op) {
  TESSERA_CHECK(is_floating(x.dtype()), op, "expected a floating dtype, got ", x.dtype());
}

void check_index_dtype(const Tensor& index, const char* op, const char* what) {
  check_defined(index, op, what);
  TESSERA_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op, what,
                " must be int32 or int64, got ", index.dtype());
}

Tensor expand_to(const Tensor& x, const Shape& shape) { return x.shape() == shape ? x : x.expand(shape); }

}  // namespace tessera::detail
