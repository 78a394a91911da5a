// The workloads of `tessera bench`, written once against the public API and run on any
// device. Shapes follow the issue: square GEMMs and the MLP's layer shapes, bandwidth-bound
// elementwise ops, reductions, softmax, layer_norm, the CNN's second convolution, pooling,
// embedding, the fused Adam update, whole MLP and CNN training steps and tiny-op overhead.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <memory>

#include "bench.h"
#include "checks.h"
#include "tessera/autocast.h"
#include "peers.h"
#include "tessera/nn/models.h"
#include "tessera/nn/optim.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

struct Ctx {
  Device dev;
  bool quick, on_cpu;
  int threads;
};

std::string dtype_name_short(DType dt) { return dt == DType::bf16 ? "bf16" : dt == DType::f16 ? "f16" : "f32"; }

// f32 dot products: 2e-5 of the sum of |terms| (blocked f32 sums of up to 4096 terms stay well
// inside; a kernel 1% off does not).
constexpr Tolerance kDotF32{1e-6, 1e-6, 2e-5};
double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

template <class... T> std::shared_ptr<std::vector<Tensor>> keep(T... ts) { return std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{ts...}); }

void gemm_cases(const Ctx& c, std::vector<Case>& out) {
  std::vector<int64_t> sizes = c.quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 512, 1024, 2048};
  if (!c.quick && c.dev.type != DeviceType::kokkos) sizes.push_back(4096);
  for (int64_t n : sizes) {
    auto t = keep(randn({n, n}, DType::f32, c.dev), randn({n, n}, DType::f32, c.dev));
    Case k{"gemm", "matmul", "f32", {n, n, n}, 2.0 * n * n * n, 0, 1, [t] { (void)matmul((*t)[0], (*t)[1]); }, std::nullopt};
    k.peer = c.on_cpu ? peers::openblas_sgemm(n, n, n, c.threads) : peers::vendor_gemm(c.dev, DType::f32, n, n, n);
    k.check = matmul_check((*t)[0], (*t)[1], false, Tensor(), false, [t] { return matmul((*t)[0], (*t)[1]); }, kDotF32);
    out.push_back(k);
  }
  // 16-bit GEMMs (f32 accumulation) next to the f32 ones above; bf16 against oneDNN's bf16 GEMM
  // on the CPU, against cuBLAS on a GPU (where 1024 is still launch-bound: up to 8192 there).
  const bool gpu = !c.on_cpu && c.dev.type != DeviceType::kokkos;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int64_t n : c.quick ? std::vector<int64_t>{128} : (gpu ? std::vector<int64_t>{1024, 4096, 8192} : std::vector<int64_t>{512, 1024})) {
      auto t = keep(randn({n, n}, dt, c.dev), randn({n, n}, dt, c.dev));
      Case k{"gemm", "matmul", std::string(dt == DType::bf16 ? "bf16" : "f16"), {n, n, n}, 2.0 * n * n * n, 0, 1,
             [t] { (void)matmul((*t)[0], (*t)[1]); }, std::nullopt};
      if (c.on_cpu && dt == DType::bf16) k.peer = peers::onednn_bf16_gemm(n, n, n, c.threads);
      if (!c.on_cpu) k.peer = peers::vendor_gemm(c.dev, dt, n, n, n);
      // Inputs are exact in double; the f32 sum is rounded once to the 16-bit output.
      k.check = matmul_check((*t)[0], (*t)[1], false, Tensor(), false, [t] { return matmul((*t)[0], (*t)[1]); },
                             Tolerance{dt == DType::bf16 ? 4e-3 : 5e-4, 1e-6, 2e-5});
      out.push_back(k);
    }
  }
  // The MLP's layers (batch 128): linear with the fused bias + ReLU epilogue.
  for (auto [in, outf] : {std::pair<int64_t, int64_t>{784, 256}, {256, 128}, {128, 10}}) {
    const int64_t b = 128;
    auto t = keep(randn({b, in}, DType::f32, c.dev), randn({outf, in}, DType::f32, c.dev), randn({outf}, DType::f32, c.dev));
    Case k{"gemm", "mlp_linear_relu", "f32", {b, outf, in}, 2.0 * b * in * outf, 0, 1,
           [t] { (void)linear((*t)[0], (*t)[1], (*t)[2], Activation::relu); }, std::nullopt};
    if (c.on_cpu) k.peer = peers::openblas_sgemm(b, outf, in, c.threads);
    k.check = matmul_check((*t)[0], (*t)[1], true, (*t)[2], true, [t] { return linear((*t)[0], (*t)[1], (*t)[2], Activation::relu); }, kDotF32);
    out.push_back(k);
  }
}

