// Data-parallel checks, run by CTest under `mpirun -np 2` and `-np 3` (label "dist"):
//   dist_test collectives|ddp|zero|tensor-parallel <device>   every rank checks, prints failures, exits non-zero on any
//   dist_test zero-save|zero-load <device> <path>   ZeRO-1 state across world sizes (zero_resume.sh)
//   dist_test fsdp|fsdp-memory <device>   ZeRO-3: a GPT against one rank; its memory against DDP's (fsdp_checks.cpp)
//   dist_test pipeline-gpt-part <device>   each stage's rank builds only its part of the GPT (model_parallel_checks.cpp)
//   dist_test model-parallel-zero3 <device>   ZeRO-3 x pipeline / tensor parallel on 4 ranks (model_parallel_checks.cpp)
//   dist_test pipeline|pipeline-gpt <device>   send/recv, the ranked pipeline, a pipelined GPT (2 ranks)
//   dist_test pipeline-interleaved <device>   the interleaved schedule over every rank (2 chunks each)
//   dist_test hang|die|pipeline-die|p2p-unbatched   the watchdog cases (tests/dist/watchdog.sh)
// A plain program, not doctest: doctest's discovery would run it without mpirun at build time.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "dist_checks.h"
#include "tessera/dist.h"
#include "tessera/nn/ddp.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/pipeline.h"
#include "tessera/nn/serialize.h"
#include "tessera/nn/tensor_parallel.h"
#include "tessera/nn/zero.h"
#include "tessera/tessera.h"

using namespace tessera;

int g_failures = 0;
int g_rank = 0;
void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
}
double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(sub(a.to(kCPU, DType::f64), b.to(kCPU, DType::f64)))).item<double>(); }
TokenBatch token_batch(int64_t vocab, int64_t rows, int64_t context, Device dev, uint64_t seed) {
  manual_seed(seed);
  const Tensor tokens = randint(0, vocab, {rows, context + 1}, DType::i64, dev);
  return {tokens.narrow(1, 0, context).contiguous(), tokens.narrow(1, 1, context).contiguous()};
}
bool same_on_every_rank(dist::ProcessGroup& pg, const Tensor& t) {
  Tensor hi = t.detach().clone(), lo = t.detach().clone();
  pg.all_reduce(hi, dist::ReduceOp::max)->wait();
  pg.all_reduce(lo, dist::ReduceOp::min)->wait();
  return max_abs_diff(hi, lo) == 0.0;
}

namespace {

// A tensor whose values depend on the rank: base[i] * (rank + 1) + i.
Tensor rank_tensor(const Shape& shape, int rank, DType dt, Device dev) {
  const int64_t n = numel(shape);
  return add(mul(arange(0.0, static_cast<double>(n), 1.0, DType::f64, kCPU), 0.5 + rank), rank).reshape(shape).to(dev, dt);
}

void check_collectives(dist::ProcessGroup& pg, Device dev) {
  const int r = pg.rank(), w = pg.world_size();
  const double wd = w;
  // sum over ranks of (i * (0.5 + rank) + rank) = i * (w^2 / 2) + w (w - 1) / 2
  const Tensor idx = arange(0.0, 12.0, 1.0, DType::f64, kCPU).reshape({3, 4});
  const Tensor want_sum = add(mul(idx, wd * wd / 2.0), wd * (wd - 1) / 2.0);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor t = rank_tensor({3, 4}, r, dt, dev);
    pg.all_reduce(t, dist::ReduceOp::sum)->wait();
    const double tol = dt == DType::bf16 ? 0.5 : dt == DType::f16 ? 0.05 : 1e-9;
    expect(t.dtype() == dt && t.device() == dev, "all_reduce keeps dtype and device");
    expect(max_abs_diff(t, want_sum) <= tol, std::string("all_reduce sum ") + dtype_name(dt));
  }
  Tensor mean_t = rank_tensor({3, 4}, r, DType::f32, dev);
  pg.all_reduce(mean_t, dist::ReduceOp::mean)->wait();
  expect(max_abs_diff(mean_t, div(want_sum, wd)) <= 1e-5, "all_reduce mean");
  Tensor max_t = rank_tensor({3, 4}, r, DType::f32, dev);
  pg.all_reduce(max_t, dist::ReduceOp::max)->wait();
  expect(max_abs_diff(max_t, rank_tensor({3, 4}, w - 1, DType::f32, kCPU)) == 0, "all_reduce max");
  // A transposed (non-contiguous) view is reduced in place through a staging copy.
  Tensor base = rank_tensor({4, 3}, r, DType::f32, dev);
  Tensor view = base.transpose(0, 1);
  pg.all_reduce(view, dist::ReduceOp::sum)->wait();
  expect(max_abs_diff(base.transpose(0, 1), add(mul(arange(0.0, 12.0, 1.0, DType::f64, kCPU).reshape({4, 3}).transpose(0, 1), wd * wd / 2.0),
                                                wd * (wd - 1) / 2.0)) <= 1e-4,
         "all_reduce of a transposed view");
  const int root = w - 1;
  Tensor b = rank_tensor({5}, r, DType::i64, dev);
  pg.broadcast(b, root)->wait();
  expect(max_abs_diff(b, rank_tensor({5}, root, DType::i64, kCPU)) == 0, "broadcast from the last rank");
  const Tensor in = full({2}, static_cast<double>(r), DType::f32, dev);
  Tensor gathered = empty({2 * w}, DType::f32, dev);
  pg.all_gather(gathered, in)->wait();
  const std::vector<float> g = gathered.to(kCPU).to_vector<float>();
  for (int k = 0; k < 2 * w; ++k) expect(g[static_cast<size_t>(k)] == static_cast<float>(k / 2), "all_gather is rank-major");
  const Tensor scatter_in = add(arange(0.0, 2.0 * w, 1.0, DType::f32, dev), r);
  Tensor scattered = empty({2}, DType::f32, dev);
  pg.reduce_scatter(scattered, scatter_in, dist::ReduceOp::sum)->wait();
  const std::vector<float> s = scattered.to(kCPU).to_vector<float>();
  for (int k = 0; k < 2; ++k) {
    expect(s[static_cast<size_t>(k)] == static_cast<float>(w * (2 * r + k) + w * (w - 1) / 2), "reduce_scatter slices");
  }
  pg.barrier();
  bool threw = false;
  try {
    Tensor bad = empty({3}, DType::f32, dev);
    pg.reduce_scatter(bad, empty({3 * w + 1}, DType::f32, dev));
  } catch (const Error& e) {
    threw = std::string(e.what()).find("reduce_scatter") != std::string::npos;
  }
  expect(threw, "a bad reduce_scatter shape throws naming the op");
}

