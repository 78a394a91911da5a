#pragma once
// Matrix products. Transposed or otherwise strided operands are read in place (no copies).
#include "tessera/kernels/activation.h"
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera {

/**
 * torch.matmul semantics: 1-D x 1-D is a dot product, 2-D x 2-D a matrix product, a 1-D
 * operand is promoted to a matrix and the added axis removed, and leading batch axes
 * broadcast. Operands must share a dtype. Throws "matmul: inner dimensions differ: ...".
 */
Tensor matmul(const Tensor& a, const Tensor& b);
/**
 * y = activation(x @ weight^T + bias) with the bias and activation fused into the GEMM
 * epilogue. x: [..., in], weight: [out, in], bias: [out] or undefined.
 */
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Activation activation = Activation::none);
/**
 * y = activation(x + bias), the bias broadcast along the last axis: the epilogue of a linear
 * layer as one pass over memory (one kernel, forward and backward, with fused_kernels()).
 * The backward needs no stored pre-activation: relu/sigmoid/tanh take act' from y, gelu,
 * gelu_tanh and silu recompute x + bias inside the gradient kernel's input. x: [..., n]
 * floating, bias: [n] of x's dtype and device.
 */
Tensor bias_activation(const Tensor& x, const Tensor& bias, Activation activation);
/**
 * torch.einsum / numpy.einsum: "ij,jk->ik", implicit output ("ij,jk": the letters used once, in
 * order), "..." for broadcast leading axes, repeated letters in one operand for diagonals
 * ("ii->i", "ii" for the trace). Sizes of a letter broadcast from 1. Built on permute,
 * index_select, sum and batched matmul, so it runs on every backend and has gradients.
 */
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

}  // namespace tessera
