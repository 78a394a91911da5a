// ONNX export of nn::GPT: token and position embeddings, pre-LayerNorm blocks (attention
// written out as MatMul / Softmax with a causal mask, the erf GELU MLP) and the head tied to
// the token embedding. Batch and sequence length stay variable: the positions and the mask
// are cut from the runtime shape of the tokens (Shape, Range, Slice), up to the context.
#include <cmath>
#include <limits>

#include "export_builder.h"

namespace tessera::onnx::export_detail {

namespace {
struct SequenceValues {
  std::string positions;  ///< int64 [T]: 0 .. T-1
  std::string mask;       ///< [T, T]: 0 where key j <= query i, -inf above the diagonal
};

SequenceValues sequence_values(Builder& b, const nn::GPT& gpt, const std::string& tokens, DType dt) {
  const int64_t n = gpt.config().context;
  const std::string shape = b.apply("Shape", {tokens});
  const std::string t = b.apply("Gather", {shape, b.initializer("axis", full({}, 1, DType::i64))});  // 0-d T
  SequenceValues s;
  s.positions = b.apply("Range", {b.initializer("zero", full({}, 0, DType::i64)), t, b.initializer("one", full({}, 1, DType::i64))});
  // The [context, context] mask table, sliced to [T, T] at run time.
  std::vector<float> table(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) table[static_cast<size_t>(i * n + j)] = -std::numeric_limits<float>::infinity();
  }
  const std::string mask_table = b.initializer("causal_mask", from_vector(table, {n, n}).to(dt));
  const std::string t1 = b.apply("Slice", {shape, b.ints({1}), b.ints({2})});
  const std::string ends = b.fresh("mask_ends");
  attr(b.node("Concat", {t1, t1}, ends), "axis", int64_t{0});
  s.mask = b.apply("Slice", {mask_table, b.ints({0, 0}), ends, b.ints({0, 1})});
  return s;
}

std::string transpose(Builder& b, const std::string& x, const std::vector<int64_t>& perm) {
  const std::string out = b.fresh("transpose_out");
  attr(b.node("Transpose", {x}, out), "perm", perm);
  return out;
}

std::string emit_block(Builder& b, const nn::GPTBlock& block, const std::string& x, const std::string& mask, int64_t heads, int64_t dim,
                       DType dt) {
  const int64_t d = dim / heads;
  const std::string h = emit_linear(b, *block.qkv, emit_layer_norm(b, *block.ln1, x, dt), 3);  // [B, T, 3C]
  const std::vector<std::string> qkv = {b.fresh("q"), b.fresh("k"), b.fresh("v")};
  attr(b.node("Split", {h, b.ints({dim, dim, dim})}, qkv), "axis", int64_t{2});
  const std::string split_heads = b.ints({0, 0, heads, d});  // Reshape copies the 0s: [B, T, H, D]
  const std::string q = transpose(b, b.apply("Reshape", {qkv[0], split_heads}), {0, 2, 1, 3});  // [B, H, T, D]
  const std::string kt = transpose(b, b.apply("Reshape", {qkv[1], split_heads}), {0, 2, 3, 1});  // [B, H, D, T]
  const std::string v = transpose(b, b.apply("Reshape", {qkv[2], split_heads}), {0, 2, 1, 3});
  const std::string scores = b.apply("Add", {b.apply("Mul", {b.apply("MatMul", {q, kt}), b.scalar(1.0 / std::sqrt(static_cast<double>(d)), dt)}), mask});
  const std::string probs = b.fresh("attention");
  attr(b.node("Softmax", {scores}, probs), "axis", int64_t{-1});
  const std::string merged = b.apply("Reshape", {transpose(b, b.apply("MatMul", {probs, v}), {0, 2, 1, 3}), b.ints({0, 0, dim})});
  const std::string y = b.apply("Add", {emit_linear(b, *block.proj, merged, 3), x});
  const std::string hidden = emit_gelu(b, emit_linear(b, *block.fc, emit_layer_norm(b, *block.ln2, y, dt), 3), false, dt);
  return b.apply("Add", {emit_linear(b, *block.fc_out, hidden, 3), y});
}
}  // namespace

std::string emit_gpt(Builder& b, const nn::GPT& gpt, const std::string& tokens) {
  const DType dt = gpt.tok->weight.dtype();
  const std::string tok_w = b.initializer("tok_weight", host(gpt.tok->weight));
  const SequenceValues s = sequence_values(b, gpt, tokens, dt);
  std::string x = b.apply("Add", {b.apply("Gather", {tok_w, tokens}),
                                  b.apply("Gather", {b.initializer("pos_weight", host(gpt.pos->weight)), s.positions})});
  for (const auto& block : gpt.blocks) x = emit_block(b, *block, x, s.mask, gpt.config().heads, gpt.config().dim, dt);
  // The head shares the token embedding: logits = ln_f(x) @ tok_w^T.
  return b.apply("MatMul", {emit_layer_norm(b, *gpt.ln_f, x, dt), transpose(b, tok_w, {1, 0})});
}

}  // namespace tessera::onnx::export_detail
