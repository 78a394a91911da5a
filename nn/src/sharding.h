#pragma once
// What the data-parallel wrappers share (ddp.cpp, zero.cpp, fsdp.cpp) and the optimizer's
// state-key format (optim.cpp, fsdp.cpp). Internal to the nn library.
#include <optional>
#include <string>
#include <vector>

#include "tessera/dist.h"
#include "tessera/tessera.h"

namespace tessera::nn::detail {

/** Broadcasts every tensor from `root` in place (issued together, then waited for). */
void broadcast_tensors(dist::ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

/** True on every rank when every rank's tensors are bitwise equal (a checksum of their bits
 *  compared over the ranks; a collective). */
bool same_bits_on_every_rank(dist::ProcessGroup& group, const std::vector<Tensor>& tensors);

/** Averages the tensors' gradients over the group in one all-reduce (zeros where a gradient is
 *  undefined); every rank's tensors alike in number, shapes, dtype and device. */
void average_gradients(dist::ProcessGroup& group, const std::vector<Tensor>& tensors);

/** The tensors (or their gradients, zeros where undefined) as one flat tensor of `padded`
 *  elements, zeros after the last: a ZeRO shard layout. */
Tensor flatten_padded(const std::vector<Tensor>& tensors, bool grads, int64_t padded);

/** Bytes at which each parameter of a fully sharded flat starts: the allocator's alignment, so a
 *  parameter viewed in the flat has the address alignment of one allocated alone (vendor GEMMs
 *  such as cuBLASLt choose their algorithm, and so their rounding, by operand alignment). */
inline constexpr int64_t kFlatParamAlignBytes = 256;

/** Each tensor's first element in a flat holding them in order, each start a multiple of
 *  kFlatParamAlignBytes; the last entry is the flat's used length (its end). */
std::vector<int64_t> aligned_offsets(const std::vector<Tensor>& tensors);

/** The tensors (or their gradients, zeros where undefined) at `offsets` (aligned_offsets) in one
 *  flat tensor of `total` elements, zeros in the gaps and after the last. */
Tensor flatten_at(const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets, bool grads, int64_t total);

/** Zeroes the elements of `flat` that no tensor at `offsets` covers (the gaps and the tail). */
void zero_gaps(Tensor& flat, const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets);

/** An optimizer state entry's key: "state.<group>.<param>.<name>". */
struct OptimizerStateKey {
  size_t group = 0, param = 0;
  std::string name;
};
std::string optimizer_state_key(size_t group, size_t param, const std::string& name);
/** The parts of "state.<g>.<p>.<name>"; nullopt for a key without that shape. */
std::optional<OptimizerStateKey> parse_optimizer_state_key(const std::string& key);

/** Whether a parameter of the GPT's tensor-parallel layers (by its name, split or whole) is a
 *  slice (a different tensor on each rank of the group) rather than a replica: the
 *  vocabulary-split embedding and head, the column-parallel weights and biases, the row-parallel
 *  weights. */
bool is_tensor_parallel_slice(const std::string& name);

}  // namespace tessera::nn::detail
