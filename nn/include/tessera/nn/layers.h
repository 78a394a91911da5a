#pragma once
// Standard layers. Constructors take the sizes first, then options; parameters are created
// on `device` in `dtype` and initialised like PyTorch's defaults.
#include <cmath>
#include <string>

#include "tessera/nn/module.h"

namespace tessera::nn {

/** Where new parameters live; most layers take one as their last argument. */
struct Placement {
  DType dtype = DType::f32;
  Device device = kCPU;
};

/** y = x W^T + b; weight [out, in]. */
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Placement p = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  std::string describe() const override;
  Tensor weight, bias;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Size2 stride = {1, 1}, Size2 padding = {0, 0},
         Size2 dilation = {1, 1}, int64_t groups = 1, bool bias = true, Placement p = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  std::string describe() const override;
  Tensor weight, bias;
  Size2 stride, padding, dilation;
  int64_t groups;
};

/** Arguments in PyTorch's order: MaxPool2d(kernel, stride, padding, dilation, ceil_mode). */
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0}, Size2 dilation = {1, 1},
                     bool ceil_mode = false)
      : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding), dilation_(dilation), ceil_mode_(ceil_mode) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_, dilation_, ceil_mode_); }
  std::string name() const override { return "MaxPool2d"; }
  Size2 kernel() const { return kernel_; }
  Size2 stride() const { return stride_; }
  Size2 padding() const { return padding_; }
  Size2 dilation() const { return dilation_; }
  bool ceil_mode() const { return ceil_mode_; }

 private:
  Size2 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/** Arguments in PyTorch's order: AvgPool2d(kernel, stride, padding, ceil_mode, count_include_pad). */
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0}, bool ceil_mode = false,
                     bool count_include_pad = true)
      : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding), ceil_mode_(ceil_mode), count_include_pad_(count_include_pad) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_, padding_, count_include_pad_, ceil_mode_); }
  std::string name() const override { return "AvgPool2d"; }
  Size2 kernel() const { return kernel_; }
  Size2 stride() const { return stride_; }
  Size2 padding() const { return padding_; }
  bool ceil_mode() const { return ceil_mode_; }
  bool count_include_pad() const { return count_include_pad_; }

 private:
  Size2 kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size_); }
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  Size2 output_size() const { return output_size_; }

 private:
  Size2 output_size_;
};

/** Batch normalisation with running statistics; BatchNorm1d takes [N, C] or [N, C, L], 2d [N, C, H, W]. */
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t features, int64_t spatial_dims, double eps = 1e-5, double momentum = 0.1, bool affine = true,
            Placement p = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return spatial_dims_ == 2 ? "BatchNorm2d" : "BatchNorm1d"; }
  std::string describe() const override;
  double eps() const { return eps_; }
  Tensor weight, bias, running_mean, running_var;

 private:
  int64_t features_, spatial_dims_;
  double eps_, momentum_;
};
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t features, double eps = 1e-5, double momentum = 0.1, bool affine = true, Placement p = {})
      : BatchNorm(features, 1, eps, momentum, affine, p) {}
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t features, double eps = 1e-5, double momentum = 0.1, bool affine = true, Placement p = {})
      : BatchNorm(features, 2, eps, momentum, affine, p) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true, Placement p = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  const Shape& normalized_shape() const { return shape_; }
  double eps() const { return eps_; }
  Tensor weight, bias;

 private:
  Shape shape_;
  double eps_;
};

/** GroupNorm(groups, channels): group_norm with a learnable per-channel weight (1) and bias (0). */
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t groups, int64_t channels, double eps = 1e-5, bool affine = true, Placement p = {});
  Tensor forward(const Tensor& x) override { return group_norm(x, groups_, weight, bias, eps_); }
  std::string name() const override { return "GroupNorm"; }
  int64_t groups() const { return groups_; }
  double eps() const { return eps_; }
  Tensor weight, bias;

 private:
  int64_t groups_;
  double eps_;
};

/** InstanceNorm2d(channels): instance_norm over [N, C, H, W]; as PyTorch's default, no affine
 *  parameters unless asked and no running statistics (training and eval normalise alike). */
class InstanceNorm2d : public Module {
 public:
  explicit InstanceNorm2d(int64_t channels, double eps = 1e-5, bool affine = false, Placement p = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "InstanceNorm2d"; }
  double eps() const { return eps_; }
  Tensor weight, bias;

 private:
  double eps_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override { return dropout(x, p_, is_training(), gen_); }
  std::string name() const override { return "Dropout"; }
  std::string describe() const override { return "Dropout(p=" + std::to_string(p_) + ")"; }

 private:
  double p_;
  Generator* gen_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : start_(start), end_(end) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string name() const override { return "Flatten"; }
  int64_t start() const { return start_; }
  int64_t end() const { return end_; }

 private:
  int64_t start_, end_;
};

/** Lookup table [num_embeddings, dim], initialised N(0, 1). */
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Placement p = {});
  /** PyTorch's padding_idx: that row starts at zero and is never trained. */
  Embedding(int64_t num_embeddings, int64_t dim, int64_t padding_idx, Placement p);
  Tensor forward(const Tensor& indices) override {
    return padding_idx ? embedding(weight, indices, *padding_idx) : embedding(weight, indices);
  }
  std::string name() const override { return "Embedding"; }
  Tensor weight;
  std::optional<int64_t> padding_idx;
};

#define TESSERA_ACTIVATION_MODULE(Class, expr)                          \
  class Class : public Module {                                         \
   public:                                                              \
    Tensor forward(const Tensor& x) override { return expr; }           \
    std::string name() const override { return #Class; }                \
  };
TESSERA_ACTIVATION_MODULE(ReLU, relu(x))
TESSERA_ACTIVATION_MODULE(SiLU, silu(x))
TESSERA_ACTIVATION_MODULE(Tanh, tessera::tanh(x))
TESSERA_ACTIVATION_MODULE(Sigmoid, sigmoid(x))
#undef TESSERA_ACTIVATION_MODULE

class GELU : public Module {
 public:
  explicit GELU(bool tanh_approximation = false) : tanh_(tanh_approximation) {}
  Tensor forward(const Tensor& x) override { return gelu(x, tanh_); }
  std::string name() const override { return "GELU"; }
  bool tanh_approximation() const { return tanh_; }

 private:
  bool tanh_;
};

/** Runs its children in order. */
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> layers);
  /** Appends a layer named by its position. */
  Sequential& add(ModulePtr layer);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return children().size(); }
};

}  // namespace tessera::nn
