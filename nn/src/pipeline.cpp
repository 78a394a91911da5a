// nn::Pipeline: the schedules as per-stage action lists, a unit-time simulation of them (the
// order in-process stages run in, the bubble, each stage's activations in flight), and the two
// transports: tensor copies between this process's devices, send/recv between ranks.
#include "tessera/nn/pipeline.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "tessera/autograd.h"
#include "tessera/error.h"
#include "tessera/profiler.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/shape_ops.h"
#include "tessera/runtime.h"

namespace tessera::nn {

PipelineSchedule parse_pipeline_schedule(std::string_view name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  throw Error(detail::concat("pipeline: schedule '", name, "' is not one of gpipe, 1f1b"));
}

const char* pipeline_schedule_name(PipelineSchedule s) { return s == PipelineSchedule::gpipe ? "gpipe" : "1f1b"; }

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches) {
  std::vector<PipelineAction> a;
  const int64_t m = micro_batches;
  if (schedule == PipelineSchedule::gpipe) {
    for (int64_t i = 0; i < m; ++i) a.push_back({true, i});
    for (int64_t i = 0; i < m; ++i) a.push_back({false, i});
    return a;
  }
  const int64_t warmup = std::min(stages - stage - 1, m);
  for (int64_t i = 0; i < warmup; ++i) a.push_back({true, i});
  for (int64_t i = 0; i + warmup < m; ++i) {
    a.push_back({true, warmup + i});
    a.push_back({false, i});
  }
  for (int64_t i = m - warmup; i < m; ++i) a.push_back({false, i});
  return a;
}

namespace {

struct Step {
  int64_t stage;
  PipelineAction action;
};

// Every stage takes its next action at each tick whose inputs an earlier tick produced (the
// previous stage's forward of that micro-batch; the next stage's backward of it).
struct Simulation {
  std::vector<Step> order;  // the actions in tick order
  double bubble = 0.0;
  std::vector<int64_t> peak_in_flight;
};

Simulation simulate(PipelineSchedule schedule, int64_t stages, int64_t m) {
  Simulation sim;
  std::vector<std::vector<PipelineAction>> acts;
  for (int64_t s = 0; s < stages; ++s) acts.push_back(pipeline_actions(schedule, s, stages, m));
  std::vector<size_t> pos(stages, 0);
  std::vector<std::vector<int64_t>> fwd(stages, std::vector<int64_t>(m, -1)), bwd = fwd;
  std::vector<int64_t> live(stages, 0);
  sim.peak_in_flight.assign(stages, 0);
  int64_t tick = 0, busy = 0, remaining = 2 * stages * m;
  while (remaining > 0) {
    TESSERA_CHECK(tick <= 4 * (m + stages) + 4, "pipeline", "the ", pipeline_schedule_name(schedule), " schedule stalls (a bug)");
    for (int64_t s = 0; s < stages; ++s) {
      if (pos[s] == acts[s].size()) continue;
      const PipelineAction a = acts[s][pos[s]];
      const auto done_before = [&](int64_t t) { return t >= 0 && t < tick; };
      const bool ready = a.forward ? (s == 0 || done_before(fwd[s - 1][a.micro])) : (s == stages - 1 || done_before(bwd[s + 1][a.micro]));
      if (!ready) continue;
      (a.forward ? fwd : bwd)[s][a.micro] = tick;
      live[s] += a.forward ? 1 : -1;
      sim.peak_in_flight[s] = std::max(sim.peak_in_flight[s], live[s]);
      sim.order.push_back({s, a});
      ++pos[s], ++busy, --remaining;
    }
    ++tick;
  }
  sim.bubble = 1.0 - static_cast<double>(busy) / static_cast<double>(tick * stages);
  return sim;
}

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
  if (profile::scopes_active()) span.emplace(detail::concat("pipeline stage ", stage, a.forward ? " F" : " B", a.micro), "pipeline");
}

// What travels between ranked stages, by tag.
enum Tag { kHeader = 0, kActivation = 1, kGradient = 2, kTied = 3 };

// An empty tensor for the next boundary activation from stage `src`, shaped by its header
// (rank, dtype, shape).
Tensor activation_buffer(dist::ProcessGroup& g, int src, Device dev, const std::function<void(dist::Work&)>& wait) {
  Tensor h = empty({10}, DType::i64);
  wait(*g.recv(h, src, kHeader));
  const auto hv = h.to_vector<int64_t>();
  return empty(Shape(hv.begin() + 2, hv.begin() + 2 + hv[0]), static_cast<DType>(hv[1]), dev);
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

}  // namespace

