// The `attention` suite: fused scaled_dot_product_attention forward + backward against the
// materialised reference composition (time and peak allocator bytes, T = 256 ... 4096), and a
// whole GPT train step (the default `tessera train --model gpt` config) against libtorch
// running the same model, reported as tokens/s and model FLOPs utilisation.
#include <memory>

#include "bench.h"
#include "peers.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/optim.h"
#include "tessera/tessera.h"

namespace tessera::bench {

void attention_cases(Device dev, bool quick, int threads, std::vector<Case>& out) {
  const bool on_cpu = dev.type == DeviceType::cpu;
  const int64_t b = 1, h = 4, d = 64;
  // f32 everywhere; bf16 too on a GPU, where the matrix-unit kernels (mma.h) run it.
  std::vector<std::pair<DType, int64_t>> cases;
  for (int64_t t : quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 512, 1024, 2048, 4096}) cases.emplace_back(DType::f32, t);
  if (!on_cpu && dev.type != DeviceType::emulated && !quick) {
    for (int64_t t : {1024, 4096}) cases.emplace_back(DType::bf16, t);
  }
  for (const auto& [dt, t] : cases) {
    auto in = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{randn({b, h, t, d}, dt, dev), randn({b, h, t, d}, dt, dev),
                                                                        randn({b, h, t, d}, dt, dev), randn({b, h, t, d}, dt, dev)});
    const auto body = [in](bool fused) {
      return [in, fused] {
        Tensor q = (*in)[0].detach().set_requires_grad(), k = (*in)[1].detach().set_requires_grad(), v = (*in)[2].detach().set_requires_grad();
        const Tensor y = fused ? scaled_dot_product_attention(q, k, v, true) : scaled_dot_product_attention_reference(q, k, v, true);
        backward({y}, {(*in)[3]});
      };
    };
    // Causal: half of the 2 forward and 5 backward T x T x D products.
    const double flops = 0.5 * 14.0 * static_cast<double>(b * h) * static_cast<double>(t) * static_cast<double>(t) * static_cast<double>(d);
    Case c{"attention", "sdpa_causal_fwd_bwd", dt == DType::bf16 ? "bf16" : "f32", {b, h, t, d}, flops, 0, 1, body(true), Peer{"naive", body(false)}};
    c.peak_memory = true;
    out.push_back(c);
  }
  // BERT-style padded batches: a key-padding mask [B, 1, 1, T] (the second sequence half padding)
  // against the same fused call without a mask, time and peak bytes: the kernels read the mask
  // per tile, so the peak stays the unmasked kernel's (not a T x T bias).
  for (int64_t t : quick ? std::vector<int64_t>{256} : std::vector<int64_t>{1024, 4096}) {
    const int64_t pb = 2, ph = 4;
    const Tensor keys = arange(t, DType::i64, dev).reshape({1, 1, 1, t});
    const Tensor lens = from_vector<int64_t>({t, t / 2}, {pb, 1, 1, 1}).to(dev);
    auto in = std::make_shared<std::vector<Tensor>>(
        std::vector<Tensor>{randn({pb, ph, t, d}, DType::f32, dev), randn({pb, ph, t, d}, DType::f32, dev),
                            randn({pb, ph, t, d}, DType::f32, dev), randn({pb, ph, t, d}, DType::f32, dev), lt(keys, lens)});
    const auto body = [in](bool masked) {
      return [in, masked] {
        Tensor q = (*in)[0].detach().set_requires_grad(), k = (*in)[1].detach().set_requires_grad(),
               v = (*in)[2].detach().set_requires_grad();
        backward({scaled_dot_product_attention(q, k, v, masked ? (*in)[4] : Tensor())}, {(*in)[3]});
      };
    };
    const double flops = 14.0 * static_cast<double>(pb * ph) * static_cast<double>(t) * static_cast<double>(t) * static_cast<double>(d);
    Case c{"attention", "sdpa_key_padding_fwd_bwd", "f32", {pb, ph, t, d}, flops, 0, 1, body(true), Peer{"unmasked", body(false)}};
    c.peak_memory = true;
    out.push_back(c);
  }
  // The default GPT of `tessera train --model gpt` (fortunes' vocabulary of 112 characters).
  const int64_t vocab = 112, context = 128, layers = 4, heads = 4, dim = 128, batch = quick ? 4 : 32;
  nn::GPTConfig cfg{vocab, context, layers, heads, dim, 0.0};
  auto model = std::make_shared<nn::GPT>(cfg, nn::Placement{DType::f32, dev});
  nn::OptimOptions oo;
  oo.weight_decay = 0.1;
  oo.beta2 = 0.99;
  auto opt = std::make_shared<nn::Adam>(model->param_groups(oo), true);
  auto data = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{randint(0, vocab, {batch, context}, DType::i64, dev),
                                                                        randint(0, vocab, {batch, context}, DType::i64, dev)});
  const auto params = model->parameters();
  // 6 N per token for the weights (the tied head counted once as a matrix) + 12 L T C for attention, causal halved.
  const double n_params = static_cast<double>(model->num_parameters());
  const double tokens = static_cast<double>(batch * context);
  const double flops = tokens * (6.0 * n_params + 6.0 * static_cast<double>(layers * context * dim));
  Case step{"attention", "gpt_train_step", "f32", {batch, context, layers, dim}, flops, 0, 1, [model, opt, data, params, vocab] {
              const Tensor logits = model->forward((*data)[0]);
              cross_entropy(logits.reshape({-1, vocab}), (*data)[1].reshape({-1})).backward();
              nn::clip_grad_norm_(params, 1.0);
              opt->step();
              opt->zero_grad();
            },
            std::nullopt};
  if (on_cpu) step.peer = peers::torch_gpt_step(vocab, context, layers, heads, dim, batch, threads);
  out.push_back(step);
  // The same step against PyTorch from Python (perf/gpt_peer.py, python3-torch), timed by the
  // script in its own process: the peer users actually run.
  if (on_cpu) {
    if (auto py = peers::python_gpt_step(vocab, context, layers, heads, dim, batch, threads, quick ? 3 : 15)) {
      Case vs_python = step;
      vs_python.name = "gpt_train_step_vs_python";
      vs_python.peer = std::move(py);
      out.push_back(vs_python);
    }
  }
}

}  // namespace tessera::bench
