// Language-model training loop, evaluation and checkpoints.
#include "tessera/nn/lm_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

namespace tessera::nn {
namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Vocabulary bytes as hex: the corpus may hold bytes that are not valid UTF-8 on their own,
// and safetensors metadata is JSON text.
std::string to_hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    out += digits[u >> 4];
    out += digits[u & 15];
  }
  return out;
}
std::string from_hex(const std::string& h, const std::string& path) {
  auto val = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw Error(detail::concat("load_language_model: '", path, "' has a corrupt vocabulary"));
  };
  TESSERA_CHECK(h.size() % 2 == 0 && !h.empty(), "load_language_model", "'", path, "' has a corrupt vocabulary");
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) out.push_back(static_cast<char>(val(h[i]) * 16 + val(h[i + 1])));
  return out;
}

Tensor lm_loss(LanguageModel& model, const Tensor& x, const Tensor& y, DType precision) {
  Tensor logits;
  if (precision == DType::f32) {
    logits = model.forward(x);
  } else {
    AutocastGuard autocast(precision);
    logits = model.forward(x);
  }
  return cross_entropy(logits.reshape({-1, logits.size(2)}), y.reshape({-1}));
}
}  // namespace

double evaluate_language_model(LanguageModel& model, const std::vector<int64_t>& data, int64_t batches, int64_t batch, int64_t context,
                               DType precision) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = model.parameters().front().device();
  Generator gen(1234);  // the same windows at every evaluation
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const auto [x, y] = sample_windows(data, batch, context, gen, device);
    total += lm_loss(model, x, y, precision).item<double>();
  }
  model.train(was_training);
  return total / static_cast<double>(batches);
}

std::vector<LMLog> train_language_model(LanguageModel& model, const TextCorpus& corpus, const LMTrainOptions& o,
                                        const std::function<void(const LMLog&)>& on_log) {
  TESSERA_CHECK(o.steps > 0 && o.batch > 0 && o.context > 0 && o.grad_accumulation > 0 && o.eval_every > 0 && o.eval_batches > 0,
                "train", "steps, batch, context, grad accumulation and evaluation sizes must be positive");
  TESSERA_CHECK(model.context() == 0 || o.context <= model.context(), "train", "--context ", o.context, " exceeds the model's ", model.context());
  const Device device = model.parameters().front().device();
  OptimOptions oo;
  oo.lr = o.lr;
  oo.weight_decay = o.weight_decay;
  oo.beta2 = 0.99;  // short runs: nanoGPT's setting for small models
  Adam optimizer(model.param_groups(oo), /*decoupled=*/true);
  const int64_t warmup = std::min(o.warmup, o.steps);
  Scheduler scheduler(optimizer, std::make_shared<ChainedLR>(std::vector<std::shared_ptr<LRSchedule>>{
                                     std::make_shared<LinearWarmup>(warmup, 0.01),
                                     std::make_shared<CosineLR>(o.steps, o.min_lr_factor)}));
  const int rank = o.ddp ? o.ddp->rank() : 0, world = o.ddp ? o.ddp->world_size() : 1;
  Generator gen(o.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank));  // each rank its own windows
  const std::vector<Tensor> params = model.parameters();
  std::vector<LMLog> logs;
  const auto start = Clock::now();
  double loss_sum = 0, train_seconds = 0;
  int64_t loss_count = 0, tokens = 0;
  model.train();
  for (int64_t step = 1; step <= o.steps; ++step) {
    const auto t0 = Clock::now();
    Tensor step_loss = zeros({}, DType::f32, device);
    for (int64_t a = 0; a < o.grad_accumulation; ++a) {
      const auto [x, y] = sample_windows(corpus.train, o.batch, o.context, gen, device);
      const Tensor loss = lm_loss(model, x, y, o.precision);
      const bool last = a + 1 == o.grad_accumulation;
      if (o.ddp && !last) {
        const auto local = o.ddp->no_sync();  // accumulate; the last micro-batch's backward reduces the sum
        div(loss, static_cast<double>(o.grad_accumulation)).backward();
      } else {
        div(loss, static_cast<double>(o.grad_accumulation)).backward();
      }
      step_loss = add(step_loss, div(loss.detach(), static_cast<double>(o.grad_accumulation)));
    }
    if (o.ddp) o.ddp->finish_gradient_sync();  // every rank now holds the same averaged gradients
    if (o.clip_norm > 0) clip_grad_norm_(params, o.clip_norm);
    optimizer.step();
    optimizer.zero_grad();
    scheduler.step();
    const double l = step_loss.item<double>();  // one sync per step
    // Under DDP every rank stops together (one alone would leave the others in a collective).
    const bool bad = o.ddp ? o.ddp->any_rank(!std::isfinite(l)) : !std::isfinite(l);
    TESSERA_CHECK(!bad, "train", "non-finite loss ", l, " at step ", step, o.ddp ? " (on some rank)" : "", "; lower --lr");
    train_seconds += seconds_since(t0);
    tokens += o.batch * o.context * o.grad_accumulation * world;
    loss_sum += l;
    ++loss_count;
    if (o.on_step) o.on_step(step, l);
    if (step % o.eval_every == 0 || step == o.steps) {
      LMLog log;
      log.step = step;
      log.train_loss = loss_sum / static_cast<double>(loss_count);
      if (o.ddp) log.train_loss = o.ddp->mean_over_ranks(log.train_loss);
      // Every rank evaluates the same windows with the same weights: the same number everywhere.
      log.val_loss = evaluate_language_model(model, corpus.val, o.eval_batches, o.batch * world, o.context, o.precision);
      log.lr = scheduler.lr();
      log.tokens_per_second = static_cast<double>(tokens) / (o.ddp ? o.ddp->mean_over_ranks(train_seconds) : train_seconds);
      log.seconds = seconds_since(start);
      logs.push_back(log);
      // A diverged update (finite loss before it, NaN weights after) must not replace a good
      // checkpoint: the evaluation with the new weights is the check.
      TESSERA_CHECK(std::isfinite(log.val_loss) && tessera::all_finite(params), "train", "the weights became non-finite at step ", step,
                    " (validation loss ", log.val_loss, "); lower --lr", o.checkpoint.empty() ? "" : "; the checkpoint was not written");
      if (!o.checkpoint.empty() && rank == 0) {
        Metadata meta = o.metadata;
        meta["step"] = std::to_string(step);
        meta["val_loss"] = std::to_string(log.val_loss);
        save_language_model(model, o.checkpoint, meta);
      }
      if (o.ddp && !o.checkpoint.empty()) o.ddp->barrier();  // no rank reads a checkpoint rank 0 is still writing
      if (on_log) on_log(log);
      loss_sum = 0, loss_count = 0, tokens = 0, train_seconds = 0;
    }
  }
  if (o.ddp) TESSERA_CHECK(o.ddp->replicas_equal(), "train", "the ranks' parameters differ after training (gradients were not synchronised)");
  return logs;
}