void elementwise_cases(const Ctx& c, std::vector<Case>& out) {
  const int64_t n = c.quick ? (1 << 20) : (16 << 20), cols = 4096, rows = n / cols;
  auto t = keep(rand({n}, DType::f32, c.dev), rand({n}, DType::f32, c.dev), rand({rows, cols}, DType::f32, c.dev),
                rand({cols}, DType::f32, c.dev));
  const double f = static_cast<double>(n) * 4;
  // The bandwidth bar: the STREAM triad on the CPU, a device-to-device copy on GPUs.
  auto triad = [&] { return c.on_cpu ? std::optional<Peer>(peers::stream_triad(n, c.threads)) : peers::device_copy(c.dev, n * 4); };
  out.push_back({"elementwise", "add", "f32", {n}, 0, 3 * f, 1, [t] { (void)add((*t)[0], (*t)[1]); }, triad()});
  out.push_back({"elementwise", "mul", "f32", {n}, 0, 3 * f, 1, [t] { (void)mul((*t)[0], (*t)[1]); }, triad()});
  out.push_back({"elementwise", "exp", "f32", {n}, 0, 2 * f, 1, [t] { (void)exp((*t)[0]); }, triad()});
  out.push_back({"elementwise", "log", "f32", {n}, 0, 2 * f, 1, [t] { (void)log((*t)[0]); }, triad()});
  out.push_back({"elementwise", "tanh", "f32", {n}, 0, 2 * f, 1, [t] { (void)tanh((*t)[0]); }, triad()});
  out.push_back({"elementwise", "gelu", "f32", {n}, 0, 2 * f, 1, [t] { (void)gelu((*t)[0]); }, triad()});
  out.push_back({"elementwise", "add_broadcast_row", "f32", {rows, cols}, 0, 2 * f, 1, [t] { (void)add((*t)[2], (*t)[3]); }, triad()});
  // A linear layer's bias + GELU epilogue as one pass (bias_activation), and as the two ops
  // gelu(x + b) a model would otherwise run (bytes counted once for both: x in, y out).
  out.push_back({"elementwise", "bias_gelu", "f32", {rows, cols}, 0, 2 * f, 1,
                 [t] { (void)bias_activation((*t)[2], (*t)[3], Activation::gelu); }, triad()});
  out.push_back({"elementwise", "bias_gelu_two_ops", "f32", {rows, cols}, 0, 2 * f, 1, [t] { (void)gelu(add((*t)[2], (*t)[3])); }, triad()});
  // The gate: each result against std:: functions in double.
  const auto add_ref = [](double a, double b) { return a + b; };
  const auto mul_ref = [](double a, double b) { return a * b; };
  const auto bias_gelu_ref = [](double a, double b) { return gelu_ref(a + b); };
  const std::vector<Check> checks = {
      binary_check((*t)[0], (*t)[1], [](const Tensor& a, const Tensor& b) { return add(a, b); }, add_ref),
      binary_check((*t)[0], (*t)[1], [](const Tensor& a, const Tensor& b) { return mul(a, b); }, mul_ref),
      unary_check((*t)[0], [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }),
      unary_check((*t)[0], [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }),
      unary_check((*t)[0], [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }),
      unary_check((*t)[0], [](const Tensor& x) { return gelu(x); }, gelu_ref),
      binary_check((*t)[2], (*t)[3], [](const Tensor& a, const Tensor& b) { return add(a, b); }, add_ref),
      binary_check((*t)[2], (*t)[3], [](const Tensor& a, const Tensor& b) { return bias_activation(a, b, Activation::gelu); }, bias_gelu_ref),
      binary_check((*t)[2], (*t)[3], [](const Tensor& a, const Tensor& b) { return gelu(add(a, b)); }, bias_gelu_ref)};
  for (size_t i = 0; i < checks.size(); ++i) out[out.size() - checks.size() + i].check = checks[i];
}

