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

/** Every worker takes its next action at each tick whose inputs an earlier tick produced (the
 *  previous virtual stage's forward of that micro-batch; the next one's backward of it). Throws
 *  if a schedule stalls. */
PipelineSimulation simulate_pipeline(PipelineSchedule schedule, int64_t workers, int64_t micro_batches, int64_t chunks);

}  // namespace tessera::nn::detail
