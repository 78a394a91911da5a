#pragma once
// Pipeline parallelism: a model split into stages, each on its own device (in this process) or
// rank (through the process group's send/recv), fed micro-batches so the stages work at the
// same time. Schedules: GPipe (every forward, then every backward: each stage holds all M
// micro-batches' activations), 1F1B (after S - s - 1 warm-up forwards, stage s alternates one
// forward with one backward: it holds at most S - s) and interleaved 1F1B (Megatron-LM's virtual
// pipeline: each stage holds V model chunks, virtual stage v on stage v mod S, and micro-batches
// go through in groups of S; the bubble shrinks V-fold for V times as many, smaller transfers).
// Each micro-batch's loss is scaled by 1/M, so the accumulated gradients equal those of the whole
// batch's mean loss.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/dist.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved_1f1b };
/** "gpipe", "1f1b" or "interleaved"; throws naming the accepted names. */
PipelineSchedule parse_pipeline_schedule(std::string_view name);
const char* pipeline_schedule_name(PipelineSchedule s);

/** One step of a stage's schedule: the forward or backward of micro-batch `micro` through its
 *  model chunk `chunk` (virtual stage chunk x stages + stage; always 0 but interleaved). */
struct PipelineAction {
  bool forward;
  int64_t micro;
  int64_t chunk = 0;
};
/** Stage `stage`'s actions, in order, for `stages` stages and `micro_batches` micro-batches, each
 *  stage holding `chunks` model chunks (interleaved only: at least 2, and micro-batches a
 *  multiple of the stages). Throws, saying why, for a shape the schedule does not take. */
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches,
                                             int64_t chunks = 1);
/** Throws, saying why, unless the schedule takes `stages` x `chunks` virtual stages and
 *  `micro_batches`. */
void check_pipeline_shape(PipelineSchedule schedule, int64_t stages, int64_t micro_batches, int64_t chunks);

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

struct PipelineStats {
  int64_t stages = 0, micro_batches = 0, chunks = 1;
  /** Idle stage slots over all stage slots when every action (one chunk's forward or backward of
   *  one micro-batch) takes one time unit: (S-1)/(M+S-1) for GPipe and 1F1B (1F1B saves memory,
   *  not time), about (S-1)/(V M+S-1) interleaved. */
  double bubble_fraction = 0.0;
  /** The most micro-batches whose activations one stage held at once (each stage's). */
  std::vector<int64_t> peak_in_flight;
  /** Each stage device's allocator peak during the last step above what was in use when it
   *  began (activations, their gradients, the parameters' gradients), bytes (in-process stages). */
  std::vector<int64_t> peak_step_bytes;
  /** This rank's share of the last step's wall time spent waiting for its peers (rank stages). */
  double measured_idle_fraction = 0.0;
};

/** The loss of one micro-batch: a scalar from the last stage's output and its targets. */
using PipelineLoss = std::function<Tensor(const Tensor& output, const Tensor& target)>;

class Pipeline {
 public:
  /** Stages in this process: stage i runs on devices[i] (its parameters move there). Interleaved:
   *  `stages` are the S x `chunks` virtual stages in model order, virtual stage v taking its turns
   *  as stage v mod S (give it that stage's device). */
  Pipeline(std::vector<ModulePtr> stages, std::vector<Device> devices, PipelineSchedule schedule, int64_t micro_batches,
           int64_t chunks = 1);
  /** One stage per rank: this rank runs `stage` (stage index = group rank) on `device`; ranks
   *  0..world-1 are the pipeline's stages in order. */
  Pipeline(ModulePtr stage, std::shared_ptr<dist::ProcessGroup> group, Device device, PipelineSchedule schedule, int64_t micro_batches);
  /** Interleaved over ranks: this rank's model chunks, chunk c being virtual stage c x world + rank. */
  Pipeline(std::vector<ModulePtr> chunks, std::shared_ptr<dist::ProcessGroup> group, Device device, PipelineSchedule schedule,
           int64_t micro_batches);

  /**
   * Forward and backward of one batch: `input` (used by the first stage) and `target` (by the
   * last) split into micro-batches along axis 0 (the batch must divide evenly). Gradients
   * accumulate into the stages' parameters (zero them between steps). Returns the batch's mean
   * loss, on every rank.
   */
  double train_step(const Tensor& input, const Tensor& target, const PipelineLoss& loss);
  /** The batch's mean loss without gradients (evaluation: the stages in eval mode meanwhile): the
   *  same micro-batches forward through the stages, the loss on the last; on every rank. */
  double evaluate(const Tensor& input, const Tensor& target, const PipelineLoss& loss);