void reduction_cases(const Ctx& c, std::vector<Case>& out) {
  const int64_t n = c.quick ? (1 << 20) : (16 << 20), cols = 1024, rows = n / cols;
  auto t = keep(rand({n}, DType::f32, c.dev), rand({rows, cols}, DType::f32, c.dev));
  const double f = static_cast<double>(n) * 4;
  out.push_back({"reduce", "sum_all", "f32", {n}, 0, f, 1, [t] { (void)sum((*t)[0]); }, std::nullopt});
  out.push_back({"reduce", "sum_rows", "f32", {rows, cols}, 0, f, 1, [t] { (void)sum((*t)[1], {1}); }, std::nullopt});
  out.push_back({"reduce", "amax_rows", "f32", {rows, cols}, 0, f, 1, [t] { (void)amax((*t)[1], {1}); }, std::nullopt});
  // Row kernels read and write each element once at best: compared with the bandwidth bar.
  auto triad = [&] { return c.on_cpu ? std::optional<Peer>(peers::stream_triad(n, c.threads)) : peers::device_copy(c.dev, n * 4); };
  out.push_back({"softmax", "softmax", "f32", {rows, cols}, 0, 2 * f, 1, [t] { (void)softmax((*t)[1], -1); }, triad()});
  out.push_back({"layer_norm", "layer_norm", "f32", {rows, cols}, 0, 2 * f, 1, [t] { (void)layer_norm((*t)[1], 1); }, triad()});
  out[out.size() - 5].check = [t] {
    const auto x = host_values((*t)[0]);
    double total = 0;
    for (double v : x) total += v;
    return compare_sampled(sum((*t)[0]), [&](int64_t, double*) { return total; }, Tolerance{1e-5, 0, 0});
  };
  // Row statistics in double, per sampled row (the rows are 1024 long).
  const auto row_check = [t, cols](std::function<Tensor(const Tensor&)> op, std::function<double(const double*, int64_t, int64_t)> ref,
                                   int64_t per_row, Tolerance tol) -> Check {
    return [t, cols, op, ref, per_row, tol] {
      const auto x = host_values((*t)[1]);
      return compare_sampled(op((*t)[1]), [&](int64_t i, double*) { return ref(x.data() + i / per_row * cols, cols, i % per_row); }, tol);
    };
  };
  const auto row_sum = [](const double* r, int64_t n, int64_t) { return std::accumulate(r, r + n, 0.0); };
  const auto row_max = [](const double* r, int64_t n, int64_t) { return *std::max_element(r, r + n); };
  const auto row_softmax = [](const double* r, int64_t n, int64_t j) {
    const double m = *std::max_element(r, r + n);
    double z = 0;
    for (int64_t k = 0; k < n; ++k) z += std::exp(r[k] - m);
    return std::exp(r[j] - m) / z;
  };
  const auto row_layer_norm = [](const double* r, int64_t n, int64_t j) {
    const double mean = std::accumulate(r, r + n, 0.0) / static_cast<double>(n);
    double var = 0;
    for (int64_t k = 0; k < n; ++k) var += (r[k] - mean) * (r[k] - mean);
    return (r[j] - mean) / std::sqrt(var / static_cast<double>(n) + 1e-5);
  };
  out[out.size() - 4].check = row_check([](const Tensor& x) { return sum(x, {1}); }, row_sum, 1, Tolerance{1e-5, 1e-6, 0});
  out[out.size() - 3].check = row_check([](const Tensor& x) { return amax(x, {1}); }, row_max, 1, Tolerance{0, 0, 0});
  out[out.size() - 2].check = row_check([](const Tensor& x) { return softmax(x, -1); }, row_softmax, cols, Tolerance{1e-5, 1e-9, 0});
  out[out.size() - 1].check = row_check([](const Tensor& x) { return layer_norm(x, 1); }, row_layer_norm, cols, Tolerance{1e-4, 1e-5, 0});
}

