// The pipeline schedules as per-worker action lists (GPipe, 1F1B, interleaved 1F1B) and a
// unit-time simulation of them: the order in-process stages run in, the bubble, each worker's
// activations in flight.
#include "pipeline_schedule.h"

#include <algorithm>

#include "tessera/error.h"

namespace tessera::nn {

PipelineSchedule parse_pipeline_schedule(std::string_view name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  if (name == "interleaved") return PipelineSchedule::interleaved_1f1b;
  throw Error(tessera::detail::concat("pipeline: schedule '", name, "' is not one of gpipe, 1f1b, interleaved"));
}

const char* pipeline_schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::gpipe:
      return "gpipe";
    case PipelineSchedule::one_f_one_b:
      return "1f1b";
    case PipelineSchedule::interleaved_1f1b:
      return "interleaved";
  }
  return "?";
}

void check_pipeline_shape(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks) {
  TESSERA_CHECK(stages >= 1 && micro_batches >= 1, "pipeline", stages, " stages and ", micro_batches,
                " micro-batches (at least one of each)");
  if (schedule != PipelineSchedule::interleaved_1f1b) {
    TESSERA_CHECK(chunks == 1, "pipeline", "the ", pipeline_schedule_name(schedule), " schedule runs one model chunk per stage, got ",
                  chunks, ": use the interleaved schedule for more");
    return;
  }
  TESSERA_CHECK(chunks >= 2, "pipeline", "the interleaved schedule needs at least 2 model chunks per stage, got ", chunks,
                " (with one it is 1F1B)");
  TESSERA_CHECK(micro_batches % stages == 0, "pipeline", "the interleaved schedule runs micro-batches in groups of the ", stages,
                " stages: ", micro_batches, " micro-batches do not divide by it");
}

namespace detail {
int64_t pipeline_warmup(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t m, int64_t chunks) {
  switch (schedule) {
    case PipelineSchedule::gpipe:
      return m;
    case PipelineSchedule::one_f_one_b:
      return std::min(stages - stage - 1, m);
    case PipelineSchedule::interleaved_1f1b:
      break;
  }
  const int64_t total = m * chunks;
  return m == stages ? total : std::min(2 * (stages - stage - 1) + (chunks - 1) * stages, total);
}

}  // namespace detail

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches,
                                             int64_t chunks) {
  check_pipeline_shape(schedule, stages, micro_batches, chunks);
  std::vector<PipelineAction> a;
  const int64_t m = micro_batches;
  if (schedule == PipelineSchedule::gpipe) {
    for (int64_t i = 0; i < m; ++i) a.push_back({true, i});
    for (int64_t i = 0; i < m; ++i) a.push_back({false, i});
    return a;
  }
  if (schedule == PipelineSchedule::one_f_one_b) {
    const int64_t warmup = detail::pipeline_warmup(schedule, stage, stages, m, 1);
    for (int64_t i = 0; i < warmup; ++i) a.push_back({true, i});
    for (int64_t i = 0; i + warmup < m; ++i) {
      a.push_back({true, warmup + i});
      a.push_back({false, i});
    }
    for (int64_t i = m - warmup; i < m; ++i) a.push_back({false, i});
    return a;
  }
  // Interleaved (Megatron-LM's virtual pipeline): the k-th forward of a stage takes micro-batch
  // group k / (S V), chunk (k / S) mod V, micro-batch k mod S within the group; backwards walk the
  // chunks in reverse. Warm-up: 2 (S - s - 1) + (V - 1) S forwards (all of them when M = S).
  const int64_t s = stages, v = chunks, total = m * v;
  const auto nth = [&](int64_t k, bool forward) {
    const int64_t chunk = (k % (s * v)) / s;
    return PipelineAction{forward, (k / (s * v)) * s + k % s, forward ? chunk : v - 1 - chunk};
  };
  const int64_t warmup = detail::pipeline_warmup(schedule, stage, stages, m, chunks);
  for (int64_t k = 0; k < warmup; ++k) a.push_back(nth(k, true));
  for (int64_t k = 0; k + warmup < total; ++k) {
    a.push_back(nth(warmup + k, true));
    a.push_back(nth(k, false));
  }
  for (int64_t k = total - warmup; k < total; ++k) a.push_back(nth(k, false));
  return a;
}

std::vector<std::vector<PipelineAction>> pipeline_iterations(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t m,
                                                             int64_t chunks) {
  const std::vector<PipelineAction> a = pipeline_actions(schedule, stage, stages, m, chunks);
  std::vector<std::vector<PipelineAction>> out;
  if (schedule != PipelineSchedule::interleaved_1f1b) {  // each action alone: its sends leave before the next action runs
    for (const PipelineAction& x : a) out.push_back({x});
    return out;
  }
  const auto warmup = static_cast<size_t>(detail::pipeline_warmup(schedule, stage, stages, m, chunks));
  const size_t pairs = static_cast<size_t>(m * chunks) - warmup;
  for (size_t j = 0; j < warmup; ++j) out.push_back({a[j]});
  for (size_t j = 0; j < pairs; ++j) out.push_back({a[warmup + 2 * j], a[warmup + 2 * j + 1]});
  for (size_t j = warmup + 2 * pairs; j < a.size(); ++j) out.push_back({a[j]});
  return out;
}

namespace detail {

PipelineSimulation simulate_pipeline(PipelineSchedule schedule, int64_t workers, int64_t m, int64_t chunks) {
  PipelineSimulation sim;
  std::vector<std::vector<PipelineAction>> acts;
  for (int64_t w = 0; w < workers; ++w) acts.push_back(pipeline_actions(schedule, w, workers, m, chunks));
  const int64_t virtual_stages = workers * chunks;
  std::vector<size_t> pos(workers, 0);
  std::vector<std::vector<int64_t>> fwd(virtual_stages, std::vector<int64_t>(m, -1)), bwd = fwd;
  std::vector<int64_t> live(workers, 0);
  sim.peak_in_flight.assign(workers, 0);
  int64_t tick = 0, busy = 0, remaining = 2 * virtual_stages * m;
  while (remaining > 0) {
    TESSERA_CHECK(tick <= 4 * (m * chunks + workers) + 4, "pipeline", "the ", pipeline_schedule_name(schedule), " schedule stalls (a bug)");
    for (int64_t w = 0; w < workers; ++w) {
      if (pos[w] == acts[w].size()) continue;
      const PipelineAction a = acts[w][pos[w]];
      const int64_t vs = a.chunk * workers + w;  // virtual stage: chunk c of worker w
      const auto done_before = [&](int64_t t) { return t >= 0 && t < tick; };
      const bool ready =
          a.forward ? (vs == 0 || done_before(fwd[vs - 1][a.micro])) : (vs == virtual_stages - 1 || done_before(bwd[vs + 1][a.micro]));
      if (!ready) continue;
      (a.forward ? fwd : bwd)[vs][a.micro] = tick;
      live[w] += a.forward ? 1 : -1;
      sim.peak_in_flight[w] = std::max(sim.peak_in_flight[w], live[w]);
      sim.order.push_back({w, a});
      ++pos[w], ++busy, --remaining;
    }
    ++tick;
  }
  sim.bubble = 1.0 - static_cast<double>(busy) / static_cast<double>(tick * workers);
  return sim;
}

}  // namespace detail
}  // namespace tessera::nn
