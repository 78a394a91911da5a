#pragma once
// LSTM and GRU (multi-layer, optional batch_first), composed from public ops. Gate layout and
// initialisation follow PyTorch: weights U(-1/sqrt(H), 1/sqrt(H)); LSTM gates (i, f, g, o),
// GRU gates (r, z, n).
#include <utility>

#include "tessera/nn/layers.h"

namespace tessera::nn {

struct RecurrentOptions {
  int64_t num_layers = 1;
  bool batch_first = false;
  bool bias = true;
};

/** One layer's parameters in PyTorch's layout: w_ih [G H, in], w_hh [G H, H], biases [G H]
 *  (undefined without bias). */
struct RecurrentLayer {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

class LSTM : public Module {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RecurrentOptions options = {}, Placement p = {});
  /**
   * x: [T, B, I] (or [B, T, I] with batch_first); state (h0, c0): [layers, B, H] each, zeros
   * when undefined. Returns the last layer's outputs [T, B, H] (or [B, T, H]) and (h_n, c_n).
   */
  std::pair<Tensor, std::pair<Tensor, Tensor>> forward(const Tensor& x, const std::pair<Tensor, Tensor>& state);
  Tensor forward(const Tensor& x) override { return forward(x, {}).first; }
  std::string name() const override { return "LSTM"; }
  int64_t hidden_size() const { return hidden_; }
  const RecurrentOptions& options() const { return options_; }
  RecurrentLayer layer(int64_t l) const;

 private:
  int64_t hidden_;
  RecurrentOptions options_;
  std::vector<Tensor> w_ih_, w_hh_, b_ih_, b_hh_;
};

class GRU : public Module {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RecurrentOptions options = {}, Placement p = {});
  /** Like LSTM::forward with a single hidden state h0 [layers, B, H]. */
  std::pair<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()).first; }
  std::string name() const override { return "GRU"; }
  int64_t hidden_size() const { return hidden_; }
  const RecurrentOptions& options() const { return options_; }
  RecurrentLayer layer(int64_t l) const;

 private:
  int64_t hidden_;
  RecurrentOptions options_;
  std::vector<Tensor> w_ih_, w_hh_, b_ih_, b_hh_;
};

}  // namespace tessera::nn
