// nn::Pipeline in one process: each schedule's gradients and loss equal the unsplit model's on
// the whole batch, the schedules' shapes (bubble, activations in flight), 1F1B's memory, the interleaved
// schedule, and a model of NCCL's group semantics run over the ranked transport's batches.
// Stages run on emulated:0 and emulated:1 when the test device is emulated (two devices, copies
// between them), else both on the test device. The ranked transport: tests/dist (mpirun).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "support/checks.h"
#include "tessera/nn/language_model.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/optim.h"
#include "tessera/nn/pipeline.h"
#include "tessera/profiler.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {

std::vector<Device> stage_devices() {
  const Device d = device();
  if (d.type == DeviceType::emulated && backend_for(d.type).device_count() >= 2) return {Device(d.type, 0), Device(d.type, 1)};
  return {d, d};
}

// Widths: in -> hidden -> hidden -> out, split after the first Tanh.
struct Split {
  ModulePtr whole, first, second;
};
Split make_split(int64_t in, int64_t hidden, int64_t out) {
  manual_seed(11);
  auto l1 = std::make_shared<Linear>(in, hidden), l2 = std::make_shared<Linear>(hidden, hidden), l3 = std::make_shared<Linear>(hidden, out);
  Split s;
  s.whole = std::make_shared<Sequential>(std::vector<ModulePtr>{l1, std::make_shared<Tanh>(), l2, std::make_shared<Tanh>(), l3});
  // The stages hold copies of the same weights.
  auto c1 = std::make_shared<Linear>(in, hidden), c2 = std::make_shared<Linear>(hidden, hidden), c3 = std::make_shared<Linear>(hidden, out);
  c1->load_state_dict(l1->state_dict());
  c2->load_state_dict(l2->state_dict());
  c3->load_state_dict(l3->state_dict());
  s.first = std::make_shared<Sequential>(std::vector<ModulePtr>{c1, std::make_shared<Tanh>()});
  s.second = std::make_shared<Sequential>(std::vector<ModulePtr>{c2, std::make_shared<Tanh>(), c3});
  s.whole->to(device());
  return s;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(kCPU, DType::f64), y = b.to(kCPU, DType::f64);
  return amax(abs(sub(x, y))).item<double>() / std::max(amax(abs(y)).item<double>(), 1e-30);
}

}  // namespace

TEST_CASE("pipeline schedules: GPipe and 1F1B action orders") {
  auto str = [](const std::vector<PipelineAction>& a) {
    std::string s;
    for (const auto& x : a) s += (x.forward ? "F" : "B") + std::to_string(x.micro) + " ";
    return s;
  };
  CHECK(str(pipeline_actions(PipelineSchedule::gpipe, 0, 2, 3)) == "F0 F1 F2 B0 B1 B2 ");
  CHECK(str(pipeline_actions(PipelineSchedule::one_f_one_b, 0, 2, 4)) == "F0 F1 B0 F2 B1 F3 B2 B3 ");
  CHECK(str(pipeline_actions(PipelineSchedule::one_f_one_b, 1, 2, 4)) == "F0 B0 F1 B1 F2 B2 F3 B3 ");
  CHECK(str(pipeline_actions(PipelineSchedule::one_f_one_b, 0, 4, 2)) == "F0 F1 B0 B1 ");  // fewer micro-batches than stages
  CHECK(parse_pipeline_schedule("1f1b") == PipelineSchedule::one_f_one_b);
  TESSERA_CHECK_THROWS_WITH(parse_pipeline_schedule("zb"), "pipeline: schedule 'zb' is not one of gpipe, 1f1b, interleaved");
}

