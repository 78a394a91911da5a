#pragma once
// How op front-ends record the graph. Pattern:
//   const bool rec = autograd::needs_grad({&x});
//   Tensor out;
//   { NoGradGuard g; out = ...compute with kernels and other ops...; }
//   if (rec) autograd::record("exp", {x}, out, [y = saved(out)](const Tensor& g) { ... });
// Closures must capture saved(...) tensors (detached views), never graph tensors: a node
// holding its own output would keep itself alive.
#include <initializer_list>
#include <vector>

#include "tessera/autograd.h"
#include "tessera/ops/op_id.h"

namespace tessera::autograd {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad)>;

/** Grad mode is on and one of the tensors requires grad. */
bool needs_grad(std::initializer_list<const Tensor*> inputs);
/** Whether an input's gradient flows anywhere: the graph's edges are fixed when an op is
 *  recorded, so a backward closure that captured this skips the work nobody receives (the
 *  input gradient of a network's first layer, a frozen weight's). */
inline bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }
/** Attaches a node computing `fn` to `out` (which then requires grad). */
void record(const char* name, std::vector<Tensor> inputs, Tensor& out, BackwardFn fn);
/** A tensor sharing `t`'s storage without autograd history (what closures keep). */
Tensor saved(const Tensor& t);
/** Sums `g` down to `shape` (reverses broadcasting). */
Tensor sum_to(const Tensor& g, const Shape& shape);

// Rules per op family (core/src/autograd/*_vjp.cpp), called by the front-ends.
void record_unary(OpId op, const Tensor& x, Tensor& out);
void record_binary(OpId op, const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace tessera::autograd