Pipeline::Pipeline(std::vector<ModulePtr> stages, std::vector<Device> devices, PipelineSchedule schedule, int64_t micro_batches)
    : stages_(std::move(stages)), devices_(std::move(devices)), schedule_(schedule), micro_batches_(micro_batches) {
  TESSERA_CHECK(!stages_.empty(), "pipeline", "needs at least one stage");
  TESSERA_CHECK(devices_.size() == stages_.size(), "pipeline", stages_.size(), " stages but ", devices_.size(), " devices");
  TESSERA_CHECK(micro_batches_ >= 1, "pipeline", "micro-batches must be at least 1, got ", micro_batches_);
  for (size_t i = 0; i < stages_.size(); ++i) {
    TESSERA_CHECK(stages_[i] != nullptr, "pipeline", "stage ", i, " is null");
    stages_[i]->to(devices_[i]);
  }
}

Pipeline::Pipeline(ModulePtr stage, std::shared_ptr<dist::ProcessGroup> group, Device device, PipelineSchedule schedule,
                   int64_t micro_batches)
    : stages_{std::move(stage)}, devices_{device}, group_(std::move(group)), schedule_(schedule), micro_batches_(micro_batches) {
  TESSERA_CHECK(stages_[0] != nullptr && group_ != nullptr, "pipeline", "a ranked pipeline needs its stage and a process group");
  TESSERA_CHECK(micro_batches_ >= 1, "pipeline", "micro-batches must be at least 1, got ", micro_batches_);
  stages_[0]->to(device);
}