TEST_CASE("interleaved 1F1B: Megatron's order of each stage's model chunks, and the shapes it refuses") {
  auto str = [](const std::vector<PipelineAction>& a) {
    std::string s;
    for (const auto& x : a) s += (x.forward ? "F" : "B") + std::to_string(x.chunk) + "." + std::to_string(x.micro) + " ";
    return s;
  };
  const auto interleaved = PipelineSchedule::interleaved_1f1b;
  CHECK(parse_pipeline_schedule("interleaved") == interleaved);
  // 2 stages x 2 chunks (virtual stages 0, 2 on stage 0; 1, 3 on stage 1), 4 micro-batches in groups of 2.
  CHECK(str(pipeline_actions(interleaved, 0, 2, 4, 2)) ==
        "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ");
  CHECK(str(pipeline_actions(interleaved, 1, 2, 4, 2)) ==
        "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 ");
  // As many micro-batches as stages: every forward first.
  CHECK(str(pipeline_actions(interleaved, 1, 2, 2, 2)) == "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1 ");
  TESSERA_CHECK_THROWS_WITH(pipeline_actions(interleaved, 0, 2, 3, 2), "3 micro-batches do not divide by it");
  TESSERA_CHECK_THROWS_WITH(pipeline_actions(interleaved, 0, 2, 4, 1), "at least 2 model chunks");
  TESSERA_CHECK_THROWS_WITH(pipeline_actions(PipelineSchedule::one_f_one_b, 0, 2, 4, 2), "use the interleaved schedule");
}

namespace {
// The ranked transport's batches for every stage (pipeline_iterations: after each iteration its
// sends and the next iteration's receives), run under NCCL's group semantics: a batch completes
// only once every op in it meets its peer's op (the k-th send from a to b with a tag meets the
// k-th such receive at b) posted in the peer's current or an earlier batch. True when every stage
// gets through all its batches; `group` false batches one action at a time instead.
bool transfers_complete(PipelineSchedule schedule, int64_t stages, int64_t m, int64_t chunks, bool group) {
  struct Op {
    bool send;
    int64_t src, dst, tag, nth;  // tag 0: activation, 1: gradient; nth within (kind, src, dst, tag)
  };
  const int64_t last = stages * chunks - 1;
  std::vector<std::vector<std::vector<Op>>> batches(stages);
  for (int64_t r = 0; r < stages; ++r) {
    const int64_t prev = (r + stages - 1) % stages, next = (r + 1) % stages;
    std::map<std::tuple<bool, int64_t, int64_t, int64_t>, int64_t> count;
    const auto op = [&](bool send, int64_t src, int64_t dst, int64_t tag) {
      return Op{send, src, dst, tag, count[{send, src, dst, tag}]++};
    };
    auto its = pipeline_iterations(schedule, r, stages, m, chunks);
    if (!group) {
      std::vector<std::vector<PipelineAction>> singles;
      for (const auto& it : its)
        for (const auto& a : it) singles.push_back({a});
      its = singles;
    }
    const auto recvs = [&](const std::vector<PipelineAction>& it, std::vector<Op>& b) {
      for (const auto& a : it) {
        const int64_t vs = a.chunk * stages + r;
        if (a.forward && vs > 0) b.push_back(op(false, prev, r, 0));
        if (!a.forward && vs < last) b.push_back(op(false, next, r, 1));
      }
    };
    std::vector<Op> first;
    recvs(its[0], first);
    batches[r].push_back(first);
    for (size_t j = 0; j < its.size(); ++j) {
      std::vector<Op> b;
      for (const auto& a : its[j]) {
        const int64_t vs = a.chunk * stages + r;
        if (a.forward && vs < last) b.push_back(op(true, r, next, 0));
        if (!a.forward && vs > 0) b.push_back(op(true, r, prev, 1));
      }
      if (j + 1 < its.size()) recvs(its[j + 1], b);
      batches[r].push_back(b);
    }
  }
  std::set<std::tuple<bool, int64_t, int64_t, int64_t, int64_t>> posted;
  std::vector<size_t> at(stages, 0);
  const auto post = [&](int64_t r) {
    if (at[r] < batches[r].size())
      for (const Op& o : batches[r][at[r]]) posted.insert({o.send, o.src, o.dst, o.tag, o.nth});
  };
  for (int64_t r = 0; r < stages; ++r) post(r);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < stages; ++r) {
      if (at[r] == batches[r].size()) continue;
      const auto& b = batches[r][at[r]];
      if (std::all_of(b.begin(), b.end(), [&](const Op& o) { return posted.count({!o.send, o.src, o.dst, o.tag, o.nth}) > 0; })) {
        ++at[r], progress = true;
        post(r);
      }
    }
  }
  for (int64_t r = 0; r < stages; ++r)
    if (at[r] != batches[r].size()) return false;
  return true;
}
}  // namespace