std::shared_ptr<nn::Sequential> make_model(uint64_t seed, Device dev) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Linear>(8, 16)).add(std::make_shared<nn::ReLU>()).add(std::make_shared<nn::Linear>(16, 3));
  m->to(dev);
  return m;
}

// DDP on uneven shards (global batch 11) with a loss scaled by local / global batch and a sum
// reduction equals one process training on the whole batch; gradient accumulation under
// no_sync gives the same step; every rank ends bitwise equal.
void check_ddp(dist::ProcessGroup& pg, Device dev) {
  const int r = pg.rank(), w = pg.world_size();
  const int64_t global = 11, steps = 5;
  manual_seed(1234);
  const Tensor x_all = randn({steps, global, 8}, DType::f32, kCPU);
  const Tensor y_all = randint(0, 3, {steps, global}, DType::i64, kCPU);
  const int64_t begin = global * r / w, end = global * (r + 1) / w;
  nn::OptimOptions opt;
  opt.lr = 0.1;
  // The single-process reference, rank 0's initialisation.
  auto ref = make_model(7, dev);
  nn::SGD ref_opt(ref->parameters(), opt);
  for (int64_t s = 0; s < steps; ++s) {
    ref->zero_grad();
    cross_entropy(ref->forward(x_all.select(0, s).to(dev)), y_all.select(0, s).to(dev)).backward();
    ref_opt.step();
  }
  // Each rank initialises differently; the constructor's broadcast makes them rank 0's model.
  auto model = make_model(7 + static_cast<uint64_t>(r), dev);
  nn::DdpOptions ddp_opt;
  ddp_opt.bucket_bytes = 256;  // several buckets
  ddp_opt.reduce = dist::ReduceOp::sum;
  nn::DistributedDataParallel ddp(model, pg, ddp_opt);
  expect(ddp.bucket_count() > 1, "small buckets give several");
  nn::SGD sgd(model->parameters(), opt);
  for (int64_t s = 0; s < steps; ++s) {
    model->zero_grad();
    const Tensor x = x_all.select(0, s).narrow(0, begin, end - begin).to(dev);
    const Tensor y = y_all.select(0, s).narrow(0, begin, end - begin).to(dev);
    const auto loss = [&](int64_t from, int64_t len) {
      return div(cross_entropy(ddp(x.narrow(0, from, len)), y.narrow(0, from, len), Reduction::sum), static_cast<double>(global));
    };
    if (s % 2 == 1 && end - begin >= 2) {  // two micro-batches: accumulate, then reduce once
      {
        auto guard = ddp.no_sync();
        loss(0, 1).backward();
      }
      loss(1, end - begin - 1).backward();
    } else {
      loss(0, end - begin).backward();
    }
    ddp.finish_gradient_sync();
    sgd.step();
  }
  const auto got = model->parameters(), want = ref->parameters();
  for (size_t k = 0; k < got.size(); ++k) {
    expect(max_abs_diff(got[k], want[k]) <= 2e-5, "DDP parameters equal single-process training (parameter " + std::to_string(k) + ")");
    Tensor hi = got[k].detach().clone(), lo = got[k].detach().clone();
    pg.all_reduce(hi, dist::ReduceOp::max)->wait();
    pg.all_reduce(lo, dist::ReduceOp::min)->wait();
    expect(max_abs_diff(hi, lo) == 0, "every rank holds identical parameters (parameter " + std::to_string(k) + ")");
  }
  // The sampler: shards are disjoint, cover the epoch, and change with the epoch.
  nn::DistributedSampler sampler(10, r, w, true, 5);
  const std::vector<int64_t> mine = sampler.indices();
  expect(static_cast<int64_t>(mine.size()) == sampler.num_samples(), "sampler shard size");
  Tensor counts = zeros({10}, DType::f64, kCPU);
  for (int64_t i : mine) counts.narrow(0, i, 1).copy_(add(counts.narrow(0, i, 1), 1.0));
  pg.all_reduce(counts, dist::ReduceOp::sum)->wait();
  expect(amin(counts).item<double>() >= 1, "the shards cover every sample");
  sampler.set_epoch(1);
  expect(sampler.indices() != mine || w == 10, "another epoch, another order");
}
// ZeRO-1 against DDP: Adam over sharded state equals Adam under DDP (both with summed gradients
// of losses scaled by local / global batch). The gathered state_dict is the same on every rank,
// and resuming from it continues bit for bit. zero-save / zero-load: the gathered state written
// under one world size and loaded under another continues like the uninterrupted
// single-process run (tests/dist/zero_resume.sh runs them at 3 and then 2 ranks).
struct ZeroRun {
  dist::ProcessGroup& pg;
  Device dev;
  Tensor x_all, y_all;
  int64_t global = 11;
  explicit ZeroRun(dist::ProcessGroup& g, Device d) : pg(g), dev(d) {
    manual_seed(99);
    x_all = randn({8, global, 8}, DType::f32, kCPU);
    y_all = randint(0, 3, {8, global}, DType::i64, kCPU);
  }
  Tensor local_loss(nn::Module& m, int64_t step) const {
    const int r = pg.rank(), w = pg.world_size();
    const int64_t begin = global * r / w, end = global * (r + 1) / w;
    const Tensor x = x_all.select(0, step).narrow(0, begin, end - begin).to(dev);
    const Tensor y = y_all.select(0, step).narrow(0, begin, end - begin).to(dev);
    return div(cross_entropy(m.forward(x), y, Reduction::sum), static_cast<double>(global));
  }
  Tensor full_loss(nn::Module& m, int64_t step) const {
    return cross_entropy(m.forward(x_all.select(0, step).to(dev)), y_all.select(0, step).to(dev));
  }
};
nn::ZeroRedundancyOptimizer::Factory adam_factory() {
  return [](std::vector<nn::ParamGroup> g) { return std::make_unique<nn::Adam>(std::move(g)); };
}
nn::OptimOptions adam_options() {
  nn::OptimOptions o;
  o.lr = 0.05;
  o.weight_decay = 0.01;
  return o;
}