void conv_cases(const Ctx& c, std::vector<Case>& out) {
  // The CNN's second convolution: 32 -> 64 channels, 3x3, padding 1, on 14x14 maps.
  const int64_t b = c.quick ? 8 : 128, ch = 32, h = 14, o = 64;
  const double flops = 2.0 * b * o * h * h * ch * 9;
  auto t = keep(randn({b, ch, h, h}, DType::f32, c.dev), randn({o, ch, 3, 3}, DType::f32, c.dev));
  Case fwd{"conv", "conv2d_fwd", "f32", {b, ch, h, h, o}, flops, 0, 1, [t] { (void)conv2d((*t)[0], (*t)[1], Tensor(), {1, 1}, {1, 1}); },
           std::nullopt};
  auto g = keep(randn({b, ch, h, h}, DType::f32, c.dev).set_requires_grad(), randn({o, ch, 3, 3}, DType::f32, c.dev).set_requires_grad());
  Case bwd{"conv", "conv2d_fwd_bwd", "f32", {b, ch, h, h, o}, 3 * flops, 0, 1,
           [g] { sum(conv2d((*g)[0], (*g)[1], Tensor(), {1, 1}, {1, 1})).backward(); }, std::nullopt};
  // The two gradients apart: the forward and one of them (a first layer needs no input gradient).
  auto gx = keep(randn({b, ch, h, h}, DType::f32, c.dev).set_requires_grad(), randn({o, ch, 3, 3}, DType::f32, c.dev));
  Case dx{"conv", "conv2d_fwd_dx", "f32", {b, ch, h, h, o}, 2 * flops, 0, 1,
          [gx] { sum(conv2d((*gx)[0], (*gx)[1], Tensor(), {1, 1}, {1, 1})).backward(); }, std::nullopt};
  auto gw = keep(randn({b, ch, h, h}, DType::f32, c.dev), randn({o, ch, 3, 3}, DType::f32, c.dev).set_requires_grad());
  Case dw{"conv", "conv2d_fwd_dw", "f32", {b, ch, h, h, o}, 2 * flops, 0, 1,
          [gw] { sum(conv2d((*gw)[0], (*gw)[1], Tensor(), {1, 1}, {1, 1})).backward(); }, std::nullopt};
  if (c.on_cpu) {
    fwd.peer = peers::torch_conv2d(b, ch, h, o, false, false, c.threads), bwd.peer = peers::torch_conv2d(b, ch, h, o, true, true, c.threads);
    dx.peer = peers::torch_conv2d(b, ch, h, o, true, false, c.threads), dw.peer = peers::torch_conv2d(b, ch, h, o, false, true, c.threads);
  }
  // The gate: sampled outputs as direct 3x3 sums (padding 1) in double.
  fwd.check = [t, ch, h, o] {
    const auto x = host_values((*t)[0]), w = host_values((*t)[1]);
    return compare_sampled(conv2d((*t)[0], (*t)[1], Tensor(), {1, 1}, {1, 1}), [&](int64_t i, double* scale) {
      const int64_t xo = i % h, yo = i / h % h, oc = i / (h * h) % o, img = i / (h * h * o);
      double acc = 0, mag = 0;
      for (int64_t ci = 0; ci < ch; ++ci) {
        for (int64_t ky = 0; ky < 3; ++ky) {
          for (int64_t kx = 0; kx < 3; ++kx) {
            const int64_t yi = yo + ky - 1, xi = xo + kx - 1;
            if (yi < 0 || yi >= h || xi < 0 || xi >= h) continue;
            const double term = x[static_cast<size_t>(((img * ch + ci) * h + yi) * h + xi)] * w[static_cast<size_t>(((oc * ch + ci) * 3 + ky) * 3 + kx)];
            acc += term, mag += std::fabs(term);
          }
        }
      }
      *scale = mag;
      return acc;
    }, kDotF32, 512);
  };
  out.push_back(fwd);
  out.push_back(bwd);
  out.push_back(dx);
  out.push_back(dw);
  const int64_t pb = c.quick ? 8 : 128;
  auto p = keep(randn({pb, 32, 28, 28}, DType::f32, c.dev));
  out.push_back({"pool", "max_pool2d", "f32", {pb, 32, 28, 28}, 0, 4.0 * pb * 32 * 28 * 28 * 1.25, 1,
                 [p] { (void)max_pool2d((*p)[0], {2, 2}); },
                 c.on_cpu ? std::optional<Peer>(peers::stream_triad(c.quick ? (1 << 20) : (16 << 20), c.threads)) : std::nullopt});
  out.back().check = [p, pb] {
    const auto x = host_values((*p)[0]);
    return compare_sampled(max_pool2d((*p)[0], {2, 2}), [&](int64_t i, double*) {
      const int64_t xo = i % 14, yo = i / 14 % 14, plane = i / (14 * 14);
      const double* base = x.data() + plane * 28 * 28 + 2 * yo * 28 + 2 * xo;
      return std::max(std::max(base[0], base[1]), std::max(base[28], base[29]));
    }, Tolerance{0, 0, 0});
  };
  (void)pb;
  // Forward and backward as training runs them: x, y, the int64 argmax and both gradients are
  // 14 bytes per input element.
  auto pg = keep(randn({pb, 32, 28, 28}, DType::f32, c.dev), randn({pb, 32, 14, 14}, DType::f32, c.dev));
  out.push_back({"pool", "max_pool2d_fwd_bwd", "f32", {pb, 32, 28, 28}, 0, 14.0 * pb * 32 * 28 * 28, 1,
                 [pg] {
                   Tensor x = (*pg)[0].detach().set_requires_grad();
                   backward({max_pool2d(x, {2, 2})}, {(*pg)[1]});
                 },
                 c.on_cpu ? std::optional<Peer>(peers::stream_triad(c.quick ? (1 << 20) : (16 << 20), c.threads)) : std::nullopt});
}