void Pipeline::tie(int64_t stage_a, const std::string& a, int64_t stage_b, const std::string& b) {
  const int64_t n = group_ ? group_->world_size() : static_cast<int64_t>(stages_.size());
  TESSERA_CHECK(stage_a >= 0 && stage_a < n && stage_b >= 0 && stage_b < n && stage_a != stage_b, "pipeline", "tie: stages ", stage_a,
                " and ", stage_b, " of ", n);
  const auto find = [&](const Module& stage, int64_t index, const std::string& name) {
    for (const auto& [key, t] : stage.named_parameters()) {
      if (key == name) return t;
    }
    throw Error(detail::concat("pipeline: tie: stage ", index, " has no parameter '", name, "'"));
  };
  if (group_) {  // this rank holds one side (or neither); its peer holds the other
    const int64_t me = group_->rank();
    if (me == stage_a) tied_ranked_.push_back({find(*stages_[0], me, a), static_cast<int>(stage_b)});
    if (me == stage_b) tied_ranked_.push_back({find(*stages_[0], me, b), static_cast<int>(stage_a)});
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
  const auto stages = static_cast<int64_t>(stages_.size());
  const int64_t m = micro_batches_;
  const Simulation sim = simulate(schedule_, stages, m);
  stats_ = {stages, m, sim.bubble, sim.peak_in_flight, {}, 0.0};
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
  for (const Step& step : sim.order) {
    const int64_t s = step.stage, i = step.action.micro;
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

double Pipeline::run_ranked(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, const PipelineLoss& loss) {
  dist::ProcessGroup& g = *group_;
  const int64_t s = g.rank(), stages = g.world_size(), m = micro_batches_;
  const Device dev = devices_[0];
  const Simulation sim = simulate(schedule_, stages, m);
  stats_ = {stages, m, sim.bubble, sim.peak_in_flight, {}, 0.0};
  std::vector<std::unique_ptr<dist::Work>> sends;  // waited at the end: their buffers stay alive
  std::vector<Tensor> in(m), out(m);
  double total = 0.0, waited_s = 0.0;
  const auto start = std::chrono::steady_clock::now();
  const auto timed_wait = [&](dist::Work& w) {
    std::optional<profile::Scope> span;
    if (profile::scopes_active()) span.emplace("pipeline wait", "pipeline");
    const auto t0 = std::chrono::steady_clock::now();
    w.wait();
    waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // An action's sends go out together with the next action's receive, in one batch_p2p (as
  // PyTorch's 1F1B batches them): on NCCL and RCCL a send issued alone holds the stream until its
  // peer receives, and in the steady state stage s sends an activation forward while stage s + 1
  // sends a gradient back; unbatched, each would wait for the other for ever.
  std::vector<dist::P2POp> outgoing;
  const auto exchange = [&](const Tensor& into, int peer, int tag) {
    std::vector<dist::P2POp> ops = std::move(outgoing);
    outgoing.clear();
    if (into.defined()) ops.push_back({dist::P2POp::Kind::recv, into, peer, tag});
    if (ops.empty()) return;
    auto works = g.batch_p2p(ops);
    if (into.defined()) {
      timed_wait(*works.back());
      works.pop_back();
    }
    for (auto& w : works) sends.push_back(std::move(w));
  };
  for (const PipelineAction& a : pipeline_actions(schedule_, s, stages, m)) {
    const int64_t i = a.micro;
    std::optional<profile::Scope> span;
    action_scope(span, s, a);
    // MPI moves a large message (its rendezvous) only while the sender is inside MPI: polling the
    // sends in flight between actions keeps them moving while this stage computes (GPipe's
    // forwards issue every send before the first wait).
    for (auto& w : sends) (void)w->test();
    if (a.forward) {
      if (s == 0) {
        exchange(Tensor(), 0, 0);
        in[i] = inputs[i].to(dev);
      } else {
        in[i] = activation_buffer(g, static_cast<int>(s - 1), dev, timed_wait);
        exchange(in[i], static_cast<int>(s - 1), kActivation);
        in[i].set_requires_grad();
      }
      const Tensor y = stages_[0]->forward(in[i]);
      if (s == stages - 1) {
        out[i] = scaled_loss(loss, y, targets[i], m, total);
      } else {
        out[i] = y;
        outgoing.push_back({dist::P2POp::Kind::send, header_of(y), static_cast<int>(s + 1), kHeader});
        outgoing.push_back({dist::P2POp::Kind::send, y.detach().contiguous(), static_cast<int>(s + 1), kActivation});
      }
    } else {
      if (s == stages - 1) {
        exchange(Tensor(), 0, 0);
        out[i].backward();
      } else {
        Tensor grad = empty(out[i].shape(), out[i].dtype(), dev);
        exchange(grad, static_cast<int>(s + 1), kGradient);
        out[i].backward(grad);
      }
      if (s > 0) outgoing.push_back({dist::P2POp::Kind::send, in[i].grad().contiguous(), static_cast<int>(s - 1), kGradient});
      in[i] = out[i] = Tensor();
    }
  }
  exchange(Tensor(), 0, 0);
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
  std::vector<bool> training;
  for (const ModulePtr& stage : stages_) training.push_back(stage->is_training()), stage->eval();
  struct Restore {
    const std::vector<ModulePtr>& stages;
    const std::vector<bool>& was;
    ~Restore() {
      for (size_t k = 0; k < stages.size(); ++k) stages[k]->train(was[k]);
    }
  } const restore{stages_, training};
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
  // Ranked: every micro-batch forward through the stages in order, the loss on the last one.
  dist::ProcessGroup& g = *group_;
  const int64_t s = g.rank(), stages = g.world_size();
  const Device dev = devices_[0];
  std::vector<std::unique_ptr<dist::Work>> sends;
  std::vector<Tensor> sent;  // alive until their sends complete
  for (int64_t i = 0; i < m; ++i) {
    const Tensor x = s == 0 ? inputs[i].to(dev) : receive_activation(g, static_cast<int>(s - 1), dev, [](dist::Work& w) { w.wait(); });
    const Tensor y = stages_[0]->forward(x);
    if (s == stages - 1) {
      total += loss(y, targets[i].to(dev)).item<double>();
    } else {
      sent.push_back(header_of(y)), sent.push_back(y.contiguous());
      sends.push_back(g.send(sent[sent.size() - 2], static_cast<int>(s + 1), kHeader));
      sends.push_back(g.send(sent.back(), static_cast<int>(s + 1), kActivation));
    }
  }
  for (auto& w : sends) w->wait();
  Tensor mean_loss = from_vector<double>({total / static_cast<double>(m)}, {1});
  g.broadcast(mean_loss, static_cast<int>(stages - 1))->wait();
  return mean_loss.item<double>();
}

}  // namespace tessera::nn
