// The row kernels at every size class the device backends have: rows held in a warp's registers
// (1, 2, 4 or 8 packs a lane), a block per row, long rows split into chunks; rows that start on
// a 16-byte boundary and rows that do not; and the binary kernels' dense-with-broadcast path (a
// row, a column or a scalar, on either side). Each against the same op in float64 on the CPU.
#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {

Tensor cpu64(const Tensor& t) { return t.detach().to(kCPU).to(DType::f64); }

Tolerance tol_for(DType dt) {
  if (dt == DType::f64) return {1e-11, 1e-12};
  if (dt == DType::f32) return {1e-4, 1e-5};
  return {3e-2, 3e-2};
}

// rows x len, or the view from column 1 of rows x (len + 1): its rows start off a 16-byte boundary.
Tensor rows_of(int64_t rows, int64_t len, DType dt, uint64_t seed, bool unaligned) {
  if (!unaligned) return make_input({rows, len}, dt, seed, -3, 3);
  return make_input({rows, len + 1}, dt, seed, -3, 3).narrow(1, 1, len);
}

}  // namespace

TEST_CASE("softmax, log_softmax and layer_norm with its gradients match float64 at every row length class, aligned or not") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t len : {1, 7, 64, 127, 128, 255, 256, 257, 513, 1023, 1024, 1025, 2049}) {
      for (bool unaligned : {false, true}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(len);
        CAPTURE(unaligned);
        const Tensor x = rows_of(5, len, dt, 100 + static_cast<uint64_t>(len), unaligned);
        TESSERA_CHECK_CLOSE(softmax(x, 1), to_ref(softmax(cpu64(x), 1)), tol_for(dt));
        TESSERA_CHECK_CLOSE(log_softmax(x, 1), to_ref(log_softmax(cpu64(x), 1)), tol_for(dt));
        // layer_norm forward and backward (input, weight and bias gradients) against float64.
        const Tensor w = make_input({5, len}, dt, 7, -1, 1);
        Tensor xg = x.detach().set_requires_grad(), gamma = make_input({len}, dt, 8, 0.5, 1.5).set_requires_grad(),
               beta = make_input({len}, dt, 9).set_requires_grad();
        Tensor x64 = cpu64(x).set_requires_grad(), gamma64 = cpu64(gamma).set_requires_grad(), beta64 = cpu64(beta).set_requires_grad();
        const Tensor y = layer_norm(xg, 1, gamma, beta), y64 = layer_norm(x64, 1, gamma64, beta64);
        TESSERA_CHECK_CLOSE(y, to_ref(y64), tol_for(dt));
        sum(mul(y, w)).backward();
        sum(mul(y64, cpu64(w))).backward();
        const Tolerance grad_tol = dt == DType::bf16 ? Tolerance{8e-2, 8e-2} : tol_for(dt);
        TESSERA_CHECK_CLOSE(xg.grad(), to_ref(x64.grad()), grad_tol);
        TESSERA_CHECK_CLOSE(gamma.grad(), to_ref(gamma64.grad()), grad_tol);
        TESSERA_CHECK_CLOSE(beta.grad(), to_ref(beta64.grad()), grad_tol);
      }
    }
  }
}

TEST_CASE("sum and amax over rows match float64 for warp, block and chunked rows, aligned or not") {
  const std::pair<int64_t, int64_t> shapes[] = {{33, 1}, {33, 100}, {9, 2048}, {9, 2049}, {3, 5000}, {1, 40000}, {2, 70001}};
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (const auto& [rows, len] : shapes) {
      for (bool unaligned : {false, true}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(rows);
        CAPTURE(len);
        CAPTURE(unaligned);
        const Tensor x = rows_of(rows, len, dt, 200 + static_cast<uint64_t>(len), unaligned);
        // Sums of up to 70,001 values in [-3, 3): f32 (compensated) to 1e-5 of the magnitude; bf16
        // results carry 8 bits.
        const Tolerance sum_tol = dt == DType::bf16 ? Tolerance{2e-2, 2.0} : dt == DType::f32 ? Tolerance{1e-5, 1e-3} : tol_for(dt);
        TESSERA_CHECK_CLOSE(sum(x, {1}), to_ref(sum(cpu64(x), {1})), sum_tol);
        TESSERA_CHECK_CLOSE(amax(x, {1}), to_ref(amax(cpu64(x), {1})), Tolerance{0, 0});
        TESSERA_CHECK_CLOSE(sum(x), to_ref(sum(cpu64(x))), sum_tol);
      }
    }
  }
}

TEST_CASE("binary ops of a dense operand and a broadcast row, column or scalar match float64 on either side") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = make_input({300, 64}, dt, 11);
    const Tensor row = make_input({64}, dt, 12, 0.5, 2), column = make_input({300, 1}, dt, 13, 0.5, 2),
                 scalar = make_input({1}, dt, 14, 0.5, 2);
    const Tensor unaligned_row = make_input({65}, dt, 15, 0.5, 2).narrow(0, 1, 64);  // the general kernel
    const Tensor unaligned_x = make_input({300, 65}, dt, 16).narrow(1, 1, 64);
    for (const Tensor& b : {row, column, scalar, unaligned_row}) {
      for (const Tensor& a : {x, unaligned_x}) {
        CAPTURE(shape_str(b.shape()));
        TESSERA_CHECK_CLOSE(sub(a, b), to_ref(sub(cpu64(a), cpu64(b))), tol_for(dt));
        TESSERA_CHECK_CLOSE(sub(b, a), to_ref(sub(cpu64(b), cpu64(a))), tol_for(dt));
        TESSERA_CHECK_CLOSE(div(a, b), to_ref(div(cpu64(a), cpu64(b))), tol_for(dt));
        TESSERA_CHECK_CLOSE(div(b, a), to_ref(div(cpu64(b), cpu64(a))), Tolerance{tol_for(dt).rtol, 1e-3});
      }
    }
  }
}