void memory_op_cases(const Ctx& c, std::vector<Case>& out) {
  const int64_t vocab = c.quick ? 4096 : 50000, dim = 256, lookups = c.quick ? 512 : 4096;
  auto e = keep(randn({vocab, dim}, DType::f32, c.dev), randint(0, vocab, {lookups}, DType::i64, c.dev));
  out.push_back({"gather", "embedding", "f32", {vocab, dim, lookups}, 0, 2.0 * lookups * dim * 4, 1,
                 [e] { (void)embedding((*e)[0], (*e)[1]); }, std::nullopt});
  out.back().check = [e, dim] {
    const auto table = host_values((*e)[0]), ids = host_values((*e)[1]);
    return compare_sampled(embedding((*e)[0], (*e)[1]), [&](int64_t i, double*) {
      return table[static_cast<size_t>(static_cast<int64_t>(ids[static_cast<size_t>(i / dim)]) * dim + i % dim)];
    }, Tolerance{0, 0, 0});
  };
  const int64_t n = c.quick ? (1 << 16) : (1 << 22);
  auto a = keep(randn({n}, DType::f32, c.dev), randn({n}, DType::f32, c.dev), zeros({n}, DType::f32, c.dev), zeros({n}, DType::f32, c.dev));
  OptimizerAttrs attrs;
  attrs.lr = 1e-3;
  out.push_back({"adam", "adam_update", "f32", {n}, 0, 7.0 * n * 4, 1,
                 [a, attrs] { adam_update_((*a)[0], (*a)[1], (*a)[2], (*a)[3], attrs); }, std::nullopt});
}