  /**
   * Declares that parameter `a` of stage `stage_a` and `b` of stage `stage_b` (by name; virtual
   * stages when interleaved) are one weight (a
   * language model's token embedding and its output head): after each step's backward both
   * gradients become their sum, so equal optimizer updates keep them equal (Megatron's
   * embedding group). Ranked stages: every rank calls it; the two ranks holding the stages
   * exchange their gradients with send/recv.
   */
  void tie(int64_t stage_a, const std::string& a, int64_t stage_b, const std::string& b);
  /** Gradient accumulation over several train_steps: the tied gradients are then summed once,
   *  by sync_tied_gradients() after the last backward (summing after each step would add the
   *  earlier steps' share twice). */
  void defer_tied_sync() { tie_in_step_ = false; }
  /** Makes each tied pair's gradients their sum (train_step's end does it unless deferred).
   *  Ranked: every rank calls it. */
  void sync_tied_gradients();
  /** Ranked: the tied exchange acts on `holder(weight)` in place of each tied weight this rank
   *  holds. Under ZeRO-3 a stage's weights are sharded over its data-parallel replicas and the
   *  gradient lives in the weight's shard (laid out alike on both stages): the shards' gradients
   *  are summed, element by element, after their reduce-scatter. */
  void redirect_tied(const std::function<Tensor(const Tensor&)>& holder);

  /** The parameters of this process's stages (for the optimizer). */
  std::vector<Tensor> parameters() const;
  /** This process's stages: every (virtual) stage in process, this rank's chunks across ranks. */
  const std::vector<ModulePtr>& stages() const { return stages_; }
  const PipelineStats& stats() const { return stats_; }
  int64_t micro_batches() const { return micro_batches_; }

 private:
  struct Slot;  // one micro-batch's tensors at one stage
  double run_local(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, const PipelineLoss& loss);
  double run_ranked(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, const PipelineLoss& loss);
  /** Ranked: each chunk's input and output shape and dtype, learned by one micro-batch sent through
   *  the stages (eval mode, no gradients) with headers, once per input shape and autocast state. A
   *  training step then receives each activation in the same batch_p2p as the sends before it:
   *  a header round of its own would leave every stage of the interleaved ring waiting with an
   *  activation send it has not issued, a deadlock on NCCL. */
  void learn_boundary_shapes(const Tensor& micro_input);

  std::vector<ModulePtr> stages_;
  std::vector<Device> devices_;
  std::shared_ptr<dist::ProcessGroup> group_;  // null: in-process stages
  std::vector<std::pair<Tensor, Tensor>> tied_;
  struct TiedWithPeer {
    Tensor local;
    int peer;
  };
  std::vector<TiedWithPeer> tied_ranked_;
  bool tie_in_step_ = true;
  PipelineSchedule schedule_;
  int64_t micro_batches_;
  int64_t chunks_ = 1;  // model chunks per stage (interleaved)
  struct Boundary {
    Shape shape;
    DType dtype = DType::f32;
  };
  std::vector<Boundary> chunk_in_, chunk_out_;  // ranked: per chunk, from learn_boundary_shapes()
  std::string boundary_key_;                    // the input shape and autocast state they were learned for
  PipelineStats stats_;
};

/** A GPT split into `stages` pipeline stages (copies of its weights): stage 0 the token and
 *  position embeddings and the first blocks, the last the remaining blocks, the final norm and
 *  the head, a copy of the token embedding to tie with stage 0's (`tied`). Blocks are spread
 *  evenly; forward: tokens [B, T] -> logits [B, T, vocab]. */
struct GPTStages {
  std::vector<ModulePtr> stages;
  std::string embedding = "tok.weight", head = "head";  ///< the tied pair's names: stage 0's, the last stage's
};
/** With `tensor_parallel` (this rank's tensor-parallel group) each stage is also split Megatron-style
 *  across that group (tp::ParallelGPT's layers): the last stage then returns this rank's vocabulary
 *  slice of the logits, for tp::vocab_parallel_cross_entropy over the same group. With
 *  `only_stages` only those stages are made (the others null): `gpt` may then be the part built
 *  for them (GPT's GPTBlockRange constructor with gpt_stage_blocks). */
GPTStages split_gpt(const GPT& gpt, int64_t stages, std::shared_ptr<dist::ProcessGroup> tensor_parallel = nullptr,
                    const std::vector<int64_t>& only_stages = {});

}  // namespace tessera::nn
