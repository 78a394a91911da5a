#pragma once
// What dist_test's check files share: failures are counted per rank and reported at the end.
#include <string>

#include "tessera/dist.h"
#include "tessera/tessera.h"

extern int g_rank;
void expect(bool ok, const std::string& what);
double max_abs_diff(const tessera::Tensor& a, const tessera::Tensor& b);
/** True when `t` holds the same bits on every rank (its max and min over the ranks agree). */
bool same_on_every_rank(tessera::dist::ProcessGroup& pg, const tessera::Tensor& t);
/** `rows` random windows of `context` + 1 tokens below `vocab` (seeded: the same on every rank):
 *  inputs x [rows, context] and next-token targets y. */
struct TokenBatch {
  tessera::Tensor x, y;
};
TokenBatch token_batch(int64_t vocab, int64_t rows, int64_t context, tessera::Device dev, uint64_t seed = 3);

void check_fsdp(tessera::dist::ProcessGroup& pg, tessera::Device dev);
void check_fsdp_memory(tessera::dist::ProcessGroup& pg, tessera::Device dev);
void check_tensor_parallel_gpt(tessera::dist::ProcessGroup& pg, tessera::Device dev);
void check_pipeline_tensor_parallel_gpt(tessera::dist::ProcessGroup& pg, tessera::Device dev);
void check_model_parallel_zero3(tessera::dist::ProcessGroup& pg, tessera::Device dev);
void check_pipeline_gpt_part(tessera::dist::ProcessGroup& pg, tessera::Device dev);
