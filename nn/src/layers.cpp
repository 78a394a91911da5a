#include "tessera/nn/layers.h"

#include <optional>

#include "tessera/profiler.h"

#include "tessera/nn/init.h"

namespace tessera::nn {

using init::kDefaultA;

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Placement p) {
  TESSERA_CHECK(in_features > 0 && out_features > 0, "Linear", "sizes must be positive, got ", in_features, " -> ",
                out_features);
  weight = init::kaiming_uniform({out_features, in_features}, in_features, kDefaultA, p.dtype, p.device);
  if (with_bias) bias = init::fan_in_uniform({out_features}, in_features, p.dtype, p.device);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

std::string Linear::describe() const {
  return "Linear(" + std::to_string(weight.size(1)) + ", " + std::to_string(weight.size(0)) + (bias.defined() ? ")" : ", bias=false)");
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride_, Size2 padding_, Size2 dilation_,
               int64_t groups_, bool with_bias, Placement p)
    : stride(stride_), padding(padding_), dilation(dilation_), groups(groups_) {
  TESSERA_CHECK(groups >= 1 && in_channels % groups == 0 && out_channels % groups == 0, "Conv2d", "groups ", groups,
                " must divide ", in_channels, " and ", out_channels);
  const int64_t fan_in = in_channels / groups * kernel[0] * kernel[1];
  weight = init::kaiming_uniform({out_channels, in_channels / groups, kernel[0], kernel[1]}, fan_in, kDefaultA, p.dtype, p.device);
  if (with_bias) bias = init::fan_in_uniform({out_channels}, fan_in, p.dtype, p.device);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding, dilation, groups); }

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(weight.size(1) * groups) + ", " + std::to_string(weight.size(0)) + ", kernel=" +
         std::to_string(weight.size(2)) + "x" + std::to_string(weight.size(3)) + ", stride=" + std::to_string(stride[0]) +
         ", padding=" + std::to_string(padding[0]) + ")";
}

BatchNorm::BatchNorm(int64_t features, int64_t spatial_dims, double eps, double momentum, bool affine, Placement p)
    : features_(features), spatial_dims_(spatial_dims), eps_(eps), momentum_(momentum) {
  if (affine) {
    weight = ones({features}, p.dtype, p.device);
    bias = zeros({features}, p.dtype, p.device);
  }
  running_mean = zeros({features}, p.dtype, p.device);
  running_var = ones({features}, p.dtype, p.device);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
}

Tensor BatchNorm::forward(const Tensor& x) {
  const bool ok = spatial_dims_ == 2 ? x.dim() == 4 : (x.dim() == 2 || x.dim() == 3);
  TESSERA_CHECK(ok, name(), "expected ", spatial_dims_ == 2 ? "[N, C, H, W]" : "[N, C] or [N, C, L]", " input, got ",
                shape_str(x.shape()));
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum_, eps_);
}

std::string BatchNorm::describe() const { return name() + "(" + std::to_string(features_) + ")"; }

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine, Placement p) : shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    weight = ones(shape_, p.dtype, p.device);
    bias = zeros(shape_, p.dtype, p.device);
  }
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, static_cast<int64_t>(shape_.size()), weight, bias, eps_);
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine, Placement p) : groups_(groups), eps_(eps) {
  TESSERA_CHECK(groups >= 1 && channels >= 1 && channels % groups == 0, "GroupNorm", groups, " groups do not divide ", channels, " channels");
  if (affine) {
    weight = ones({channels}, p.dtype, p.device);
    bias = zeros({channels}, p.dtype, p.device);
  }
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

InstanceNorm2d::InstanceNorm2d(int64_t channels, double eps, bool affine, Placement p) : eps_(eps) {
  TESSERA_CHECK(channels >= 1, "InstanceNorm2d", "needs at least one channel, got ", channels);
  if (affine) {
    weight = ones({channels}, p.dtype, p.device);
    bias = zeros({channels}, p.dtype, p.device);
  }
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor InstanceNorm2d::forward(const Tensor& x) {
  TESSERA_CHECK(x.dim() == 4, "InstanceNorm2d", "input must be [N, C, H, W], got ", shape_str(x.shape()));
  return instance_norm(x, weight, bias, eps_);
}

Dropout::Dropout(double p, Generator* gen) : p_(p), gen_(gen) {
  TESSERA_CHECK(p >= 0 && p <= 1, "Dropout", "p must be in [0, 1], got ", p);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Placement p) {
  weight = randn({num_embeddings, dim}, p.dtype, p.device);
  register_parameter("weight", &weight);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, int64_t padding_idx_, Placement p) : Embedding(num_embeddings, dim, p) {
  TESSERA_CHECK(padding_idx_ >= -num_embeddings && padding_idx_ < num_embeddings, "Embedding", "padding_idx ", padding_idx_,
                " is outside the ", num_embeddings, " rows");
  padding_idx = padding_idx_ < 0 ? padding_idx_ + num_embeddings : padding_idx_;
  NoGradGuard no_grad;
  weight.select(0, *padding_idx).zero_();
}

Sequential::Sequential(std::vector<ModulePtr> layers) {
  for (auto& l : layers) add(std::move(l));
}

Sequential& Sequential::add(ModulePtr layer) {
  register_module(std::to_string(children().size()), std::move(layer));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [n, layer] : children()) {
    // Each layer as a scope ("3:Conv2d") for the profiler and the CPU cross-check's reports.
    std::optional<profile::Scope> scope;
    if (profile::scopes_active()) scope.emplace(n + ":" + layer->name(), "module");
    h = (*layer)(h);
  }
  return h;
}

}  // namespace tessera::nn
