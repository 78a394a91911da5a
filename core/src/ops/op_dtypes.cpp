// What dtypes each op's kernel is handed, and which operand's dtype that is: the contract
// Backend::supports and the dispatcher's check rest on. The reference (CPU) kernels accept
// exactly op_dtypes(op). The dispatcher refuses every other dtype, so a set here narrower than what
// the front-end passes fails the conformance suites, which run every op at every dtype it takes.
#include "tessera/backend/kernel.h"
#include "tessera/tensor.h"

namespace tessera {

DTypeSet op_dtypes(OpId op) {
  switch (op_info(op).policy) {
    case DTypePolicy::Float:
    case DTypePolicy::TrueDiv:
      return kFloatDTypes;  // the front-end computes integers in f32
    case DTypePolicy::Numeric:
    case DTypePolicy::Arith:
      return kNumericDTypes;
    case DTypePolicy::Compare:
      return kAllDTypes;
    case DTypePolicy::Logical:
      return DTypeSet{DType::boolean};  // operands arrive as bool
    case DTypePolicy::Bitwise:
      return kIntegralDTypes;
    case DTypePolicy::None:
      break;
  }
  switch (op) {
    case OpId::Where:
    case OpId::Copy:
    case OpId::Fill:
    case OpId::Max:
    case OpId::Min:
    case OpId::IndexSelect:
    case OpId::Gather:
    case OpId::Bernoulli:
      return kAllDTypes;
    case OpId::Sum:
    case OpId::Prod:
    case OpId::Argmax:
    case OpId::Argmin:
    case OpId::Cumsum:
    case OpId::Matmul:
    case OpId::ScatterAdd:
    case OpId::ScatterReduce:
    case OpId::RandInt:
      return kNumericDTypes;
    default:
      return kFloatDTypes;  // the nn ops, linear, softmax, attention, the optimizers, rand/randn
  }
}

DType kernel_dtype(OpId op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  switch (op) {
    case OpId::Where:
      return inputs[1].dtype();  // not the bool condition
    case OpId::ScatterAdd:       // the index comes first; the updated tensor decides
    case OpId::ScatterReduce:
    case OpId::AdamUpdate:  // the parameter (its gradient may be narrower)
    case OpId::AdamMultiUpdate:
    case OpId::SgdUpdate:
      return outputs[0].dtype();
    case OpId::CrossEntropyBackward:
      return inputs[1].dtype();  // the log-probabilities
    default:
      for (const Tensor& t : inputs) {
        if (t.defined()) return t.dtype();
      }
      return outputs[0].dtype();
  }
}

}  // namespace tessera