TEST_CASE("the ranked pipeline's batched transfers never deadlock under NCCL's group semantics") {
  int64_t checked = 0;
  for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved_1f1b}) {
    for (int64_t stages = 2; stages <= 5; ++stages) {
      for (int64_t chunks : sched == PipelineSchedule::interleaved_1f1b ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{1}) {
        for (int64_t m = 1; m <= 12; ++m) {
          if (sched == PipelineSchedule::interleaved_1f1b && m % stages != 0) continue;
          CAPTURE(pipeline_schedule_name(sched));
          CAPTURE(stages);
          CAPTURE(chunks);
          CAPTURE(m);
          CHECK(transfers_complete(sched, stages, m, chunks, true));
          ++checked;
        }
      }
    }
  }
  CHECK(checked == 48 + 48 + 30);  // GPipe and 1F1B: 4 x 12; interleaved: (6 + 4 + 3 + 2) x 2
  // The model finds the deadlock it guards against: the interleaved ring batched one action at a time.
  CHECK_FALSE(transfers_complete(PipelineSchedule::interleaved_1f1b, 2, 4, 2, false));
}

TEST_CASE("an interleaved pipeline (2 stages x 2 chunks) equals the whole model, with a smaller bubble than 1F1B") {
  const std::vector<Device> devs = stage_devices();
  const Tensor x = make_input({16, 8}, DType::f32, 3), y = make_input({16, 4}, DType::f32, 4);
  const auto mse = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  manual_seed(13);
  const std::vector<int64_t> widths{8, 16, 16, 16, 4};
  std::vector<ModulePtr> layers, chunks;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    auto lin = std::make_shared<Linear>(widths[l], widths[l + 1]), copy = std::make_shared<Linear>(widths[l], widths[l + 1]);
    copy->load_state_dict(lin->state_dict());
    layers.push_back(lin), layers.push_back(std::make_shared<Tanh>());
    chunks.push_back(std::make_shared<Sequential>(std::vector<ModulePtr>{copy, std::make_shared<Tanh>()}));
  }
  const auto whole = std::make_shared<Sequential>(layers);
  whole->to(device());
  const Tensor ref_loss = mse(whole->forward(x), y);
  ref_loss.backward();
  // Virtual stage v on stage v mod 2: chunks 0 and 2 on the first device, 1 and 3 on the second.
  Pipeline pipe(chunks, {devs[0], devs[1], devs[0], devs[1]}, PipelineSchedule::interleaved_1f1b, 4, 2);
  CHECK(pipe.evaluate(x, y, mse) == doctest::Approx(ref_loss.item<double>()).epsilon(1e-5));
  CHECK(pipe.train_step(x, y, mse) == doctest::Approx(ref_loss.item<double>()).epsilon(1e-5));
  const std::vector<Tensor> want = whole->parameters(), got = pipe.parameters();
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i].grad().defined());
    CHECK(max_rel_diff(got[i].grad(), want[i].grad()) < 1e-5);
  }
  const PipelineStats& st = pipe.stats();
  CHECK(st.stages == 2);
  CHECK(st.chunks == 2);
  MESSAGE("interleaved bubble " << st.bubble_fraction << " (1F1B: 0.2), activations in flight " << st.peak_in_flight[0] << ", "
                                << st.peak_in_flight[1]);
  CHECK(st.bubble_fraction < 0.2);  // 1F1B's (S-1)/(M+S-1) at 2 stages and 4 micro-batches
  TESSERA_CHECK_THROWS_WITH(Pipeline(chunks, {devs[0], devs[1], devs[0], devs[1]}, PipelineSchedule::interleaved_1f1b, 3, 2),
                            "do not divide by it");
}