struct TrainStep {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<nn::Adam> opt;
  Tensor x, y;
  DType precision = DType::f32;  // bf16/f16: the forward under autocast (f32 master weights)
  void step() {
    opt->zero_grad();
    Tensor loss;
    {
      const AutocastGuard autocast(precision == DType::f32 ? DType::bf16 : precision, precision != DType::f32);
      loss = cross_entropy(model->forward(x), y);
    }
    loss.backward();
    opt->step();
  }
};

Body train_body(std::shared_ptr<nn::Sequential> model, int64_t batch, Device dev, DType precision = DType::f32) {
  auto s = std::make_shared<TrainStep>();
  s->precision = precision;
  s->model = std::move(model);
  nn::OptimOptions o;
  o.lr = 1e-3;
  s->opt = std::make_unique<nn::Adam>(s->model->parameters(), o);
  s->x = randn({batch, 1, 28, 28}, DType::f32, dev);
  s->y = randint(0, 10, {batch}, DType::i64, dev);
  return [s] { s->step(); };
}

void train_cases(const Ctx& c, std::vector<Case>& out) {
  const int64_t b = 128, cb = c.quick ? 16 : 128;
  const double mlp_flops = 3.0 * 2 * b * (784 * 256 + 256 * 128 + 128 * 10);
  Case mlp{"train", "mlp_step", "f32", {b, 784, 256, 128, 10}, mlp_flops, 0, 1, train_body(nn::make_mlp({DType::f32, c.dev}), b, c.dev),
           std::nullopt};
  Case cnn{"train", "cnn_step", "f32", {cb, 1, 28, 28}, 0, 0, 1, train_body(nn::make_cnn({DType::f32, c.dev}), cb, c.dev), std::nullopt};
  if (c.on_cpu) mlp.peer = peers::torch_mlp_step(b, c.threads), cnn.peer = peers::torch_cnn_step(cb, c.threads);
  out.push_back(mlp);
  out.push_back(cnn);
  // Mixed precision next to f32: the same CNN step under autocast, its peer the f32 step.
  for (DType dt : {DType::bf16, DType::f16}) {
    Case k{"train", "cnn_step", dtype_name_short(dt), {cb, 1, 28, 28}, 0, 0, 1, train_body(nn::make_cnn({DType::f32, c.dev}), cb, c.dev, dt),
           Peer{"tessera-f32", train_body(nn::make_cnn({DType::f32, c.dev}), cb, c.dev)}};
    out.push_back(k);
  }
}

// Fused training kernels against their unfused compositions (the peer: set_fused_kernels(false)).
Body with_fused(bool on, std::function<void()> body) {
  return [on, body] {
    const bool saved = fused_kernels();
    set_fused_kernels(on);
    body();
    set_fused_kernels(saved);
  };
}

