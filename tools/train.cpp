// `tessera train`: one run for every model on any backend: flags, the process group and the
// device, then the task (train_tasks.cpp: images or text) and nn::Trainer, which holds every
// training policy; reports and the JSON summary at the end.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <thread>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "batch_auto.h"
#include "commands.h"
#include "metrics_log.h"
#include "tessera/nn/file_io.h"
#include "train_args.h"
#include "train_tasks.h"
#include "tessera/dist.h"
#include "tessera/nn/ddp.h"
#include "tessera/nn/fsdp.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/model_parallel.h"
#include "tessera/nn/models.h"
#include "tessera/nn/trainer.h"
#include "tessera/profiler.h"

namespace tessera::tools {

Device pick_device(const std::string& backend) {
  if (backend != "auto") {
    const Device d = Device::parse(backend);
    backend_for_device(d, "train");  // throws with the reason when unavailable
    return d;
  }
  // Best available: GPUs first, then a Kokkos built for a GPU, then the CPU backend (a
  // host-memory Kokkos such as Serial or OpenMP is slower than it; the emulator is never
  // automatic).
  for (DeviceType t : {DeviceType::cuda, DeviceType::hip, DeviceType::kokkos}) {
    Backend* b = find_backend(t);
    if (!b || b->device_count() == 0 || (t == DeviceType::kokkos && b->host_accessible())) continue;
    return Device(t, 0);
  }
  return kCPU;
}

namespace {

// The learning-rate schedule: --schedule cosine decays to the task's floor over the run's
// optimizer steps, after --warmup steps of linear warm-up.
std::unique_ptr<nn::Scheduler> make_scheduler(const TrainArgs& a, nn::Optimizer& optimizer, int64_t total_steps, double min_factor) {
  if (a.schedule != "cosine") return nullptr;
  const auto cosine = std::make_shared<nn::CosineLR>(total_steps, min_factor);
  if (a.warmup == 0) return std::make_unique<nn::Scheduler>(optimizer, cosine);
  return std::make_unique<nn::Scheduler>(optimizer,
                                         std::make_shared<nn::ChainedLR>(std::vector<std::shared_ptr<nn::LRSchedule>>{
                                             std::make_shared<nn::LinearWarmup>(std::min(a.warmup, total_steps), 0.01), cosine}));
}

// Whether mpirun, srun or another PMI launcher started this process (then a pipeline's stages
// are ranks; otherwise devices of this process).
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

// --pipeline's summary line: the schedule's ideal bubble and the wait this rank measured.
std::string pipeline_report(const nn::Pipeline& p, const TrainArgs& a) {
  const nn::PipelineStats& s = p.stats();
  return detail::concat("pipeline: ", s.stages, " stages x ", s.micro_batches, " micro-batches (", a.pipeline_schedule,
                        s.chunks > 1 ? detail::concat(", ", s.chunks, " chunks per stage") : std::string(), "): bubble fraction ",
                        s.bubble_fraction, " of the ideal schedule",
                        s.peak_step_bytes.empty()
                            ? detail::concat("; rank 0 waited for its peers ", 100.0 * s.measured_idle_fraction, "% of its last step")
                            : std::string());
}

void run_train(TrainArgs& a, const CLI::App& cmd) {
  const auto explicit_flag = [&](const std::string& flag) { return cmd.count(flag) > 0; };
  validate_train_args(a, explicit_flag);
  apply_model_defaults(a, explicit_flag);
  std::vector<std::string> resume_report;
  if (a.resume && std::filesystem::exists(a.checkpoint)) {
    const nn::Metadata meta = nn::read_safetensors_metadata(a.checkpoint);
    const auto config = meta.find("config");
    TESSERA_CHECK(config != meta.end(), "train", "'", a.checkpoint, "' is not a Tessera checkpoint (no run settings)");
    // --batch-size auto on resume keeps the checkpoint's batch (the run it continues searched it).
    resume_report = reconcile_resume(a, config->second, [&](const std::string& flag) {
      return cmd.count(flag) > 0 && !(flag == "--batch-size" && a.batch_size == kAutoBatch);
    });
    for (const std::string& line : resume_report) std::fprintf(stderr, "resume: %s\n", line.c_str());
    validate_train_args(a);  // the settings taken from the file meet the command line's rules
  }
  const bool model_parallel = a.pipeline > 1 || a.tensor_parallel > 1;
  if (model_parallel && a.micro_batches == 0) a.micro_batches = a.pipeline > 1 ? 2 * a.pipeline : 1;
  if (a.pipeline_schedule == "interleaved" && a.pipeline_chunks == 0) a.pipeline_chunks = 2;
  const int64_t chunks = a.pipeline_schedule == "interleaved" ? a.pipeline_chunks : 1;
  if (a.pipeline > 1) nn::check_pipeline_shape(nn::parse_pipeline_schedule(a.pipeline_schedule), a.pipeline, a.micro_batches, chunks);
  std::shared_ptr<dist::ProcessGroup> group;
  if (a.distributed || a.zero == 3 || a.tensor_parallel > 1 || (a.pipeline > 1 && launched_by_mpi())) group = dist::init_process_group();
  RunContext run;
  run.group = group.get();
  run.rank = group ? group->rank() : 0;
  run.world = group ? group->world_size() : 1;
  run.data_rank = run.rank, run.data_world = run.world;
  std::optional<nn::RankLayout> layout;
  if (model_parallel) {  // refused here, before any data is read, when the ranks do not lay out
    TESSERA_CHECK(run.world > 1 || a.tensor_parallel == 1, "train", "--tensor-parallel ", a.tensor_parallel,
                  " needs ranks: launch under mpirun");
    layout =
        run.world > 1 ? nn::RankLayout::of(run.world, run.rank, a.pipeline, a.tensor_parallel) : nn::RankLayout::in_process(a.pipeline);
    run.data_rank = layout->replica, run.data_world = layout->data;
    TESSERA_CHECK(a.zero != 3 || layout->data > 1, "train", "--zero 3 with --pipeline ", a.pipeline, " --tensor-parallel ",
                  a.tensor_parallel, " shards each rank's part over the data-parallel replicas, and ", run.world,
                  run.world == 1 ? " process leaves" : " ranks leave", " one: launch ", 2 * a.pipeline * a.tensor_parallel,
                  " (or any multiple of ", a.pipeline * a.tensor_parallel, " beyond it) under mpirun, or drop --zero 3");
    TESSERA_CHECK(a.pipeline == 1 || (a.batch_size / run.data_world) % a.micro_batches == 0, "train", "--batch-size ", a.batch_size,
                  " gives each of the ", run.data_world, " replicas ", a.batch_size / run.data_world,
                  " windows, which do not split into --micro-batches ", a.micro_batches);
  }
  TESSERA_CHECK(a.batch_size % run.data_world == 0, "train", "--batch-size ", a.batch_size, " (the global batch) must divide by the ",
                run.data_world, model_parallel ? " data-parallel replicas" : " ranks");
  // Ranks share the node's cores unless told otherwise.
  set_num_threads(a.threads == 0 && run.world > 1 ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / run.world)
                                                  : a.threads);
  run.device = pick_device(a.backend);
  if (group && run.device.type != DeviceType::cpu)
    run.device = Device(run.device.type, a.local_rank >= 0 ? a.local_rank : group->local_rank());
  if (run.rank != 0) a.quiet = true;  // rank 0 logs
  if (layout && !a.quiet) std::printf("%s", layout->describe().c_str());
  if (a.memory_limit > 0) set_memory_limit(run.device, a.memory_limit);
  const Device device = run.device;
  TrainTask task = is_language_model(a.model) ? make_text_task(a, run) : make_image_task(a, run);
  const DType precision = nn::parse_precision(a.precision);
  nn::OptimOptions opts;
  opts.lr = a.lr;
  opts.weight_decay = a.weight_decay;
  if (a.optimizer == "sgd") opts.momentum = 0.9;
  if (task.parameter_groups) opts.beta2 = 0.99;  // short runs: nanoGPT's setting for small language models
  const auto make_optimizer = [&](nn::Module& m) {
    if (!task.parameter_groups) return nn::make_optimizer(a.optimizer, m.parameters(), opts);
    return nn::make_optimizer(a.optimizer, dynamic_cast<nn::LanguageModel&>(m).param_groups(opts));
  };
  nlohmann::json batch_report;
  if (a.batch_size == kAutoBatch) {
    task.trial.make_model = task.make_model;
    task.trial.make_optimizer = make_optimizer;
    a.batch_size = auto_batch_size(task.trial, device, task.max_batch, group.get(), a.quiet, batch_report) * run.data_world;
  }
  manual_seed(static_cast<uint64_t>(a.seed));  // after the search, which draws from the generator
  // Split across ranks or devices: built on the host, and each rank moves its part to its device. A
  // pipeline of ranks builds only its stage's part; tensor parallelism (and one process) the whole.
  const bool stage_part = model_parallel && run.world > 1 && a.pipeline > 1 && task.make_host_stage;
  std::shared_ptr<nn::Module> model = stage_part       ? task.make_host_stage(layout->pipeline, chunks, layout->stage)
                                      : model_parallel ? task.make_host_model()
                                                       : task.make_model();
  std::string description = task.describe(*model, a);
  const int64_t parameters = [&model] {  // the whole model's
    const auto* gpt = dynamic_cast<const nn::GPT*>(model.get());
    return gpt ? gpt->whole_num_parameters() : model->num_parameters();
  }();
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  std::unique_ptr<nn::FullyShardedDataParallel> fsdp;
  std::unique_ptr<nn::GPTModelParallel> mp;
  if (model_parallel) {  // this rank keeps its stage and shards; the whole model is dropped
    nn::GPTParallelOptions po;
    po.pipeline = a.pipeline, po.tensor = a.tensor_parallel, po.micro_batches = a.micro_batches;
    po.schedule = nn::parse_pipeline_schedule(a.pipeline_schedule);
    po.chunks = chunks;
    po.zero3 = a.zero == 3;
    po.zero3_reshard_after_use = !a.zero_keep_gathered;
    po.optimizer = opts;
    mp = std::make_unique<nn::GPTModelParallel>(dynamic_cast<const nn::GPT&>(*model), group, device, po);
    model = std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>(), &mp->local_module());  // not owning: mp does
    description += detail::concat("\nmodel parallel: rank ", run.rank, " (stage ", layout->stage, ", tensor-parallel rank ",
                                  layout->tensor_rank, ", replica ", layout->replica, ") holds ", model->num_parameters(), " of ",
                                  parameters, " parameters; batch ", a.batch_size / run.data_world, " per replica");
    if (const nn::FullyShardedDataParallel* sharded = mp->fully_sharded()) {
      int64_t shard = 0;
      for (const Tensor& t : sharded->parameters()) shard += t.numel();
      description +=
          detail::concat("\nfully sharded (ZeRO-3) over the ", layout->data, " data-parallel replicas: ", shard, " of its ",
                         model->num_parameters(), " parameters (and their gradients and optimizer state) held per rank, ",
                         sharded->unit_count() - 1, sharded->unit_count() == 2 ? " block" : " blocks", " gathered one at a time");
    }
    optimizer = nn::make_optimizer(a.optimizer, mp->param_groups());
  } else if (a.zero == 3) {  // the optimizer steps the shards, in the groups the unsharded model would have
    nn::FsdpOptions fo;
    fo.param_groups = task.parameter_groups ? dynamic_cast<nn::LanguageModel&>(*model).param_groups(opts)
                                            : std::vector<nn::ParamGroup>{nn::ParamGroup{model->parameters(), opts}};
    fsdp = std::make_unique<nn::FullyShardedDataParallel>(model, *group, nn::default_fsdp_units(*model), std::move(fo));
    optimizer = nn::make_optimizer(a.optimizer, fsdp->param_groups());
  } else {
    optimizer = make_optimizer(*model);
    if (group) ddp = std::make_unique<nn::DistributedDataParallel>(model, *group);  // rank 0's initial weights everywhere
  }
  auto [train, test] = task.make_data(a.batch_size / run.data_world);
  const int64_t total_steps = task.total_steps > 0 ? task.total_steps : a.epochs * task.steps_of_epoch(*train);
  const std::unique_ptr<nn::Scheduler> scheduler = make_scheduler(a, *optimizer, total_steps, task.min_lr_factor);
  const nlohmann::json config = nlohmann::json::parse(train_config_json(a));
  if (!a.quiet) {
    std::printf("%s\n", description.c_str());
    if (fsdp) {
      int64_t shard = 0;
      for (const Tensor& t : fsdp->parameters()) shard += t.numel();
      std::printf(
          "fully sharded (ZeRO-3): %d ranks over %s, batch %lld per rank; %lld units gathered one at a time, %lld of %lld "
          "parameters (and their gradients and optimizer state) held per rank\n",
          run.world, group->backend().c_str(), static_cast<long long>(a.batch_size / run.world),
          static_cast<long long>(fsdp->unit_count() - 1), static_cast<long long>(shard), static_cast<long long>(model->num_parameters()));
    } else if (group && !mp) {
      std::printf("data parallel: %d ranks over %s, batch %lld per rank\n", run.world, group->backend().c_str(),
                  static_cast<long long>(a.batch_size / run.world));
    }
    if (a.graph && !DeviceGraph::supported(device))
      std::printf("--graph: %s cannot capture graphs; running eagerly\n", device.str().c_str());
    std::fflush(stdout);
  }
  nn::TrainOptions to;
  to.epochs = task.epochs;
  to.grad_accumulation = a.grad_accumulation;
  to.clip_norm = a.clip_norm;
  to.checkpoint = a.checkpoint;
  to.resume = a.resume;
  to.config = config.dump();
  to.metadata = task.checkpoint_metadata;
  to.progress = !a.quiet && task.progress_bar && isatty(STDERR_FILENO);
  to.precision = precision;
  to.graph = a.graph;
  to.on_nonfinite = a.on_nonfinite == "skip" ? nn::OnNonFinite::skip : nn::OnNonFinite::stop;
  to.detect_anomaly = a.detect_anomaly;
  to.reset_optimizer = a.reset_optimizer;
  to.resume_lr = a.lr;
  to.ddp = ddp.get();
  to.fsdp = fsdp.get();
  to.model_parallel = mp.get();
  // f16 gradients underflow without loss scaling; bf16 has f32's exponent range and needs none.
  nn::GradScaler scaler(nn::GradScalerOptions{.enabled = precision == DType::f16});
  if (scaler.enabled()) to.scaler = &scaler;
  int64_t epoch_now = 1;  // for --metrics
  to.on_epoch_end = [&](const nn::EpochStats& s) {
    epoch_now = s.epoch + 1;
    if (a.quiet) return;
    task.print_epoch(s, a);
    std::fflush(stdout);
  };
  std::vector<double> step_losses;
  MetricsLog metrics(run.rank == 0 ? a.metrics : std::string());
  // The learning rate a step used: on_step_end runs after the scheduler moved it on.
  double step_lr = optimizer->param_groups().front().options.lr;
  to.on_step_end = [&](int64_t step, double loss) {
    step_losses.push_back(loss);
    metrics.step(step, epoch_now, loss, step_lr, a.batch_size * a.grad_accumulation * task.targets_per_sample, task.unit, device);
    step_lr = optimizer->param_groups().front().options.lr;
  };
  nn::Trainer trainer(*model, *optimizer, scheduler.get(), task.loss);
  const auto t0 = std::chrono::steady_clock::now();
  const auto history = trainer.fit(*train, test.get(), to);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const nn::EvalStats final_eval = history.empty() ? trainer.evaluate(*test) : history.back().test;
  double throughput = 0;
  for (const auto& h : history) throughput += h.samples_per_second / static_cast<double>(history.size());
  // The export reads the bare model: every rank gathers the shards first (a collective).
  std::optional<nn::FullyShardedDataParallel::FullParams> gathered;
  if (fsdp && !a.export_onnx.empty()) gathered.emplace(fsdp->summon_full_params());
  if (mp && !a.export_onnx.empty()) {  // split: the whole GPT rebuilt from the gathered parts
    const nn::StateDict whole_state = mp->full_state_dict();
    if (run.rank == 0) {
      model = task.make_model();
      model->load_state_dict(whole_state);
    }
  }
  if (run.rank != 0) return;  // every rank evaluated the same test set; rank 0 reports
  if (ddp) std::printf("data parallel: parameters bitwise equal on all %d ranks\n", run.world);
  if (mp && mp->layout().data > 1 && !mp->fully_sharded())
    std::printf("data parallel: the %d replicas' parameters bitwise equal\n", mp->layout().data);
  if (mp && mp->pipeline()) std::printf("%s\n", pipeline_report(*mp->pipeline(), a).c_str());
  if (!a.export_onnx.empty()) task.export_check(*model, *test, a);
  task.print_result(final_eval, seconds, throughput, a, run.world);
  if (!a.json.empty()) {
    nlohmann::json j = {{"backend", device.str()}, {"model", a.model},         {"precision", a.precision},  {"seconds", seconds},
                        {"config", config},        {"parameters", parameters}, {"step_losses", step_losses}};
    task.report(j, final_eval, throughput, a);
    if (scaler.enabled()) j["loss_scaling"] = {{"final_scale", scaler.get_scale()}, {"skipped_steps", scaler.skipped_steps()}};
    for (const auto& h : history) {
      nlohmann::json e = {{"epoch", h.epoch},
                          {"step", h.step},
                          {"train_loss", h.train_loss},
                          {"test_loss", h.test.loss},
                          {"test_accuracy", h.test.accuracy},
                          {"samples_per_second", h.samples_per_second},
                          {"step_ms", h.step_ms},
                          {"seconds", h.seconds},
                          {"graph_replays", h.graph_replays},
                          {"skipped_steps", h.skipped_steps},
                          {"lr", h.lr}};
      if (task.report_epoch) task.report_epoch(e, h);
      j["history"].push_back(e);
    }
    if (!resume_report.empty()) j["resume_overrides"] = resume_report;
    if (mp) {
      const nn::RankLayout& l = mp->layout();
      j["layout"] = {{"pipeline", l.pipeline}, {"tensor_parallel", l.tensor}, {"data_parallel", l.data}, {"zero", a.zero}};
      if (const nn::Pipeline* p = mp->pipeline())
        j["pipeline"] = {{"stages", p->stats().stages},
                         {"micro_batches", p->stats().micro_batches},
                         {"schedule", a.pipeline_schedule},
                         {"chunks", p->stats().chunks},
                         {"bubble_fraction", p->stats().bubble_fraction},
                         {"measured_idle_fraction", p->stats().measured_idle_fraction}};
    }
    if (!batch_report.is_null()) j["batch_search"] = batch_report;
    nn::write_file_atomic(a.json, j.dump(2) + "\n", "train --json");
  }
}

