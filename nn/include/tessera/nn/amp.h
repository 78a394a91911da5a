#pragma once
// Mixed-precision training helpers: dynamic loss scaling for f16 (whose 5-bit exponent flushes
// small gradients to zero) and the precision names `tessera train --precision` accepts.
#include <cstdint>
#include <map>
#include <string>

#include "tessera/autocast.h"
#include "tessera/nn/optim.h"

namespace tessera::nn {

struct GradScalerOptions {
  double init_scale = 65536.0;      ///< 2^16, as in PyTorch
  double growth_factor = 2.0;       ///< scale *= this after growth_interval clean steps in a row
  double backoff_factor = 0.5;      ///< scale *= this after a step with Inf/NaN gradients
  int64_t growth_interval = 2000;
  bool enabled = true;              ///< false: every call is a pass-through
};

/**
 * Dynamic loss scaling. Per optimizer step:
 *   scaler.scale(loss).backward();
 *   scaler.unscale_(opt);          // optional: before clipping, so clipping sees true gradients
 *   clip_grad_norm_(...);
 *   scaler.step(opt);              // skipped when any gradient is Inf/NaN
 *   scaler.update();               // back off after an overflow, grow after a clean run
 * The Inf/NaN check reduces every gradient on its device and reads one scalar per device: one
 * host synchronisation per step, not one per parameter.
 */
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  /** loss * scale (loss itself when disabled). */
  Tensor scale(const Tensor& loss) const;
  /** Divides the optimizer's gradients by the scale in place and records whether any is Inf/NaN;
   *  a second call before update() does nothing. */
  void unscale_(Optimizer& optimizer);
  /** unscale_ (if not done) and optimizer.step() unless a gradient was Inf/NaN; returns whether it stepped. */
  bool step(Optimizer& optimizer);
  /** Adjusts the scale after step() and readies the scaler for the next step. */
  void update();

  double get_scale() const { return scale_; }
  bool found_inf() const { return found_inf_; }
  int64_t skipped_steps() const { return skipped_; }
  bool enabled() const { return options_.enabled; }
  /** "scale", "growth_tracker", "skipped_steps" as decimal strings (checkpoint metadata). */
  std::map<std::string, std::string> state_dict() const;
  void load_state_dict(const std::map<std::string, std::string>& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0, skipped_ = 0;
  bool unscaled_ = false, found_inf_ = false;
};

/** "f32" | "bf16" | "f16" (or the long names) -> the autocast dtype; throws on anything else. */
DType parse_precision(const std::string& name);

}  // namespace tessera::nn