void fused_cases(const Ctx& c, std::vector<Case>& out) {
  const int64_t rows = c.quick ? 1024 : 8192, classes = 1000, n = c.quick ? (1 << 18) : (1 << 22);
  auto ce = keep(randn({rows, classes}, DType::f32, c.dev), randint(0, classes, {rows}, DType::i64, c.dev));
  const auto ce_body = [ce] {
    Tensor x = (*ce)[0].detach().set_requires_grad();
    cross_entropy(x, (*ce)[1]).backward();
  };
  out.push_back({"fused", "cross_entropy_fwd_bwd", "f32", {rows, classes}, 0, 0, 1, with_fused(true, ce_body),
                 Peer{"unfused", with_fused(false, ce_body)}});
  auto d = keep(randn({n}, DType::f32, c.dev), randn({n}, DType::f32, c.dev), randn({n}, DType::f32, c.dev));
  const auto drop_body = [d] {  // a dense upstream gradient, as inside a transformer block
    Tensor x = (*d)[0].detach().set_requires_grad();
    backward({dropout_add(x, (*d)[1], 0.1, true)}, {(*d)[2]});
  };
  out.push_back({"fused", "dropout_add_fwd_bwd", "f32", {n}, 0, 0, 1, with_fused(true, drop_body), Peer{"unfused", with_fused(false, drop_body)}});
  // A transformer MLP's up-projection: linear + bias + GELU, forward and backward (the fused
  // backward is one kernel from the pre-activation; the unfused one ~9 elementwise ops).
  const int64_t tokens = c.quick ? 256 : 2048, dm = c.quick ? 128 : 512;
  auto l = keep(randn({tokens, dm}, DType::f32, c.dev), mul(randn({4 * dm, dm}, DType::f32, c.dev), 0.05),
                randn({4 * dm}, DType::f32, c.dev), randn({tokens, 4 * dm}, DType::f32, c.dev));
  const auto lin_body = [l] {
    Tensor x = (*l)[0].detach().set_requires_grad(), w = (*l)[1].detach().set_requires_grad();
    Tensor b = (*l)[2].detach().set_requires_grad();
    backward({linear(x, w, b, Activation::gelu)}, {(*l)[3]});
  };
  out.push_back({"fused", "linear_gelu_fwd_bwd", "f32", {tokens, dm, 4 * dm}, 6.0 * tokens * dm * 4 * dm, 0, 1,
                 with_fused(true, lin_body), Peer{"unfused", with_fused(false, lin_body)}});
}

void overhead_cases(const Ctx& c, std::vector<Case>& out) {
  const int calls = c.quick ? 200 : 2000;
  auto t = keep(ones({1}, DType::f32, c.dev), ones({1}, DType::f32, c.dev));
  Case k{"overhead", "add_1elem", "f32", {1}, 0, 0, calls, [t, calls] {
           for (int i = 0; i < calls; ++i) (void)add((*t)[0], (*t)[1]);
         },
         std::nullopt};
  if (c.on_cpu) k.peer = peers::torch_add_1elem(calls, c.threads);
  out.push_back(k);
}
}  // namespace

void attention_cases(Device dev, bool quick, int threads, std::vector<Case>& out);  // attention_suite.cpp

const std::vector<std::string>& suite_names() {
  static const std::vector<std::string> names{"gemm", "elementwise", "reduce", "conv", "memory", "train", "fused", "attention", "overhead"};
  return names;
}

std::vector<Case> make_cases(const std::string& suite, Device device, bool quick, int threads) {
  const Ctx c{device, quick, device.type == DeviceType::cpu, threads};
  std::vector<Case> out;
  if (suite == "gemm") gemm_cases(c, out);
  else if (suite == "elementwise") elementwise_cases(c, out);
  else if (suite == "reduce") reduction_cases(c, out);
  else if (suite == "conv") conv_cases(c, out);
  else if (suite == "memory") memory_op_cases(c, out);
  else if (suite == "train") train_cases(c, out);
  else if (suite == "fused") fused_cases(c, out);
  else if (suite == "attention") attention_cases(device, quick, threads, out);
  else if (suite == "overhead") overhead_cases(c, out);
  else throw Error(detail::concat("bench: unknown suite '", suite, "' (known: gemm, elementwise, reduce, conv, memory, train, fused, attention, overhead)"));
  return out;
}

}  // namespace tessera::bench