void check_zero(dist::ProcessGroup& pg, Device dev) {
  ZeroRun run(pg, dev);
  const int64_t steps = 6;
  auto ddp_model = make_model(3, dev);
  nn::DdpOptions o;
  o.reduce = dist::ReduceOp::sum;
  nn::DistributedDataParallel ddp(ddp_model, pg, o);
  nn::Adam ddp_opt(ddp_model->parameters(), adam_options());
  auto zero_model = make_model(3 + static_cast<uint64_t>(pg.rank()), dev);  // the constructor broadcasts rank 0's
  nn::ZeroRedundancyOptimizer zero(zero_model->parameters(), adam_options(), adam_factory(), pg, dist::ReduceOp::sum);
  nn::StateDict saved_state, saved_params;
  for (int64_t s = 0; s < steps; ++s) {
    ddp_model->zero_grad();
    run.local_loss(*ddp_model, s).backward();
    ddp.finish_gradient_sync();
    ddp_opt.step();
    zero.zero_grad();
    run.local_loss(*zero_model, s).backward();
    zero.step();
    if (s == 2) {
      saved_state = zero.state_dict();
      for (const auto& [k, t] : zero_model->state_dict()) saved_params[k] = t.detach().clone();  // state_dict() aliases the weights
    }
  }
  const auto a = ddp_model->parameters(), b = zero_model->parameters();
  for (size_t k = 0; k < a.size(); ++k) {
    expect(max_abs_diff(a[k], b[k]) <= 1e-5, "ZeRO-1 equals DDP (parameter " + std::to_string(k) + ")");
    Tensor hi = b[k].detach().clone(), lo = b[k].detach().clone();
    pg.all_reduce(hi, dist::ReduceOp::max)->wait();
    pg.all_reduce(lo, dist::ReduceOp::min)->wait();
    expect(max_abs_diff(hi, lo) == 0, "ZeRO-1 ranks hold identical parameters");
  }
  int64_t total = 0;
  for (const Tensor& p : b) total += p.numel();
  expect(saved_state.count("state.0.0.exp_avg") && saved_state.at("state.0.0.exp_avg").numel() == total, "the gathered state is full-size");
  // Resume from step 3's gathered state: steps 3-5 again give the same parameters.
  auto resumed = make_model(3, dev);
  resumed->load_state_dict(saved_params);
  nn::ZeroRedundancyOptimizer zero2(resumed->parameters(), adam_options(), adam_factory(), pg, dist::ReduceOp::sum);
  zero2.load_state_dict(saved_state);
  for (int64_t s = 3; s < steps; ++s) {
    zero2.zero_grad();
    run.local_loss(*resumed, s).backward();
    zero2.step();
  }
  const auto c = resumed->parameters();
  for (size_t k = 0; k < c.size(); ++k) expect(max_abs_diff(b[k], c[k]) == 0, "resuming from the gathered state is exact");
}