TEST_CASE("a two-stage pipeline's loss and gradients equal the whole model's on the whole batch") {
  const std::vector<Device> devs = stage_devices();
  const Tensor x = make_input({16, 8}, DType::f32, 3), y = make_input({16, 4}, DType::f32, 4);
  const auto mse = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    CAPTURE(pipeline_schedule_name(sched));
    Split s = make_split(8, 32, 4);
    const Tensor ref_loss = mse(s.whole->forward(x), y);
    ref_loss.backward();
    Pipeline pipe({s.first, s.second}, devs, sched, 4);
    CHECK(pipe.evaluate(x, y, mse) == doctest::Approx(ref_loss.item<double>()).epsilon(1e-5));  // forward only
    CHECK(s.first->is_training());                                                              // evaluate() restores the stages' mode
    CHECK_FALSE(pipe.parameters()[0].grad().defined());
    const double loss = pipe.train_step(x, y, mse);
    CHECK(loss == doctest::Approx(ref_loss.item<double>()).epsilon(1e-5));
    const std::vector<Tensor> want = s.whole->parameters(), got = pipe.parameters();
    REQUIRE(want.size() == got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got[i].grad().defined());
      CHECK(max_rel_diff(got[i].grad(), want[i].grad()) < 1e-5);
    }
    CHECK(got[0].device() == devs[0]);
    CHECK(got.back().device() == devs[1]);
    const PipelineStats& st = pipe.stats();
    CHECK(st.bubble_fraction == doctest::Approx(1.0 / 5.0));  // (S-1)/(M+S-1)
    CHECK(st.peak_in_flight == (sched == PipelineSchedule::gpipe ? std::vector<int64_t>{4, 4} : std::vector<int64_t>{2, 1}));
    // A second step accumulates: gradients double.
    const Tensor g0 = got[0].grad().clone();
    (void)pipe.train_step(x, y, mse);
    CHECK(max_rel_diff(got[0].grad(), mul(g0, 2.0)) < 1e-5);
  }
  Split s = make_split(8, 32, 4);
  Pipeline pipe({s.first, s.second}, devs, PipelineSchedule::gpipe, 3);
  TESSERA_CHECK_THROWS_WITH(pipe.train_step(x, y, mse), "pipeline: input batch 16 does not divide into 3 micro-batches");
  TESSERA_CHECK_THROWS_WITH(Pipeline({s.first}, devs, PipelineSchedule::gpipe, 2), "pipeline: 1 stages but 2 devices");
}

TEST_CASE("a profiled pipeline step shows each stage's actions in schedule order") {
  const Tensor x = make_input({8, 8}, DType::f32, 3), y = make_input({8, 4}, DType::f32, 4);
  Split s = make_split(8, 16, 4);
  Pipeline pipe({s.first, s.second}, stage_devices(), PipelineSchedule::one_f_one_b, 4);
  profile::start();
  (void)pipe.train_step(x, y, [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); });
  const profile::Trace trace = profile::stop();
  std::vector<std::string> stage0, stage1;
  std::vector<const profile::Span*> spans;
  for (const profile::Span& span : trace.spans) {
    if (span.category == "pipeline") spans.push_back(&span);
  }
  std::sort(spans.begin(), spans.end(), [](const profile::Span* a, const profile::Span* b) { return a->begin_ns < b->begin_ns; });
  for (const profile::Span* span : spans) {
    if (span->name.rfind("pipeline stage 0 ", 0) == 0) stage0.push_back(span->name.substr(17));
    if (span->name.rfind("pipeline stage 1 ", 0) == 0) stage1.push_back(span->name.substr(17));
  }
  // 1F1B, 2 stages, 4 micro-batches: stage 0 warms up with two forwards, stage 1 alternates.
  CHECK(stage0 == std::vector<std::string>{"F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"});
  CHECK(stage1 == std::vector<std::string>{"F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"});
}

