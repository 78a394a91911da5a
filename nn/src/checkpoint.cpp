// One-file training checkpoints (checkpoint.h): saved by the Trainer and by custom loops.
#include "tessera/nn/checkpoint.h"

#include <charconv>
#include <cstdint>
#include <vector>

namespace tessera::nn {

void save_checkpoint(const std::string& path, const CheckpointParts& parts, int64_t epoch, const Metadata& metadata) {
  TESSERA_CHECK(parts.model != nullptr, "save_checkpoint", "no model given for '", path, "'");
  TESSERA_CHECK(epoch >= 0, "save_checkpoint", "epoch must be >= 0, got ", epoch);
  StateDict tensors;
  for (auto& [k, t] : parts.model_state ? parts.model_state() : parts.model->state_dict()) tensors["model." + k] = t;
  if (parts.optimizer) {
    for (auto& [k, t] : parts.optimizer_state ? parts.optimizer_state() : parts.optimizer->state_dict()) tensors["optimizer." + k] = t;
  }
  // Never replace a good checkpoint with a poisoned one. One sync per device in the common
  // case; tensor by tensor only to name the culprit.
  std::vector<Tensor> values;
  for (const auto& entry : tensors) values.push_back(entry.second);
  if (!all_finite(values)) {
    for (const auto& [k, t] : tensors) {
      TESSERA_CHECK(all_finite(t), "save_checkpoint", "'", k, "' holds NaN or Inf values; '", path, "' is left as it was");
    }
  }
  Metadata meta = metadata;
  meta["format"] = "tessera-checkpoint-1";
  if (parts.optimizer) meta["optimizer"] = parts.optimizer->name();
  meta["epoch"] = std::to_string(epoch);
  meta["step"] = std::to_string(parts.optimizer ? parts.optimizer->steps() : 0);
  meta["scheduler_step"] = std::to_string(parts.scheduler ? parts.scheduler->steps() : 0);
  meta["rng_seed"] = std::to_string(default_generator().seed());
  meta["rng_offset"] = std::to_string(default_generator().offset());
  if (!meta.count("config")) meta["config"] = "{}";
  if (parts.scaler) {
    for (const auto& [k, v] : parts.scaler->state_dict()) meta["scaler." + k] = v;
  }
  save_safetensors(path, tensors, meta);
}

namespace {
// A metadata entry that must be present: its absence means the file is not a checkpoint.
const std::string& required_entry(const Metadata& meta, const char* key, const std::string& path) {
  auto it = meta.find(key);
  TESSERA_CHECK(it != meta.end(), "load_checkpoint", "'", path, "' is not a Tessera checkpoint (no '", key, "')");
  return it->second;
}

// A counter from checkpoint metadata: a whole non-negative decimal number, or a clear error
// (std::stoll would say only "stoll", and accept "-3" or "12abc").
uint64_t parse_counter(const Metadata& meta, const char* key, const std::string& path) {
  const std::string& text = required_entry(meta, key, path);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  TESSERA_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(), "load_checkpoint", "'", path, "' has a corrupt '",
                key, "' entry \"", text, "\" (expected a non-negative integer)");
  return v;
}
}  // namespace

CheckpointInfo load_checkpoint(const std::string& path, const CheckpointParts& parts, bool reset_optimizer) {
  TESSERA_CHECK(parts.model != nullptr, "load_checkpoint", "no model given for '", path, "'");
  const SafetensorsContent c = load_safetensors(path);
  const std::string& format = required_entry(c.metadata, "format", path);
  TESSERA_CHECK(format == "tessera-checkpoint-1", "load_checkpoint", "'", path, "' has unknown format ", format);
  // Validate everything before changing anything.
  constexpr uint64_t kMaxCount = uint64_t{1} << 53;
  const uint64_t epoch = parse_counter(c.metadata, "epoch", path), scheduler_step = parse_counter(c.metadata, "scheduler_step", path);
  const uint64_t step = parse_counter(c.metadata, "step", path);
  const uint64_t rng_seed = parse_counter(c.metadata, "rng_seed", path), rng_offset = parse_counter(c.metadata, "rng_offset", path);
  TESSERA_CHECK(epoch < kMaxCount && step < kMaxCount && scheduler_step < kMaxCount, "load_checkpoint", "'", path,
                "' has implausible counters (epoch ", epoch, ", step ", step, ")");
  StateDict model_state, optim_state;
  for (const auto& [k, t] : c.tensors) {
    TESSERA_CHECK(all_finite(t), "load_checkpoint", "'", path, "': '", k, "' holds NaN or Inf values");
    if (k.rfind("model.", 0) == 0) {
      model_state[k.substr(6)] = t;
    } else if (k.rfind("optimizer.", 0) == 0) {
      optim_state[k.substr(10)] = t;
    }
  }
  Optimizer* optimizer = reset_optimizer ? nullptr : parts.optimizer;
  if (optimizer) {
    if (auto it = c.metadata.find("optimizer"); it != c.metadata.end()) {
      TESSERA_CHECK(it->second == optimizer->name(), "load_checkpoint", "'", path, "' was trained with ", it->second, ", this run uses ",
                    optimizer->name(), " (pass --reset-optimizer to start ", optimizer->name(), " afresh)");
    }
    TESSERA_CHECK(optim_state.count("steps"), "load_checkpoint", "'", path,
                  "' holds no optimizer state (pass --reset-optimizer to start the optimizer afresh)");
  }
  const auto params = parts.model->parameters();
  const Device device = params.empty() ? kCPU : params.front().device();
  for (auto& [k, t] : model_state) t = t.to(device);
  if (parts.load_model_state) parts.load_model_state(model_state);
  else parts.model->load_state_dict(model_state);
  if (optimizer && parts.load_optimizer_state) parts.load_optimizer_state(optim_state);
  else if (optimizer) optimizer->load_state_dict(optim_state);
  if (parts.scheduler) parts.scheduler->set_step(static_cast<int64_t>(scheduler_step));
  if (parts.scaler) {
    std::map<std::string, std::string> scaler_state;
    for (const auto& [k, v] : c.metadata) {
      if (k.rfind("scaler.", 0) == 0) scaler_state[k.substr(7)] = v;
    }
    if (!scaler_state.empty()) parts.scaler->load_state_dict(scaler_state);
  }
  default_generator().manual_seed(rng_seed);
  default_generator().set_offset(rng_offset);
  return CheckpointInfo{static_cast<int64_t>(epoch), static_cast<int64_t>(step), c.metadata};
}

}  // namespace tessera::nn