// zero-save: 4 ZeRO steps, then rank 0 writes parameters and gathered state. zero-load: reads
// them under this (other) world size, 4 more steps, compares with 8 single-process Adam steps.
void zero_save_or_load(dist::ProcessGroup& pg, Device dev, bool save, const std::string& path) {
  ZeroRun run(pg, dev);
  auto model = make_model(5, dev);
  if (!save) model->load_state_dict(nn::load_safetensors(path + ".params").tensors);
  nn::ZeroRedundancyOptimizer zero(model->parameters(), adam_options(), adam_factory(), pg, dist::ReduceOp::sum);
  if (!save) zero.load_state_dict(nn::load_safetensors(path + ".optim").tensors);
  for (int64_t s = save ? 0 : 4; s < (save ? 4 : 8); ++s) {
    zero.zero_grad();
    run.local_loss(*model, s).backward();
    zero.step();
  }
  if (save) {
    const nn::StateDict state = zero.state_dict();  // a collective: every rank
    if (pg.rank() == 0) nn::save_safetensors(path + ".params", model->state_dict()), nn::save_safetensors(path + ".optim", state);
    pg.barrier();
    return;
  }
  auto ref = make_model(5, dev);
  nn::Adam opt(ref->parameters(), adam_options());
  for (int64_t s = 0; s < 8; ++s) {
    ref->zero_grad();
    run.full_loss(*ref, s).backward();
    opt.step();
  }
  const auto a = model->parameters(), b = ref->parameters();
  for (size_t k = 0; k < a.size(); ++k) {
    expect(max_abs_diff(a[k], b[k]) <= 2e-5, "ZeRO-1 resumed under another world size equals single-process Adam (parameter " +
                                                 std::to_string(k) + ")");
  }
}
}  // namespace

