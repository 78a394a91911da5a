// nn::Pipeline: the two transports of the schedules (pipeline_schedule.cpp): tensor copies
// between this process's devices, send/recv between ranks.
#include "tessera/nn/pipeline.h"

#include "pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "tessera/autocast.h"
#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/profiler.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/shape_ops.h"
#include "tessera/runtime.h"

namespace tessera::nn {

namespace {

using detail::PipelineStep;

std::vector<Tensor> micro_split(const Tensor& x, int64_t m, const char* what) {
  TESSERA_CHECK(x.defined() && x.dim() >= 1, "pipeline", what, " must have a batch axis");
  TESSERA_CHECK(x.size(0) % m == 0, "pipeline", what, " batch ", x.size(0), " does not divide into ", m, " micro-batches");
  return split(x, x.size(0) / m, 0);
}

// A boundary tensor's shape and dtype, sent ahead of it: [rank, dtype, dims...].
Tensor header_of(const Tensor& t) {
  TESSERA_CHECK(t.dim() <= 8, "pipeline", "a stage output of rank ", t.dim(), " (at most 8)");
  std::vector<int64_t> h(10, 0);
  h[0] = t.dim(), h[1] = static_cast<int64_t>(t.dtype());
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  return from_vector<int64_t>(h, {10});
}

// A span on the profile (--profile) per stage action: "pipeline stage 1 F3" is stage 1's forward
// of micro-batch 3, so the trace shows each stage's timeline and its idle gaps, the bubble.
void action_scope(std::optional<profile::Scope>& span, int64_t stage, const PipelineAction& a) {
  if (profile::scopes_active())
    span.emplace(tessera::detail::concat("pipeline stage ", stage, a.forward ? " F" : " B", a.micro), "pipeline");
}

// What travels between ranked stages, by tag.
enum Tag { kHeader = 0, kActivation = 1, kGradient = 2, kTied = 3 };

// An empty tensor for a boundary activation, shaped by its header (rank, dtype, shape).
Tensor shaped_by(const Tensor& header, Device dev) {
  const auto hv = header.to_vector<int64_t>();
  return empty(Shape(hv.begin() + 2, hv.begin() + 2 + hv[0]), static_cast<DType>(hv[1]), dev);
}

// An empty tensor for the next boundary activation from stage `src`, its header received first.
Tensor activation_buffer(dist::ProcessGroup& g, int src, Device dev, const std::function<void(dist::Work&)>& wait) {
  Tensor h = empty({10}, DType::i64);
  wait(*g.recv(h, src, kHeader));
  return shaped_by(h, dev);
}

// A boundary activation to stage `dst`, its header first (for receive_activation); both stay in
// `sent` until their sends in `sends` complete.
void send_activation(dist::ProcessGroup& g, const Tensor& y, int dst, std::vector<Tensor>& sent,
                     std::vector<std::unique_ptr<dist::Work>>& sends) {
  sent.push_back(header_of(y)), sent.push_back(y.contiguous());
  sends.push_back(g.send(sent[sent.size() - 2], dst, kHeader));
  sends.push_back(g.send(sent.back(), dst, kActivation));
}

// A boundary activation from stage `src`: its header, then the tensor.
Tensor receive_activation(dist::ProcessGroup& g, int src, Device dev, const std::function<void(dist::Work&)>& wait) {
  Tensor x = activation_buffer(g, src, dev, wait);
  wait(*g.recv(x, src, kActivation));
  return x;
}

// The last stage's loss of one micro-batch, scaled by 1/M for its backward; its value is added
// to `total`.
Tensor scaled_loss(const PipelineLoss& loss, const Tensor& output, const Tensor& target, int64_t m, double& total) {
  const Tensor l = loss(output, target.to(output.device()));
  total += l.item<double>();
  return mul(l, 1.0 / static_cast<double>(m));
}

// The stages in eval mode for the scope's lifetime, each back in its own mode after (also when
// an exception leaves the scope).
class EvalModeScope {
 public:
  explicit EvalModeScope(const std::vector<ModulePtr>& stages) : stages_(stages) {
    for (const ModulePtr& stage : stages_) was_.push_back(stage->is_training()), stage->eval();
  }
  ~EvalModeScope() {
    for (size_t k = 0; k < stages_.size(); ++k) stages_[k]->train(was_[k]);
  }
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  const std::vector<ModulePtr>& stages_;
  std::vector<bool> was_;
};

}  // namespace

Pipeline::Pipeline(std::vector<ModulePtr> stages, std::vector<Device> devices, PipelineSchedule schedule, int64_t micro_batches,
                   int64_t chunks)
    : stages_(std::move(stages)), devices_(std::move(devices)), schedule_(schedule), micro_batches_(micro_batches), chunks_(chunks) {
  TESSERA_CHECK(!stages_.empty(), "pipeline", "needs at least one stage");
  TESSERA_CHECK(devices_.size() == stages_.size(), "pipeline", stages_.size(), " stages but ", devices_.size(), " devices");
  TESSERA_CHECK(chunks_ >= 1 && static_cast<int64_t>(stages_.size()) % chunks_ == 0, "pipeline", stages_.size(),
                " virtual stages do not make ", chunks_, " chunks per stage");
  check_pipeline_shape(schedule_, static_cast<int64_t>(stages_.size()) / chunks_, micro_batches_, chunks_);
  for (size_t i = 0; i < stages_.size(); ++i) {
    TESSERA_CHECK(stages_[i] != nullptr, "pipeline", "stage ", i, " is null");
    stages_[i]->to(devices_[i]);
  }
}

Pipeline::Pipeline(ModulePtr stage, std::shared_ptr<dist::ProcessGroup> group, Device device, PipelineSchedule schedule,
                   int64_t micro_batches)
    : Pipeline(std::vector<ModulePtr>{std::move(stage)}, std::move(group), device, schedule, micro_batches) {}

Pipeline::Pipeline(std::vector<ModulePtr> chunks, std::shared_ptr<dist::ProcessGroup> group, Device device, PipelineSchedule schedule,
                   int64_t micro_batches)
    : stages_(std::move(chunks)),
      devices_{device},
      group_(std::move(group)),
      schedule_(schedule),
      micro_batches_(micro_batches),
      chunks_(static_cast<int64_t>(stages_.size())) {
  TESSERA_CHECK(group_ != nullptr && !stages_.empty(), "pipeline", "a ranked pipeline needs its stage and a process group");
  check_pipeline_shape(schedule_, group_->world_size(), micro_batches_, chunks_);
  for (const ModulePtr& chunk : stages_) {
    TESSERA_CHECK(chunk != nullptr, "pipeline", "a ranked pipeline needs its stage and a process group");
    chunk->to(device);
  }
}

void Pipeline::tie(int64_t stage_a, const std::string& a, int64_t stage_b, const std::string& b) {
  const int64_t n = group_ ? group_->world_size() * chunks_ : static_cast<int64_t>(stages_.size());
  TESSERA_CHECK(stage_a >= 0 && stage_a < n && stage_b >= 0 && stage_b < n && stage_a != stage_b, "pipeline", "tie: stages ", stage_a,
                " and ", stage_b, " of ", n);
  const auto find = [&](const Module& stage, int64_t index, const std::string& name) {
    for (const auto& [key, t] : stage.named_parameters()) {
      if (key == name) return t;
    }
    throw Error(tessera::detail::concat("pipeline: tie: stage ", index, " has no parameter '", name, "'"));
  };
  if (group_) {  // this rank holds one side (or neither); its peer holds the other
    const int64_t me = group_->rank(), w = group_->world_size();
    TESSERA_CHECK(stage_a % w != stage_b % w, "pipeline", "tie: virtual stages ", stage_a, " and ", stage_b, " are both on rank ",
                  stage_a % w);
    if (me == stage_a % w) tied_ranked_.push_back({find(*stages_[stage_a / w], stage_a, a), static_cast<int>(stage_b % w)});
    if (me == stage_b % w) tied_ranked_.push_back({find(*stages_[stage_b / w], stage_b, b), static_cast<int>(stage_a % w)});
    return;
  }
  const Tensor ta = find(*stages_[stage_a], stage_a, a), tb = find(*stages_[stage_b], stage_b, b);
  TESSERA_CHECK(ta.shape() == tb.shape() && ta.dtype() == tb.dtype(), "pipeline", "tie: ", a, " ", shape_str(ta.shape()), " ", ta.dtype(),
                " and ", b, " ", shape_str(tb.shape()), " ", tb.dtype(), " differ");
  tied_.emplace_back(ta, tb);
}

void Pipeline::redirect_tied(const std::function<Tensor(const Tensor&)>& holder) {
  for (auto& tied : tied_ranked_) tied.local = holder(tied.local);
}

std::vector<Tensor> Pipeline::parameters() const {
  std::vector<Tensor> p;
  for (const ModulePtr& s : stages_) {
    for (const Tensor& t : s->parameters()) p.push_back(t);
  }
  return p;
}

double Pipeline::train_step(const Tensor& input, const Tensor& target, const PipelineLoss& loss) {
  TESSERA_CHECK(static_cast<bool>(loss), "pipeline", "train_step needs a loss function");
  const std::vector<Tensor> inputs = micro_split(input, micro_batches_, "input");
  const std::vector<Tensor> targets = micro_split(target, micro_batches_, "target");
  return group_ ? run_ranked(inputs, targets, loss) : run_local(inputs, targets, loss);
}

double Pipeline::run_local(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, const PipelineLoss& loss) {
  const auto stages = static_cast<int64_t>(stages_.size());  // virtual stages
  const int64_t m = micro_batches_, workers = stages / chunks_;
  const detail::PipelineSimulation sim = detail::simulate_pipeline(schedule_, workers, m, chunks_);
  stats_ = {workers, m, chunks_, sim.bubble, sim.peak_in_flight, {}, 0.0};
  std::vector<int64_t> before;
  for (const Device& d : devices_) {
    reset_peak_memory(d);
    before.push_back(memory_stats(d).in_use_bytes);
  }
  // in: the stage's input (a leaf needing grad past stage 0); out: its output, or the scaled
  // loss at the last stage; arrived: the activation or gradient the neighbour handed over.
  struct Slot {
    Tensor in, out, arrived_input, arrived_grad;
  };
  std::vector<std::vector<Slot>> slots(stages, std::vector<Slot>(m));
  double total = 0.0;
  for (const PipelineStep& step : sim.order) {
    const int64_t s = step.action.chunk * workers + step.worker, i = step.action.micro;
    Slot& slot = slots[s][i];
    const Device dev = devices_[s];
    std::optional<profile::Scope> span;
    action_scope(span, s, step.action);
    if (step.action.forward) {
      slot.in = s == 0 ? inputs[i].to(dev) : slot.arrived_input;
      slot.arrived_input = Tensor();
      const Tensor y = stages_[s]->forward(slot.in);
      if (s == stages - 1) {
        slot.out = scaled_loss(loss, y, targets[i], m, total);
      } else {
        slot.out = y;
        Tensor next = y.detach().to(devices_[s + 1]);
        next.set_requires_grad();
        slots[s + 1][i].arrived_input = next;
      }
    } else {
      if (s == stages - 1) slot.out.backward();
      else slot.out.backward(slot.arrived_grad);
      if (s > 0) slots[s - 1][i].arrived_grad = slot.in.grad().to(devices_[s - 1]);
      slot = Slot();  // this micro-batch's activations at this stage are freed here
    }
  }
  if (tie_in_step_) sync_tied_gradients();
  for (size_t k = 0; k < devices_.size(); ++k) stats_.peak_step_bytes.push_back(memory_stats(devices_[k]).peak_in_use_bytes - before[k]);
  return total / static_cast<double>(m);
}

void Pipeline::learn_boundary_shapes(const Tensor& micro_input) {
  const AutocastState& autocast = autocast_state();
  const std::string key = tessera::detail::concat(shape_str(micro_input.shape()), " ", micro_input.dtype(), " autocast ", autocast.enabled,
                                                  " ", autocast.dtype);
  if (key == boundary_key_) return;
  // Every rank sees the same micro-batch input, so every rank decides alike to learn again.
  dist::ProcessGroup& g = *group_;
  const int64_t s = g.rank(), stages = g.world_size(), last = stages * chunks_ - 1;
  const int prev = static_cast<int>((s + stages - 1) % stages), next = static_cast<int>((s + 1) % stages);
  const NoGradGuard no_grad;
  const EvalModeScope eval_mode(stages_);  // no dropout draws
  chunk_in_.assign(stages_.size(), Boundary{}), chunk_out_ = chunk_in_;
  std::vector<std::unique_ptr<dist::Work>> sends;
  std::vector<Tensor> sent;  // alive until their sends complete
  for (int64_t c = 0; c < chunks_; ++c) {
    const int64_t vs = c * stages + s;
    const Tensor x = vs == 0 ? micro_input.to(devices_[0]) : receive_activation(g, prev, devices_[0], [](dist::Work& w) { w.wait(); });
    const Tensor y = stages_[c]->forward(x);
    chunk_in_[c] = {x.shape(), x.dtype()}, chunk_out_[c] = {y.shape(), y.dtype()};
    if (vs == last) continue;
    send_activation(g, y, next, sent, sends);
  }
  for (auto& w : sends) w->wait();
  boundary_key_ = key;
}

double Pipeline::run_ranked(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, const PipelineLoss& loss) {
  dist::ProcessGroup& g = *group_;
  const int64_t s = g.rank(), stages = g.world_size(), m = micro_batches_, chunks = chunks_, last = stages * chunks - 1;
  // Virtual stage c x S + s (chunk c of this rank) takes its input from the rank before, in a
  // ring when interleaved (rank 0's chunk c + 1 from rank S - 1's chunk c).
  const int prev = static_cast<int>((s + stages - 1) % stages), next = static_cast<int>((s + 1) % stages);
  const Device dev = devices_[0];
  learn_boundary_shapes(inputs[0]);
  const detail::PipelineSimulation sim = detail::simulate_pipeline(schedule_, stages, m, chunks);
  stats_ = {stages, m, chunks, sim.bubble, sim.peak_in_flight, {}, 0.0};
  std::vector<std::unique_ptr<dist::Work>> sends;  // waited at the end: their buffers stay alive
  std::vector<std::vector<Tensor>> in(chunks, std::vector<Tensor>(m)), out = in;
  double total = 0.0, waited_s = 0.0;
  const auto start = std::chrono::steady_clock::now();
  const auto timed_wait = [&](dist::Work& w) {
    std::optional<profile::Scope> span;
    if (profile::scopes_active()) span.emplace("pipeline wait", "pipeline");
    const auto t0 = std::chrono::steady_clock::now();
    w.wait();
    waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Megatron-LM's transfers: after each iteration (an action; interleaved, a steady-state forward
  // with its backward) one batch_p2p carries the iteration's sends and the next iteration's
  // receives. On NCCL and RCCL a send holds the stream until its peer receives and a group
  // completes as a whole; batched so, no stage waits with a send its peer needs unissued, in the
  // interleaved ring too (pipeline_iterations). Activations travel without headers: their
  // shapes were learned before the step (learn_boundary_shapes).
  const auto its = pipeline_iterations(schedule_, s, stages, m, chunks);
  struct Incoming {
    Tensor buffer;
    std::unique_ptr<dist::Work> work;
  };
  std::vector<Incoming> activation_in(static_cast<size_t>(chunks * m)), gradient_in(static_cast<size_t>(chunks * m));  // [c * m + i]
  std::vector<dist::P2POp> outgoing;
  const auto post = [&](size_t it) {  // `outgoing` and the receives of iteration `it`
    std::vector<dist::P2POp> ops = std::move(outgoing);
    outgoing.clear();
    std::vector<Incoming*> receiving;
    for (const PipelineAction& a : it < its.size() ? its[it] : std::vector<PipelineAction>{}) {
      const int64_t vs = a.chunk * stages + s;
      if (a.forward ? vs == 0 : vs == last) continue;
      const Boundary& b = a.forward ? chunk_in_[a.chunk] : chunk_out_[a.chunk];
      Incoming& slot = (a.forward ? activation_in : gradient_in)[static_cast<size_t>(a.chunk * m + a.micro)];
      slot.buffer = empty(b.shape, b.dtype, dev);
      ops.push_back({dist::P2POp::Kind::recv, slot.buffer, a.forward ? prev : next, a.forward ? kActivation : kGradient});
      receiving.push_back(&slot);
    }
    if (ops.empty()) return;
    auto works = g.batch_p2p(ops);
    for (size_t k = 0; k < receiving.size(); ++k) receiving[k]->work = std::move(works[works.size() - receiving.size() + k]);
    works.resize(works.size() - receiving.size());
    for (auto& w : works) sends.push_back(std::move(w));
  };
  const auto take = [&](Incoming& slot) {
    timed_wait(*slot.work);
    slot.work.reset();
    return std::move(slot.buffer);
  };
  post(0);
  for (size_t it = 0; it < its.size(); ++it) {
    for (const PipelineAction& a : its[it]) {
      const int64_t i = a.micro, c = a.chunk, vs = c * stages + s;
      Tensor &x = in[c][i], &y = out[c][i];
      std::optional<profile::Scope> span;
      action_scope(span, vs, a);
      // MPI moves a large message (its rendezvous) only while the sender is inside MPI: polling the
      // sends in flight between actions keeps them moving while this stage computes (GPipe's
      // forwards issue every send before the first wait).
      for (auto& w : sends) (void)w->test();
      if (a.forward) {
        x = vs == 0 ? inputs[i].to(dev) : take(activation_in[static_cast<size_t>(c * m + i)]);
        if (vs > 0) x.set_requires_grad();
        const Tensor result = stages_[c]->forward(x);
        if (vs == last) {
          y = scaled_loss(loss, result, targets[i], m, total);
        } else {
          // The receiver sized its buffer by the learned shape: a stage whose output changes with
          // the micro-batch is refused here, before a wrong-sized transfer.
          TESSERA_CHECK(result.shape() == chunk_out_[c].shape && result.dtype() == chunk_out_[c].dtype, "pipeline", "stage ", vs,
                        " output ", shape_str(result.shape()), " ", result.dtype(), " for micro-batch ", i, ", but ",
                        shape_str(chunk_out_[c].shape), " ", chunk_out_[c].dtype,
                        " for the first: every micro-batch must give its stages' outputs one shape and dtype");
          y = result;
          outgoing.push_back({dist::P2POp::Kind::send, result.detach().contiguous(), next, kActivation});
        }
      } else {
        if (vs == last) y.backward();
        else y.backward(take(gradient_in[static_cast<size_t>(c * m + i)]));
        if (vs > 0) outgoing.push_back({dist::P2POp::Kind::send, x.grad().contiguous(), prev, kGradient});
        x = y = Tensor();
      }
    }
    post(it + 1);
  }
  for (auto& w : sends) timed_wait(*w);
  if (tie_in_step_) sync_tied_gradients();
  Tensor mean_loss = from_vector<double>({total / static_cast<double>(m)}, {1});
  g.broadcast(mean_loss, static_cast<int>(stages - 1))->wait();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.measured_idle_fraction = wall > 0.0 ? waited_s / wall : 0.0;
  return mean_loss.item<double>();
}

void Pipeline::sync_tied_gradients() {
  const NoGradGuard no_grad;
  for (auto& [a, b] : tied_) {
    if (!a.grad().defined() || !b.grad().defined()) continue;
    const Tensor both = add(a.grad(), b.grad().to(a.device()));
    a.set_grad(both);
    b.set_grad(both.to(b.device()).clone());
  }
  // Ranked: exchange the gradients with the peer stage and keep their sum on both sides.
  for (auto& [t, peer] : tied_ranked_) {
    const Tensor mine = t.grad().defined() ? t.grad().contiguous() : zeros(t.shape(), t.dtype(), t.device());
    Tensor theirs = empty(t.shape(), t.dtype(), t.device());
    // One batch: each side sends before it receives (NCCL would hold both sends unbatched).
    for (auto& w : group_->batch_p2p({{dist::P2POp::Kind::send, mine, peer, kTied}, {dist::P2POp::Kind::recv, theirs, peer, kTied}}))
      w->wait();
    t.set_grad(add(mine, theirs));
  }
}

double Pipeline::evaluate(const Tensor& input, const Tensor& target, const PipelineLoss& loss) {
  TESSERA_CHECK(static_cast<bool>(loss), "pipeline", "evaluate needs a loss function");
  const std::vector<Tensor> inputs = micro_split(input, micro_batches_, "input");
  const std::vector<Tensor> targets = micro_split(target, micro_batches_, "target");
  const NoGradGuard no_grad;
  const EvalModeScope eval_mode(stages_);
  const auto m = static_cast<int64_t>(inputs.size());
  double total = 0.0;
  if (!group_) {
    for (int64_t i = 0; i < m; ++i) {
      Tensor x = inputs[i];
      for (size_t k = 0; k < stages_.size(); ++k) x = stages_[k]->forward(x.to(devices_[k]));
      total += loss(x, targets[i].to(x.device())).item<double>();
    }
    return total / static_cast<double>(m);
  }
  // Ranked: every micro-batch forward through the (virtual) stages in order, the loss on the last one.
  dist::ProcessGroup& g = *group_;
  const int64_t s = g.rank(), stages = g.world_size(), last = stages * chunks_ - 1;
  const int prev = static_cast<int>((s + stages - 1) % stages), next = static_cast<int>((s + 1) % stages);
  const Device dev = devices_[0];
  std::vector<std::unique_ptr<dist::Work>> sends;
  std::vector<Tensor> sent;  // alive until their sends complete
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < chunks_; ++c) {
      const int64_t vs = c * stages + s;
      const Tensor x = vs == 0 ? inputs[i].to(dev) : receive_activation(g, prev, dev, [](dist::Work& w) { w.wait(); });
      const Tensor y = stages_[c]->forward(x);
      if (vs == last) {
        total += loss(y, targets[i].to(dev)).item<double>();
      } else {
        send_activation(g, y, next, sent, sends);
      }
    }
  }
  for (auto& w : sends) w->wait();
  Tensor mean_loss = from_vector<double>({total / static_cast<double>(m)}, {1});
  g.broadcast(mean_loss, static_cast<int>(stages - 1))->wait();
  return mean_loss.item<double>();
}

}  // namespace tessera::nn