// The run, under a profile when --profile names a trace file.
void run_train_profiled(TrainArgs& a, const CLI::App& cmd) {
  if (a.profile.empty()) return run_train(a, cmd);
  profile::start();
  try {
    run_train(a, cmd);
  } catch (...) {
    (void)profile::stop();  // the error is the news, not a half trace
    throw;
  }
  const profile::Trace trace = profile::stop();
  trace.write_chrome_json(a.profile);
  if (!a.quiet) std::printf("profile: %zu spans on %zu tracks written to %s\n%s", trace.spans.size(), trace.tracks.size(), a.profile.c_str(),
                            trace.summary_table().c_str());
}

bool g_parse_only = false;
}  // namespace

void set_parse_only(bool on) { g_parse_only = on; }

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model: mlp/cnn on Fashion-MNIST, gpt/lstm on text");
  static TrainArgs a;
  a = TrainArgs{};
  add_train_options(*cmd, a);
  cmd->callback([cmd] {
    if (g_parse_only) {
      validate_train_args(a, [&](const std::string& flag) { return cmd->count(flag) > 0; });
      return;
    }
    if (a.deterministic) set_deterministic(true);
    if (const char* plant = std::getenv("TESSERA_PLANT_WRONG_KERNEL"); plant && *plant) {
      plant_wrong_kernel(plant);  // the cross-check's own test
      std::printf("WARNING: TESSERA_PLANT_WRONG_KERNEL=%s: that kernel's outputs are 1%% off\n", plant);
    }
    if (!a.check_against.empty()) {
      set_check_against_cpu(true);
      run_train_profiled(a, *cmd);
      const auto first = first_divergence();
      std::printf("check-against cpu: %lld kernels compared with the cpu backend, %lld diverged%s%s\n",
                  static_cast<long long>(cross_checked_kernels()), static_cast<long long>(divergent_kernels()), first ? "; first: " : "",
                  first ? first->text().c_str() : "");
      set_check_against_cpu(false);
      TESSERA_CHECK(!first, "train", "--check-against cpu: ", first ? first->text() : "");
      return;
    }
    run_train_profiled(a, *cmd);
  });
}

}  // namespace tessera::tools