// Point-to-point and the ranked pipeline (2 ranks, one stage each): send/recv round trips in
// every dtype the group moves, then each schedule's loss and this rank's stage gradients equal
// those of the whole model on one rank.
void check_pipeline(dist::ProcessGroup& pg, Device dev) {
  const int r = pg.rank(), peer = 1 - r;
  expect(pg.world_size() == 2, "the pipeline check runs on 2 ranks");
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
    // One way and back, each side's transfers in the order the other's meet them (a send left
    // unreceived holds a NCCL stream: TESSERA_P2P_STREAM_ORDER checks that here), then both ways
    // at once in one batch_p2p.
    const Tensor mine = rank_tensor({3, 5}, r, dt, dev);
    Tensor got = zeros({3, 5}, dt, dev), both = zeros({3, 5}, dt, dev);
    if (r == 0) {
      pg.send(mine, peer, 7)->wait();
      pg.recv(got, peer, 7)->wait();
    } else {
      pg.recv(got, peer, 7)->wait();
      pg.send(mine, peer, 7)->wait();
    }
    expect(max_abs_diff(got, rank_tensor({3, 5}, peer, dt, dev)) == 0.0, std::string("send/recv of ") + dtype_name(dt));
    for (auto& w : pg.batch_p2p({{dist::P2POp::Kind::send, mine, peer, 8}, {dist::P2POp::Kind::recv, both, peer, 8}})) w->wait();
    expect(max_abs_diff(both, rank_tensor({3, 5}, peer, dt, dev)) == 0.0, std::string("batch_p2p of ") + dtype_name(dt));
  }
  const auto mse = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  for (auto sched : {nn::PipelineSchedule::gpipe, nn::PipelineSchedule::one_f_one_b}) {
    manual_seed(5);
    auto l1 = std::make_shared<nn::Linear>(8, 32), l2 = std::make_shared<nn::Linear>(32, 4);
    auto whole = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{l1, std::make_shared<nn::Tanh>(), l2});
    whole->to(dev);
    const Tensor x = div(rank_tensor({16, 8}, 0, DType::f32, dev), 100.0), y = div(rank_tensor({16, 4}, 1, DType::f32, dev), 50.0);
    const Tensor ref = mse(whole->forward(x), y);
    ref.backward();
    // This rank's stage: a copy of its part of the whole model.
    auto copy = std::make_shared<nn::Linear>(r == 0 ? 8 : 32, r == 0 ? 32 : 4);
    copy->load_state_dict((r == 0 ? l1 : l2)->state_dict());
    nn::ModulePtr stage =
        r == 0 ? nn::ModulePtr(std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{copy, std::make_shared<nn::Tanh>()}))
               : nn::ModulePtr(copy);
    std::shared_ptr<dist::ProcessGroup> group(&pg, [](dist::ProcessGroup*) {});
    nn::Pipeline pipe(stage, group, dev, sched, 4);
    const double evaluated = pipe.evaluate(x, y, mse);
    const double loss = pipe.train_step(x, y, mse);
    const std::string name = nn::pipeline_schedule_name(sched);
    expect(std::abs(loss - ref.item<double>()) <= 1e-5 * std::abs(ref.item<double>()), name + ": pipeline loss equals the whole model's");
    expect(std::abs(evaluated - ref.item<double>()) <= 1e-5 * std::abs(ref.item<double>()),
           name + ": evaluate() gives the whole model's loss");
    const nn::Linear& want = r == 0 ? *l1 : *l2;
    expect(max_abs_diff(copy->weight.grad(), want.weight.grad()) <= 1e-6, name + ": stage weight gradient");
    expect(max_abs_diff(copy->bias.grad(), want.bias.grad()) <= 1e-6, name + ": stage bias gradient");
    expect(pipe.stats().bubble_fraction > 0.19 && pipe.stats().bubble_fraction < 0.21, name + ": bubble (S-1)/(M+S-1)");
  }
}

// The interleaved schedule over every rank of the group (S = world, 2 chunks each: rank r holds
// virtual stages r and r + S of a 2S-layer chain), with M = S (every forward first) and M = 2S
// micro-batches: the loss, evaluate() and each chunk's gradients equal the whole chain's on one
// rank. Under TESSERA_P2P_STREAM_ORDER (CTest) a transfer order that would deadlock NCCL's ring
// of stages deadlocks here and the watchdog names it.
void check_pipeline_interleaved(dist::ProcessGroup& pg, Device dev) {
  const int r = pg.rank(), w = pg.world_size();
  const auto mse = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  std::shared_ptr<dist::ProcessGroup> group(&pg, [](dist::ProcessGroup*) {});
  for (int64_t m : {int64_t{w}, int64_t{2 * w}}) {
    manual_seed(5);
    std::vector<std::shared_ptr<nn::Linear>> linears;
    std::vector<nn::ModulePtr> layers;
    for (int l = 0; l < 2 * w; ++l) {
      linears.push_back(std::make_shared<nn::Linear>(l == 0 ? 8 : 16, l == 2 * w - 1 ? 4 : 16));
      layers.push_back(linears.back()), layers.push_back(std::make_shared<nn::Tanh>());
    }
    auto whole = std::make_shared<nn::Sequential>(layers);
    whole->to(dev);
    const Tensor x = div(rank_tensor({4 * w, 8}, 0, DType::f32, dev), 100.0), y = div(rank_tensor({4 * w, 4}, 1, DType::f32, dev), 50.0);
    const Tensor ref = mse(whole->forward(x), y);
    ref.backward();
    std::vector<std::shared_ptr<nn::Linear>> mine;  // copies of virtual stages r and r + w
    std::vector<nn::ModulePtr> chunks;
    for (int c = 0; c < 2; ++c) {
      const nn::Linear& src = *linears[static_cast<size_t>(c * w + r)];
      mine.push_back(std::make_shared<nn::Linear>(src.weight.size(1), src.weight.size(0)));
      mine.back()->load_state_dict(src.state_dict());
      chunks.push_back(std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{mine.back(), std::make_shared<nn::Tanh>()}));
    }
    nn::Pipeline pipe(chunks, group, dev, nn::PipelineSchedule::interleaved_1f1b, m);
    const double evaluated = pipe.evaluate(x, y, mse);
    const double loss = pipe.train_step(x, y, mse);
    const std::string name = "interleaved, " + std::to_string(m) + " micro-batches";
    expect(std::abs(loss - ref.item<double>()) <= 1e-5 * std::abs(ref.item<double>()), name + ": pipeline loss equals the whole chain's");
    expect(std::abs(evaluated - ref.item<double>()) <= 1e-5 * std::abs(ref.item<double>()), name + ": evaluate()");
    double worst = 0.0;
    for (int c = 0; c < 2; ++c) {
      const nn::Linear& want = *linears[static_cast<size_t>(c * w + r)];
      worst =
          std::max({worst, max_abs_diff(mine[c]->weight.grad(), want.weight.grad()), max_abs_diff(mine[c]->bias.grad(), want.bias.grad())});
    }
    expect(worst <= 1e-6, name + ": both chunks' gradients");
    if (r == 0)
      std::printf("interleaved pipeline, %d stages x 2 chunks, %lld micro-batches: loss %.6f (whole %.6f), bubble %.3f\n", w,
                  static_cast<long long>(m), loss, ref.item<double>(), pipe.stats().bubble_fraction);
  }
}