TEST_CASE("1F1B holds at most half of GPipe's step memory at 8 micro-batches") {
  const std::vector<Device> devs = stage_devices();
  const Tensor x = make_input({1024, 64}, DType::f32, 5), y = make_input({1024, 64}, DType::f32, 6);
  const auto mse = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  // Activation-heavy stages: four narrow Linear+Tanh layers each (what a stage keeps per
  // micro-batch dwarfs its parameters and a backward's temporaries).
  const auto stage = [] {
    std::vector<ModulePtr> layers;
    for (int k = 0; k < 4; ++k) layers.push_back(std::make_shared<Linear>(64, 64)), layers.push_back(std::make_shared<Tanh>());
    return std::make_shared<Sequential>(layers);
  };
  int64_t peak[2] = {0, 0};
  for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    manual_seed(2);
    Pipeline pipe({stage(), stage()}, devs, sched, 8);
    (void)pipe.train_step(x, y, mse);
    peak[sched == PipelineSchedule::gpipe ? 0 : 1] = pipe.stats().peak_step_bytes[0];  // stage 0 holds the most
  }
  MESSAGE("stage-0 device step peak: gpipe " << peak[0] << " B, 1f1b " << peak[1] << " B");
  CHECK(peak[1] > 0);
  CHECK(static_cast<double>(peak[1]) <= 0.5 * static_cast<double>(peak[0]));
}

TEST_CASE("a GPT trained 50 steps as a two-stage pipeline follows the one-device run") {
  const std::vector<Device> devs = stage_devices();
  const GPTConfig cfg{12, 8, 2, 2, 16, 0.0};
  manual_seed(21);
  GPT gpt(cfg, {DType::f32, device()});
  GPTStages split = split_gpt(gpt, 2);
  Pipeline pipe(split.stages, devs, PipelineSchedule::one_f_one_b, 4);
  pipe.tie(0, split.embedding, 1, split.head);
  TESSERA_CHECK_THROWS_WITH(pipe.tie(0, "nope", 1, split.head), "pipeline: tie: stage 0 has no parameter 'nope'");
  const OptimOptions o{.lr = 1e-2};
  Adam whole_opt(gpt.parameters(), o), first_opt(pipe.stages()[0]->parameters(), o), second_opt(pipe.stages()[1]->parameters(), o);
  const auto ce = [&](const Tensor& logits, const Tensor& target) {
    return cross_entropy(logits.reshape({logits.size(0) * logits.size(1), cfg.vocab}), target.reshape({target.numel()}));
  };
  manual_seed(3);
  const Tensor tokens = randint(0, cfg.vocab, {8, 9}, DType::i64, device());
  const Tensor x = tokens.narrow(1, 0, 8).contiguous(), y = tokens.narrow(1, 1, 8).contiguous();
  double worst = 0.0, first_loss = 0.0, last_loss = 0.0;
  for (int step = 0; step < 50; ++step) {
    whole_opt.zero_grad(), first_opt.zero_grad(), second_opt.zero_grad();
    const Tensor want = ce(gpt.forward(x), y);
    want.backward();
    whole_opt.step();
    const double got = pipe.train_step(x, y, ce);
    first_opt.step(), second_opt.step();
    worst = std::max(worst, std::abs(got - want.item<double>()) / want.item<double>());
    if (step == 0) first_loss = got;
    last_loss = got;
  }
  MESSAGE("50 steps: loss " << first_loss << " -> " << last_loss << ", worst relative difference from one device " << worst);
  CHECK(last_loss < 0.5 * first_loss);  // it learns (the batch is memorised)
  CHECK(worst < 1e-4);
  // The tied copies stayed equal.
  const auto param = [&](int64_t stage, const std::string& name) {
    for (const auto& [k, t] : pipe.stages()[stage]->named_parameters()) {
      if (k == name) return t;
    }
    return Tensor();
  };
  CHECK(max_rel_diff(param(0, split.embedding), param(1, split.head)) == 0.0);
}
