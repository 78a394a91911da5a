#pragma once
// The pipeline schedules' unit-time simulation (internal to the nn library): the order
// in-process stages run in, the bubble, and each worker's activations in flight.
#include <cstdint>
#include <vector>

#include "tessera/nn/pipeline.h"

namespace tessera::nn::detail {

struct PipelineStep {
  int64_t worker;  // the device (in process) or rank taking the action
  PipelineAction action;
};

struct PipelineSimulation {
  std::vector<PipelineStep> order;  // the actions in tick order
  double bubble = 0.0;
  std::vector<int64_t> peak_in_flight;  // per worker
};

/** The forwards a stage runs before its first backward. */
int64_t pipeline_warmup(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches, int64_t chunks);

/** The stage's actions as the ranked transport's iterations, as Megatron-LM groups them: GPipe
 *  and 1F1B each action alone; interleaved each warm-up forward alone, then each steady-state
 *  forward with the backward that follows it, then each cool-down backward alone. After an
 *  iteration one batch_p2p carries its sends and the next iteration's receives: on NCCL's ordered
 *  streams no stage then waits with a send its peer needs unissued (checked by a model of NCCL's
 *  group semantics for 2-5 stages, 1-12 micro-batches, 1-3 chunks and every schedule, and by the
 *  TESSERA_P2P_STREAM_ORDER tests; one action at a time deadlocks the interleaved ring, pairs
 *  would delay 1F1B's activations by a backward). */
std::vector<std::vector<PipelineAction>> pipeline_iterations(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                                             int64_t micro_batches, int64_t chunks);

/** Every worker takes its next action at each tick whose inputs an earlier tick produced (the
 *  previous virtual stage's forward of that micro-batch; the next one's backward of it). Throws
 *  if a schedule stalls. */
PipelineSimulation simulate_pipeline(PipelineSchedule schedule, int64_t workers, int64_t micro_batches, int64_t chunks);

}  // namespace tessera::nn::detail