// Tensor parallelism on every rank of the group against the whole layers on one rank: a
// column- then row-parallel MLP, a gathered column-parallel output, and a vocabulary-split
// embedding with the vocab-parallel cross-entropy: the same outputs and loss, and each rank's
// gradients equal its slice of the whole layers'.
void check_tensor_parallel(dist::ProcessGroup& pg, Device dev) {
  const int r = pg.rank(), w = pg.world_size();
  std::shared_ptr<dist::ProcessGroup> group(&pg, [](dist::ProcessGroup*) {});
  const auto slice_diff = [&](const Tensor& local, const Tensor& whole, int64_t axis) {
    const int64_t n = local.size(axis);
    return max_abs_diff(local, whole.narrow(axis, r * n, n));
  };
  manual_seed(9);
  nn::Linear l1(6, 4 * w), l2(4 * w, 5);
  l1.to(dev), l2.to(dev);
  const Tensor x = div(rank_tensor({3, 6}, 0, DType::f32, dev), 10.0), y = div(rank_tensor({3, 5}, 1, DType::f32, dev), 20.0);
  const Tensor ref = mse_loss(l2.forward(tanh(l1.forward(x))), y);
  ref.backward();
  nn::tp::ColumnParallelLinear c1(6, 4 * w, group, true, false, {DType::f32, dev});
  nn::tp::RowParallelLinear r2(4 * w, 5, group, true, {DType::f32, dev});
  c1.from_full(l1.weight, l1.bias);
  r2.from_full(l2.weight, l2.bias);
  const Tensor loss = mse_loss(r2.forward(tanh(c1.forward(x))), y);
  loss.backward();
  expect(std::abs(loss.item<double>() - ref.item<double>()) <= 1e-6, "tensor-parallel MLP loss");
  expect(slice_diff(c1.weight.grad(), l1.weight.grad(), 0) <= 1e-6, "column-parallel weight gradient");
  expect(slice_diff(c1.bias.grad(), l1.bias.grad(), 0) <= 1e-6, "column-parallel bias gradient");
  expect(slice_diff(r2.weight.grad(), l2.weight.grad(), 1) <= 1e-6, "row-parallel weight gradient");
  expect(max_abs_diff(r2.bias.grad(), l2.bias.grad()) <= 1e-6, "row-parallel bias gradient");
  nn::tp::ColumnParallelLinear gathered(6, 4 * w, group, true, true, {DType::f32, dev});
  gathered.from_full(l1.weight, l1.bias);
  expect(max_abs_diff(gathered.forward(x), l1.forward(x)) <= 1e-6, "gathered column-parallel output");

  // Embedding -> vocabulary-split output layer -> vocab-parallel cross-entropy.
  const int64_t vocab = 3 * w;
  manual_seed(4);
  nn::Embedding emb(vocab, 6, {DType::f32, dev});
  nn::Linear head(6, vocab, false, {DType::f32, dev});
  const Tensor ids = from_vector<int64_t>({0, vocab - 1, 2, 1}, {4}).to(dev);
  const Tensor target = from_vector<int64_t>({vocab - 1, 0, 1, vocab / 2}, {4}).to(dev);
  const Tensor ref_ce = cross_entropy(head.forward(emb.forward(ids)), target);
  ref_ce.backward();
  nn::tp::VocabParallelEmbedding pemb(vocab, 6, group, {DType::f32, dev});
  nn::tp::ColumnParallelLinear phead(6, vocab, group, false, false, {DType::f32, dev});
  pemb.from_full(emb.weight);
  phead.from_full(head.weight, Tensor());
  const Tensor ce = nn::tp::vocab_parallel_cross_entropy(phead.forward(pemb.forward(ids)), target, pg);
  ce.backward();
  expect(std::abs(ce.item<double>() - ref_ce.item<double>()) <= 1e-5, "vocab-parallel cross-entropy equals the whole one");
  expect(slice_diff(pemb.weight.grad(), emb.weight.grad(), 0) <= 1e-6, "vocab-parallel embedding gradient");
  expect(slice_diff(phead.weight.grad(), head.weight.grad(), 0) <= 1e-6, "vocab-split output layer gradient");

  // A GPT block with its heads and MLP split.
  const nn::GPTConfig cfg{16, 8, 1, 2 * w, 8 * w, 0.0};
  manual_seed(6);
  nn::GPTBlock block(cfg, {DType::f32, dev});
  const Tensor bx = randn({2, 5, cfg.dim}, DType::f32, dev), by = randn({2, 5, cfg.dim}, DType::f32, dev);
  const Tensor ref_block = mse_loss(block.forward(bx), by);
  ref_block.backward();
  nn::tp::ParallelGPTBlock pblock(block, cfg.heads, group);
  const Tensor block_loss = mse_loss(pblock.forward(bx), by);
  block_loss.backward();
  expect(std::abs(block_loss.item<double>() - ref_block.item<double>()) <= 1e-5 * ref_block.item<double>(),
         "tensor-parallel GPT block loss");
  const int64_t c = cfg.dim, local = c / w;
  const Tensor& gq = block.qkv->weight.grad();
  const Tensor want_qkv =
      cat({gq.narrow(0, r * local, local), gq.narrow(0, c + r * local, local), gq.narrow(0, 2 * c + r * local, local)}, 0);
  expect(max_abs_diff(pblock.qkv->weight.grad(), want_qkv) <= 1e-5, "GPT block: QKV gradient of this rank's heads");
  expect(slice_diff(pblock.proj->weight.grad(), block.proj->weight.grad(), 1) <= 1e-5, "GPT block: proj gradient");
  expect(slice_diff(pblock.fc->weight.grad(), block.fc->weight.grad(), 0) <= 1e-5, "GPT block: fc gradient");
  expect(slice_diff(pblock.fc_out->weight.grad(), block.fc_out->weight.grad(), 1) <= 1e-5, "GPT block: fc_out gradient");
  expect(max_abs_diff(pblock.ln1->weight.grad(), block.ln1->weight.grad()) <= 1e-5, "GPT block: replicated ln1 gradient");
}

