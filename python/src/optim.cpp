// tessera.optim (SGD, Adam, AdamW, RMSprop, learning-rate schedules), tessera.amp (autocast,
// GradScaler) and the Trainer, the same training loop the C++ programs and `tessera train` use.
#include "bindings.h"
#include "tessera/nn/amp.h"
#include "tessera/nn/trainer.h"

namespace tessera::python {
namespace {

using nn::Optimizer;
using nn::OptimOptions;
using nn::ParamGroup;

/** One entry of optimizer.param_groups: reads and writes go to the C++ group (g["lr"] = 0.1). */
struct GroupRef {
  std::shared_ptr<Optimizer> opt;
  size_t index;
  ParamGroup& group() const { return opt->param_groups().at(index); }
  double& field(const std::string& key) const {
    OptimOptions& o = group().options;
    if (key == "lr") return o.lr;
    if (key == "weight_decay") return o.weight_decay;
    if (key == "momentum") return o.momentum;
    if (key == "dampening") return o.dampening;
    if (key == "eps") return o.eps;
    if (key == "alpha") return o.alpha;
    throw py::key_error(key);
  }
};

/** params: tensors, or dicts {"params": [...], "lr": ...} overriding the defaults per group. */
std::vector<ParamGroup> groups_of(const py::iterable& params, const OptimOptions& defaults) {
  std::vector<ParamGroup> groups;
  std::vector<Tensor> loose;
  for (const auto& p : params) {
    if (py::isinstance<py::dict>(p)) {
      auto d = p.cast<py::dict>();
      ParamGroup g{d["params"].cast<std::vector<Tensor>>(), defaults};
      for (const auto& [k, v] : d) {
        const std::string key = py::str(k);
        if (key == "params") continue;
        if (key == "betas") {
          auto b = v.cast<std::pair<double, double>>();
          g.options.beta1 = b.first;
          g.options.beta2 = b.second;
        } else if (key == "nesterov") {
          g.options.nesterov = v.cast<bool>();
        } else {
          OptimOptions& o = g.options;
          double* f = key == "lr"             ? &o.lr
                      : key == "weight_decay" ? &o.weight_decay
                      : key == "momentum"     ? &o.momentum
                      : key == "eps"          ? &o.eps
                      : key == "alpha"        ? &o.alpha
                      : key == "dampening"    ? &o.dampening
                                              : nullptr;
          if (f == nullptr) throw Error("optimizer: unknown parameter-group option '" + key + "'");
          *f = v.cast<double>();
        }
      }
      groups.push_back(std::move(g));
    } else {
      loose.push_back(p.cast<Tensor>());
    }
  }
  TESSERA_CHECK(groups.empty() || loose.empty(), "optimizer", "give either tensors or parameter-group dicts, not both");
  if (groups.empty()) groups.push_back({std::move(loose), defaults});
  for (const auto& g : groups) TESSERA_CHECK(!g.params.empty(), "optimizer", "got an empty parameter list");
  return groups;
}

py::dict stats_dict(const nn::EpochStats& s) {
  py::dict d;
  d["epoch"] = s.epoch;
  d["step"] = s.step;
  d["train_loss"] = s.train_loss;
  d["lr"] = s.lr;
  d["test_loss"] = s.test.loss;
  d["test_accuracy"] = s.test.accuracy;
  d["test_samples"] = s.test.samples;
  d["samples_per_second"] = s.samples_per_second;
  d["step_ms"] = s.step_ms;
  d["seconds"] = s.seconds;
  d["skipped_steps"] = s.skipped_steps;
  return d;
}

struct Autocast {
  DType dtype;
  bool enabled;
  std::unique_ptr<AutocastGuard> guard;
};

struct GradMode {
  bool enabled;
  bool previous = true;
};

}  // namespace

void bind_optim(py::module_& m) {
  py::module_ optim = m.def_submodule("optim");
  py::class_<GroupRef>(optim, "ParamGroup")
      .def("__getitem__",
           [](const GroupRef& g, const std::string& key) -> py::object {
             if (key == "params") return py::cast(g.group().params);
             if (key == "betas") return py::make_tuple(g.group().options.beta1, g.group().options.beta2);
             return py::float_(g.field(key));
           })
      .def("__setitem__", [](const GroupRef& g, const std::string& key, const py::object& v) {
        if (key == "betas") {
          auto b = v.cast<std::pair<double, double>>();
          g.group().options.beta1 = b.first;
          g.group().options.beta2 = b.second;
          return;
        }
        g.field(key) = v.cast<double>();
      });
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(optim, "Optimizer")
      .def("step", &Optimizer::step, nogil())
      .def(
          "zero_grad", [](Optimizer& o, bool) { o.zero_grad(); }, py::arg("set_to_none") = true)
      .def_property_readonly("param_groups",
                             [](const std::shared_ptr<Optimizer>& o) {
                               py::list out;
                               for (size_t i = 0; i < o->param_groups().size(); ++i) out.append(GroupRef{o, i});
                               return out;
                             })
      .def("state_dict", &Optimizer::state_dict)
      .def("load_state_dict", &Optimizer::load_state_dict)
      .def_property_readonly("steps", &Optimizer::steps)
      .def_property_readonly("name", &Optimizer::name);
  optim.def(
      "SGD",
      [](const py::iterable& params, double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
        OptimOptions o;
        o.lr = lr;
        o.momentum = momentum;
        o.dampening = dampening;
        o.weight_decay = weight_decay;
        o.nesterov = nesterov;
        return std::shared_ptr<Optimizer>(std::make_shared<nn::SGD>(groups_of(params, o)));
      },
      py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0,
      py::arg("nesterov") = false);
  const auto adam = [](bool decoupled) {
    return [decoupled](const py::iterable& params, double lr, std::pair<double, double> betas, double eps, double weight_decay) {
      OptimOptions o;
      o.lr = lr;
      o.beta1 = betas.first;
      o.beta2 = betas.second;
      o.eps = eps;
      o.weight_decay = weight_decay;
      return std::shared_ptr<Optimizer>(std::make_shared<nn::Adam>(groups_of(params, o), decoupled));
    };
  };
  optim.def("Adam", adam(false), py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair<double, double>{0.9, 0.999},
            py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);
  optim.def("AdamW", adam(true), py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair<double, double>{0.9, 0.999},
            py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2);
  optim.def(
      "RMSprop",
      [](const py::iterable& params, double lr, double alpha, double eps, double weight_decay, double momentum) {
        OptimOptions o;
        o.lr = lr;
        o.alpha = alpha;
        o.eps = eps;
        o.weight_decay = weight_decay;
        o.momentum = momentum;
        return std::shared_ptr<Optimizer>(std::make_shared<nn::RMSprop>(groups_of(params, o)));
      },
      py::arg("params"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99, py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0,
      py::arg("momentum") = 0.0);
  optim.def(
      "clip_grad_norm_", [](const std::vector<Tensor>& params, double max_norm) { return nn::clip_grad_norm_(params, max_norm); },
      py::arg("parameters"), py::arg("max_norm"), nogil());

  // Schedules: factor(step) of the base learning rate; LRScheduler drives an optimizer with one.
  py::class_<nn::LRSchedule, std::shared_ptr<nn::LRSchedule>>(optim, "LRSchedule").def("factor", &nn::LRSchedule::factor);
  py::class_<nn::StepLR, nn::LRSchedule, std::shared_ptr<nn::StepLR>>(optim, "StepSchedule")
      .def(py::init<int64_t, double>(), py::arg("step_size"), py::arg("gamma") = 0.1);
  py::class_<nn::MultiStepLR, nn::LRSchedule, std::shared_ptr<nn::MultiStepLR>>(optim, "MultiStepSchedule")
      .def(py::init<std::vector<int64_t>, double>(), py::arg("milestones"), py::arg("gamma") = 0.1);
  py::class_<nn::CosineLR, nn::LRSchedule, std::shared_ptr<nn::CosineLR>>(optim, "CosineSchedule")
      .def(py::init<int64_t, double>(), py::arg("total_steps"), py::arg("min_factor") = 0.0);
  py::class_<nn::OneCycleLR, nn::LRSchedule, std::shared_ptr<nn::OneCycleLR>>(optim, "OneCycleSchedule")
      .def(py::init<int64_t, double, double, double>(), py::arg("total_steps"), py::arg("pct_start") = 0.3, py::arg("div_factor") = 25.0,
           py::arg("final_div_factor") = 1e4);
  py::class_<nn::LinearWarmup, nn::LRSchedule, std::shared_ptr<nn::LinearWarmup>>(optim, "WarmupSchedule")
      .def(py::init<int64_t, double>(), py::arg("warmup_steps"), py::arg("start_factor") = 0.0);
  py::class_<nn::ChainedLR, nn::LRSchedule, std::shared_ptr<nn::ChainedLR>>(optim, "ChainedSchedule")
      .def(py::init<std::vector<std::shared_ptr<nn::LRSchedule>>>(), py::arg("schedules"));
  py::class_<nn::Scheduler, std::shared_ptr<nn::Scheduler>>(optim, "LRScheduler")
      .def(py::init([](const std::shared_ptr<Optimizer>& opt, std::shared_ptr<nn::LRSchedule> s) {
             return std::make_shared<nn::Scheduler>(*opt, std::move(s));
           }),
           py::arg("optimizer"), py::arg("schedule"), py::keep_alive<1, 2>())
      .def("step", &nn::Scheduler::step)
      .def("get_last_lr", [](const nn::Scheduler& s) { return std::vector<double>{s.lr(0)}; })
      .def_property_readonly("steps", &nn::Scheduler::steps);

  py::module_ amp = m.def_submodule("amp");
  py::class_<Autocast>(amp, "autocast")
      .def(py::init([](const py::object& dtype, bool enabled) {
             return Autocast{dtype_arg(dtype, DType::bf16), enabled, nullptr};
           }),
           py::arg("dtype") = py::none(), py::arg("enabled") = true)
      .def("__enter__", [](Autocast& a) { a.guard = std::make_unique<AutocastGuard>(a.dtype, a.enabled); })
      .def("__exit__", [](Autocast& a, const py::args&) { a.guard.reset(); });
  py::class_<nn::GradScaler, std::shared_ptr<nn::GradScaler>>(amp, "GradScaler")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval, bool enabled) {
             nn::GradScalerOptions o;
             o.init_scale = init_scale;
             o.growth_factor = growth_factor;
             o.backoff_factor = backoff_factor;
             o.growth_interval = growth_interval;
             o.enabled = enabled;
             return std::make_shared<nn::GradScaler>(o);
           }),
           py::arg("init_scale") = 65536.0, py::arg("growth_factor") = 2.0, py::arg("backoff_factor") = 0.5,
           py::arg("growth_interval") = 2000, py::arg("enabled") = true)
      .def("scale", &nn::GradScaler::scale, nogil())
      .def(
          "unscale_", [](nn::GradScaler& s, const std::shared_ptr<Optimizer>& o) { s.unscale_(*o); }, nogil())
      .def(
          "step", [](nn::GradScaler& s, const std::shared_ptr<Optimizer>& o) { return s.step(*o); }, nogil())
      .def("update", &nn::GradScaler::update, nogil())
      .def("get_scale", &nn::GradScaler::get_scale)
      .def_property_readonly("skipped_steps", &nn::GradScaler::skipped_steps);

  py::class_<GradMode>(m, "_GradMode")
      .def(py::init<bool>())
      .def("__enter__",
           [](GradMode& g) {
             g.previous = grad_enabled();
             set_grad_enabled(g.enabled);
           })
      .def("__exit__", [](GradMode& g, const py::args&) { set_grad_enabled(g.previous); });
  m.def("is_grad_enabled", &grad_enabled);
  m.def("set_grad_enabled", &set_grad_enabled);

  // ---- the Trainer ----
  py::module_ nnm = m.attr("nn").cast<py::module_>();
  py::class_<nn::Trainer>(nnm, "Trainer")
      .def(py::init([](const std::shared_ptr<nn::Module>& model, const std::shared_ptr<Optimizer>& opt,
                       const std::shared_ptr<nn::Scheduler>& sched, const py::object& loss) {
             nn::LossFn fn;
             if (!loss.is_none()) {
               auto f = std::shared_ptr<py::object>(new py::object(loss), [](py::object* o) {
                 py::gil_scoped_acquire gil;
                 delete o;
               });
               fn = [f](const Tensor& out, const Tensor& target) {
                 py::gil_scoped_acquire gil;
                 return (*f)(out, target).cast<Tensor>();
               };
             }
             return std::make_unique<nn::Trainer>(*model, *opt, sched.get(), fn);
           }),
           py::arg("model"), py::arg("optimizer"), py::arg("scheduler") = nullptr, py::arg("loss") = py::none(), py::keep_alive<1, 2>(),
           py::keep_alive<1, 3>(), py::keep_alive<1, 4>())
      .def(
          "fit",
          [](nn::Trainer& t, const py::object& train, const py::object& test, int64_t epochs, int64_t grad_accumulation, double clip_norm,
             const std::string& checkpoint, bool resume, const py::object& precision, const std::shared_ptr<nn::GradScaler>& scaler,
             const py::object& on_epoch_end) {
            auto source = [](const py::object& l) { return l.attr("_source").cast<std::shared_ptr<nn::DataLoader>>(); };
            auto tr = source(train);
            auto te = test.is_none() ? nullptr : source(test);
            nn::TrainOptions o;
            o.epochs = epochs;
            o.grad_accumulation = grad_accumulation;
            o.clip_norm = clip_norm;
            o.checkpoint = checkpoint;
            o.resume = resume;
            o.precision = dtype_arg(precision, DType::f32);
            o.scaler = scaler.get();
            if (!on_epoch_end.is_none()) {
              py::object cb = on_epoch_end;
              o.on_epoch_end = [cb](const nn::EpochStats& s) {
                py::gil_scoped_acquire gil;
                cb(stats_dict(s));
              };
            }
            std::vector<nn::EpochStats> hist;
            {
              py::gil_scoped_release nogil;
              hist = t.fit(*tr, te.get(), o);
            }
            py::list out;
            for (const auto& s : hist) out.append(stats_dict(s));
            return out;
          },
          py::arg("train"), py::arg("test") = py::none(), py::kw_only(), py::arg("epochs") = 1, py::arg("grad_accumulation") = 1,
          py::arg("clip_norm") = 0.0, py::arg("checkpoint") = "", py::arg("resume") = false, py::arg("precision") = py::none(),
          py::arg("scaler") = nullptr, py::arg("on_epoch_end") = py::none())
      .def(
          "evaluate",
          [](nn::Trainer& t, const py::object& loader) {
            auto src = loader.attr("_source").cast<std::shared_ptr<nn::DataLoader>>();
            nn::EvalStats s;
            {
              py::gil_scoped_release nogil;
              s = t.evaluate(*src);
            }
            py::dict d;
            d["loss"] = s.loss;
            d["accuracy"] = s.accuracy;
            d["samples"] = s.samples;
            return d;
          },
          py::arg("loader"));
}

}  // namespace tessera::python
