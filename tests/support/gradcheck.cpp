#include "support/gradcheck.h"

#include <cmath>
#include <sstream>

#include "support/test_device.h"

namespace tessera::test {

Tensor grad_input(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = make_input(shape, DType::f64, seed, lo, hi);
  return t.set_requires_grad(true);
}

namespace {
double weighted_sum(const Tensor& y, const Tensor& w) { return sum(mul(y.to(DType::f64), w)).item<double>(); }
}  // namespace

std::string gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, double eps, double tol) {
  const Tensor y0 = f(inputs);
  Generator gen(12345);
  const Tensor w = rand(y0.shape(), DType::f64, kCPU, &gen, 0.5, 1.5).to(y0.device());
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
  }
  sum(mul(y0.to(DType::f64), w)).backward();
  std::ostringstream os;
  os.precision(12);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    const ref::Ref base = to_ref(x);
    const Tensor analytic = x.grad();
    const ref::Ref a = analytic.defined() ? to_ref(analytic) : ref::Ref{x.shape(), std::vector<double>(base.v.size(), 0.0)};
    for (int64_t j = 0; j < base.numel(); ++j) {
      auto eval = [&](double delta) {
        NoGradGuard no_grad;
        std::vector<double> v = base.v;
        v[j] += delta;
        std::vector<Tensor> args = inputs;
        args[i] = from_vector(v, x.shape()).to(x.device());
        return weighted_sum(f(args), w);
      };
      const double numeric = (eval(eps) - eval(-eps)) / (2 * eps);
      if (std::fabs(numeric - a.v[j]) > tol * (1.0 + std::fabs(numeric))) {
        os << "input " << i << " element " << j << " (shape " << shape_str(x.shape()) << "): analytic " << a.v[j]
           << ", numeric " << numeric;
        return os.str();
      }
    }
  }
  return {};
}

}  // namespace tessera::test