// A GPT trained 50 steps as a 2-stage ranked pipeline (1F1B, tied embedding and head across the
// ranks) follows the same GPT trained on each rank alone.
void check_pipeline_gpt(dist::ProcessGroup& pg, Device dev) {
  const nn::GPTConfig cfg{12, 8, 2, 2, 16, 0.0};
  manual_seed(21);
  nn::GPT gpt(cfg, {DType::f32, dev});
  nn::GPTStages split = nn::split_gpt(gpt, pg.world_size());
  std::shared_ptr<dist::ProcessGroup> group(&pg, [](dist::ProcessGroup*) {});
  nn::Pipeline pipe(split.stages[pg.rank()], group, dev, nn::PipelineSchedule::one_f_one_b, 4);
  pipe.tie(0, split.embedding, pg.world_size() - 1, split.head);
  nn::OptimOptions o;
  o.lr = 1e-2;
  nn::Adam whole_opt(gpt.parameters(), o), stage_opt(pipe.parameters(), o);
  const auto ce = [&](const Tensor& logits, const Tensor& target) {
    return cross_entropy(logits.reshape({logits.size(0) * logits.size(1), cfg.vocab}), target.reshape({target.numel()}));
  };
  const auto [x, y] = token_batch(cfg.vocab, 8, cfg.context, dev);
  double worst = 0.0, first = 0.0, last = 0.0;
  for (int step = 0; step < 50; ++step) {
    whole_opt.zero_grad(), stage_opt.zero_grad();
    const Tensor want = ce(gpt.forward(x), y);
    want.backward();
    whole_opt.step();
    const double got = pipe.train_step(x, y, ce);
    stage_opt.step();
    worst = std::max(worst, std::abs(got - want.item<double>()) / want.item<double>());
    if (step == 0) first = got;
    last = got;
  }
  std::printf("rank %d: pipelined GPT 50 steps: loss %.4f -> %.4f, worst relative difference %.2e, idle %.2f\n", pg.rank(), first, last,
              worst, pipe.stats().measured_idle_fraction);
  expect(last < 0.5 * first, "the pipelined GPT learns");
  expect(worst < 1e-4, "the pipelined GPT's losses follow the one-rank run within 1e-4");
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const Device dev = Device::parse(argc > 2 && std::string(argv[2]).size() > 0 ? argv[2] : "cpu");
  auto pg = dist::init_process_group("mpi");
  g_rank = pg->rank();
  try {
    if (mode == "collectives") {
      check_collectives(*pg, dev);
    } else if (mode == "ddp") {
      check_ddp(*pg, dev);
    } else if (mode == "zero") {
      check_zero(*pg, dev);
    } else if (mode == "tensor-parallel") {
      check_tensor_parallel(*pg, dev);
    } else if (mode == "pipeline-gpt") {
      check_pipeline_gpt(*pg, dev);
    } else if (mode == "pipeline-tensor-parallel-gpt") {
      check_pipeline_tensor_parallel_gpt(*pg, dev);
    } else if (mode == "tensor-parallel-gpt") {
      check_tensor_parallel_gpt(*pg, dev);
    } else if (mode == "fsdp") {
      check_fsdp(*pg, dev);
    } else if (mode == "pipeline-gpt-part") {
      check_pipeline_gpt_part(*pg, dev);
    } else if (mode == "model-parallel-zero3") {
      check_model_parallel_zero3(*pg, dev);
    } else if (mode == "fsdp-memory") {
      check_fsdp_memory(*pg, dev);
    } else if (mode == "pipeline") {
      check_pipeline(*pg, dev);
    } else if (mode == "pipeline-interleaved") {
      check_pipeline_interleaved(*pg, dev);
    } else if (mode == "pipeline-die") {
      // Stage 1 dies before its first forward: stage 0's wait on the gradient (or the launcher's
      // SIGTERM) names the recv it was waiting in.
      dist::set_collective_timeout(std::chrono::milliseconds(2000));
      if (pg->rank() == 1) std::_Exit(7);
      auto stage = std::make_shared<nn::Linear>(4, 4);
      std::shared_ptr<dist::ProcessGroup> group(pg.get(), [](dist::ProcessGroup*) {});
      nn::Pipeline pipe(stage, group, dev, nn::PipelineSchedule::gpipe, 2);
      (void)pipe.train_step(ones({4, 4}), ones({4, 4}), [](const Tensor& o, const Tensor& t) { return mse_loss(o, t); });
      std::fprintf(stderr, "rank %d: the pipeline step returned without its peer\n", pg->rank());
      return 1;
    } else if (mode == "p2p-unbatched") {
      // Under TESSERA_P2P_STREAM_ORDER=1 (a send completes only once received, each call before
      // the next, as on one NCCL stream): the two ranks' crossed transfers complete as one
      // batch_p2p each; issued one by one, send before receive on both sides, each send waits
      // for a receive its peer never reaches, and the watchdog names the send.
      dist::set_collective_timeout(std::chrono::milliseconds(2000));
      const int peer = 1 - pg->rank();
      Tensor mine = full({2, 4}, pg->rank() + 1.0, DType::f32, dev), theirs = zeros({2, 4}, DType::f32, dev);
      for (auto& w : pg->batch_p2p({{dist::P2POp::Kind::send, mine, peer, 5}, {dist::P2POp::Kind::recv, theirs, peer, 5}})) w->wait();
      expect(max_abs_diff(theirs, full({2, 4}, peer + 1.0, DType::f32, kCPU)) == 0.0, "batched crossed transfers");
      std::fprintf(stderr, "rank %d: batched crossed transfers: %s\n", pg->rank(), g_failures ? "wrong values" : "ok");
      auto sent = pg->send(mine, peer, 5);
      pg->recv(theirs, peer, 5)->wait();
      std::fprintf(stderr, "rank %d: crossed sends completed under TESSERA_P2P_STREAM_ORDER (is it set?)\n", pg->rank());
      return 1;
    } else if (mode == "zero-save" || mode == "zero-load") {
      if (argc < 4) throw Error("dist_test zero-save|zero-load <device> <path>");
      zero_save_or_load(*pg, dev, mode == "zero-save", argv[3]);
    } else if (mode == "hang" || mode == "die") {
      // Rank 1 never joins the all-reduce: it hangs (sleeps past the deadline) or dies.
      dist::set_collective_timeout(std::chrono::milliseconds(2000));
      if (pg->rank() == 1) {
        if (mode == "die") std::_Exit(7);
        std::this_thread::sleep_for(std::chrono::seconds(60));
        return 0;
      }
      Tensor t = ones({4, 4}, DType::f32, dev);
      pg->all_reduce(t)->wait();
      std::fprintf(stderr, "rank %d: the all-reduce returned without its peer\n", pg->rank());
      return 1;
    } else {
      std::fprintf(stderr,
                   "usage: dist_test "
                   "collectives|ddp|zero|tensor-parallel|tensor-parallel-gpt|pipeline-tensor-parallel-gpt|pipeline-gpt-part|"
                   "model-parallel-zero3|fsdp|"
                   "fsdp-memory|pipeline|pipeline-interleaved|"
                   "pipeline-gpt|hang|die|pipeline-die "
                   "[device] | "
                   "zero-save|zero-load "
                   "<device> <path>\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: exception: %s\n", g_rank, e.what());
    return 1;
  }
  if (g_failures == 0) std::printf("rank %d of %d: %s on %s passed\n", pg->rank(), pg->world_size(), mode.c_str(), dev.str().c_str());
  return g_failures == 0 ? 0 : 1;
}