void save_language_model(const LanguageModel& model, const std::string& path, const Metadata& metadata) {
  StateDict tensors;
  for (auto& [k, t] : model.state_dict()) tensors["model." + k] = t;
  Metadata meta = metadata;
  meta["format"] = "tessera-lm-1";
  if (meta.count("vocab")) meta["vocab_hex"] = to_hex(meta["vocab"]), meta.erase("vocab");
  save_safetensors(path, tensors, meta);
}

std::shared_ptr<LanguageModel> load_language_model(const std::string& path, Device device, CharVocab& vocab) {
  const SafetensorsContent content = load_safetensors(path, device);
  const Metadata& m = content.metadata;
  auto get = [&](const char* key) {
    const auto it = m.find(key);
    TESSERA_CHECK(it != m.end(), "load_language_model", "'", path, "' is not a language-model checkpoint (no '", key,
                  "'; write one with tessera train --model gpt --checkpoint F)");
    return it->second;
  };
  TESSERA_CHECK(get("format") == "tessera-lm-1", "load_language_model", "'", path, "' has format '", get("format"), "', expected tessera-lm-1");
  vocab.chars = from_hex(get("vocab_hex"), path);
  // The config is checked against the tensors before anything is built: a config that says a
  // million layers must not allocate them before load_state_dict could refuse the file.
  int64_t largest_extent = 0;
  for (const auto& [k, t] : content.tensors) {
    for (int64_t e : t.shape()) largest_extent = std::max(largest_extent, e);
  }
  const auto tensor_count = static_cast<int64_t>(content.tensors.size());
  const auto check_size = [&](const char* key, int64_t v, int64_t most) {
    TESSERA_CHECK(v >= 1 && v <= most, "load_language_model", "'", path, "' has model_config ", key, " ", v, ", which its ", tensor_count,
                  " tensors (largest extent ", largest_extent, ") cannot hold");
  };
  nlohmann::json cfg;
  std::shared_ptr<LanguageModel> model;
  try {
    cfg = nlohmann::json::parse(get("model_config"));
    check_size("layers", cfg.at("layers").get<int64_t>(), tensor_count);
    check_size("dim", cfg.at("dim").get<int64_t>(), largest_extent);
    if (cfg.contains("context")) check_size("context", cfg.at("context").get<int64_t>(), largest_extent);
    if (cfg.contains("heads")) check_size("heads", cfg.at("heads").get<int64_t>(), cfg.at("dim").get<int64_t>());
    const std::string kind = cfg.at("model").get<std::string>();
    const Placement place{DType::f32, device};
    if (kind == "gpt") {
      GPTConfig c;
      c.vocab = vocab.size();
      c.context = cfg.at("context").get<int64_t>();
      c.layers = cfg.at("layers").get<int64_t>();
      c.heads = cfg.at("heads").get<int64_t>();
      c.dim = cfg.at("dim").get<int64_t>();
      model = std::make_shared<GPT>(c, place);
    } else if (kind == "lstm") {
      CharLSTMConfig c;
      c.vocab = vocab.size();
      c.layers = cfg.at("layers").get<int64_t>();
      c.dim = cfg.at("dim").get<int64_t>();
      model = std::make_shared<CharLSTM>(c, place);
    } else {
      throw Error(detail::concat("load_language_model: '", path, "' holds an unknown model '", kind, "'"));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat("load_language_model: '", path, "' has a corrupt model_config: ", e.what()));
  }
  StateDict state;
  for (const auto& [k, t] : content.tensors) {
    if (k.rfind("model.", 0) == 0) state[k.substr(6)] = t;
  }
  model->load_state_dict(state);
  TESSERA_CHECK(tessera::all_finite(model->parameters()), "load_language_model", "'", path,
                "' holds non-finite weights (NaN or infinity): the run that wrote it diverged");
  model->eval();
  return model;
}

}  // namespace tessera::nn
