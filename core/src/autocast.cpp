#include "tessera/autocast.h"

#include "tessera/error.h"

namespace tessera {

namespace {
AutocastState& state() {
  thread_local AutocastState s;
  return s;
}
}  // namespace

const AutocastState& autocast_state() { return state(); }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : saved_(state()) {
  // Disabled, the dtype is not used: AutocastGuard(DType::f32, false) turns autocast off for the
  // scope, as docs/mixed-precision.md shows (it used to throw on the dtype).
  TESSERA_CHECK(!enabled || dtype == DType::bf16 || dtype == DType::f16, "autocast", "the autocast dtype must be bfloat16 or float16, got ",
                dtype);
  state() = {enabled, enabled ? dtype : saved_.dtype};
}

AutocastGuard AutocastGuard::disabled() { return AutocastGuard(DType::bf16, false); }

AutocastGuard::~AutocastGuard() { state() = saved_; }

Tensor autocast(const Tensor& x, CastPolicy policy) {
  const AutocastState& s = state();
  if (!s.enabled || !x.defined() || !is_floating(x.dtype()) || x.dtype() == DType::f64) return x;
  const DType want = policy == CastPolicy::lower ? s.dtype : DType::f32;
  return x.dtype() == want ? x : x.to(want);
}

}  // namespace tessera
