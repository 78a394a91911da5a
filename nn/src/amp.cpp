#include "tessera/nn/amp.h"

#include <charconv>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace tessera::nn {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  TESSERA_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale), "GradScaler", "init_scale must be positive and finite, got ",
                options.init_scale);
  TESSERA_CHECK(options.growth_factor > 1, "GradScaler", "growth_factor must be > 1, got ", options.growth_factor);
  TESSERA_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, "GradScaler", "backoff_factor must be in (0, 1), got ",
                options.backoff_factor);
  TESSERA_CHECK(options.growth_interval >= 1, "GradScaler", "growth_interval must be >= 1, got ", options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled ? mul(loss, scale_) : loss; }

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled || unscaled_) return;
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  std::vector<Tensor> grads;
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      g.mul_(inv);
      grads.push_back(g);
    }
  }
  found_inf_ = !all_finite(grads);
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  unscale_(optimizer);
  if (found_inf_) {
    ++skipped_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

std::map<std::string, std::string> GradScaler::state_dict() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", scale_);
  return {{"scale", buf}, {"growth_tracker", std::to_string(growth_tracker_)}, {"skipped_steps", std::to_string(skipped_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, std::string>& state) {
  auto get = [&](const char* key) {
    auto it = state.find(key);
    TESSERA_CHECK(it != state.end(), "GradScaler load_state_dict", "missing '", key, "'");
    return it->second;
  };
  // Whole-string numbers only: "stod"/"stoll" messages would not say which entry is corrupt.
  auto number = [&]<class T>(const char* key, T) {
    const std::string text = get(key);
    T v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    TESSERA_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(), "GradScaler load_state_dict", "corrupt '",
                  key, "' entry \"", text, "\"");
    return v;
  };
  const double s = number("scale", 0.0);
  TESSERA_CHECK(s > 0 && std::isfinite(s), "GradScaler load_state_dict", "invalid scale ", s);
  const int64_t tracker = number("growth_tracker", int64_t{0}), skipped = number("skipped_steps", int64_t{0});
  TESSERA_CHECK(tracker >= 0 && skipped >= 0, "GradScaler load_state_dict", "negative counters");
  scale_ = s;
  growth_tracker_ = tracker;
  skipped_ = skipped;
  unscaled_ = found_inf_ = false;
}

DType parse_precision(const std::string& name) {
  if (name == "f32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16") return DType::f16;
  throw Error("precision: unknown precision '" + name + "' (f32, bf16, f16)");
}

}  // namespace tessera::nn
