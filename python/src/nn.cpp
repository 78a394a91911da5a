// tessera.nn: Module (subclassable in Python: parameters, buffers and sub-modules assigned as
// attributes register in the C++ module, so to(), state_dict(), optimizers and the Trainer see
// them), the standard layers, Sequential, safetensors, Fashion-MNIST loading and the DataLoader.
#include <deque>
#include <map>

#include "bindings.h"
#include "tessera/nn/attention.h"
#include "tessera/nn/data.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/nn/recurrent.h"
#include "tessera/nn/serialize.h"

namespace tessera::python {
namespace {

using nn::Module;
using nn::ModulePtr;

/** The C++ side of a Module subclass written in Python. */
class PyModule : public Module {
 public:
  Tensor forward(const Tensor& x) override { PYBIND11_OVERRIDE(Tensor, Module, forward, x); }
  std::string name() const override {
    py::gil_scoped_acquire gil;
    return py::str(py::cast(this).attr("__class__").attr("__name__"));
  }
  void set_tensor(const std::string& name, const Tensor& t, bool parameter) {
    auto it = slots_.find(name);
    if (it != slots_.end()) {
      TESSERA_CHECK(it->second.second == parameter, "Module", "'", name, "' is already a ", it->second.second ? "parameter" : "buffer");
      *it->second.first = t;
      return;
    }
    TESSERA_CHECK(!children_names_.count(name), "Module", "'", name, "' is already a sub-module");
    storage_.push_back(t);
    slots_[name] = {&storage_.back(), parameter};
    if (parameter) register_parameter(name, &storage_.back());
    else register_buffer(name, &storage_.back());
  }
  void set_child(const std::string& name, const ModulePtr& m) {
    TESSERA_CHECK(!slots_.count(name), "Module", "'", name, "' is already a parameter or buffer");
    TESSERA_CHECK(!children_names_.count(name), "Module", "sub-module '", name,
                  "' is already set; reassigning a sub-module is not supported (build a new module)");
    children_names_.insert(name);
    register_module(name, m);
  }
  std::optional<Tensor> get_tensor(const std::string& name) const {
    auto it = slots_.find(name);
    if (it == slots_.end()) return std::nullopt;
    return *it->second.first;
  }
  bool has_slot(const std::string& name) const { return slots_.count(name) != 0; }

 private:
  std::deque<Tensor> storage_;  // stable addresses: the base class registers pointers
  std::map<std::string, std::pair<Tensor*, bool>> slots_;
  std::set<std::string> children_names_;
};

std::shared_ptr<py::function> keep(py::function fn) {
  return {new py::function(std::move(fn)), [](py::function* f) {
            py::gil_scoped_acquire gil;
            delete f;
          }};
}

nn::Placement placement(const py::object& dtype, const py::object& device) { return {dtype_arg(dtype), device_arg(device)}; }

Size2 pair_of(const py::object& v) {
  if (py::isinstance<py::int_>(v)) return {v.cast<int64_t>(), v.cast<int64_t>()};
  auto s = v.cast<std::vector<int64_t>>();
  TESSERA_CHECK(s.size() == 2, "nn", "expected an int or a pair, got ", s.size(), " values");
  return {s[0], s[1]};
}

/** Batches of a DataLoader as a Python iterator: each `for` runs the next epoch. */
struct EpochIter {
  std::shared_ptr<nn::DataLoader> loader;
  py::tuple next() {
    nn::Batch b;
    bool more = false;
    {
      py::gil_scoped_release nogil;
      more = loader->next(b);
    }
    if (!more) throw py::stop_iteration();
    return py::make_tuple(b.x, b.y);
  }
};

struct Loader {
  std::shared_ptr<nn::DataLoader> loader;
  int64_t next_epoch = 0;
};

}  // namespace

void bind_nn(py::module_& m) {
  py::class_<Module, PyModule, std::shared_ptr<Module>>(m, "Module", py::dynamic_attr())
      .def(py::init<>())
      .def("forward", &Module::forward)
      .def("__call__",
           [](Module& self, const py::args& args, const py::kwargs& kwargs) -> py::object {
             if (args.size() == 1 && kwargs.empty() && py::isinstance<Tensor>(args[0])) {
               const Tensor x = args[0].cast<Tensor>();
               Tensor out;
               {
                 py::gil_scoped_release nogil;
                 out = self(x);
               }
               return py::cast(out);
             }
             return py::cast(&self).attr("forward")(*args, **kwargs);  // other signatures: forward as written
           })
      .def("_set_tensor",
           [](Module& self, const std::string& name, const py::object& t, bool parameter) {
             auto* pm = dynamic_cast<PyModule*>(&self);
             TESSERA_CHECK(pm != nullptr, "Module", "cannot add '", name, "' to a built-in ", self.name());
             pm->set_tensor(name, t.is_none() ? Tensor() : t.cast<Tensor>(), parameter);
           })
      .def("_set_child",
           [](Module& self, const std::string& name, const ModulePtr& child) {
             auto* pm = dynamic_cast<PyModule*>(&self);
             TESSERA_CHECK(pm != nullptr, "Module", "cannot add '", name, "' to a built-in ", self.name());
             pm->set_child(name, child);
           })
      .def("_get_tensor",
           [](const Module& self, const std::string& name) -> py::object {
             const auto* pm = dynamic_cast<const PyModule*>(&self);
             if (pm != nullptr && pm->has_slot(name)) {
               const auto t = pm->get_tensor(name);
               return t && t->defined() ? py::cast(*t) : py::none();
             }
             throw py::attribute_error("'" + self.name() + "' object has no attribute '" + name + "'");
           })
      .def("named_parameters", &Module::named_parameters)
      .def("parameters", &Module::parameters)
      .def("named_buffers", &Module::named_buffers)
      .def("buffers",
           [](const Module& self) {
             std::vector<Tensor> out;
             for (auto& [n, t] : self.named_buffers()) out.push_back(t);
             return out;
           })
      .def("named_children", [](const Module& self) { return self.children(); })
      .def("children",
           [](const Module& self) {
             std::vector<ModulePtr> out;
             for (auto& [n, c] : self.children()) out.push_back(c);
             return out;
           })
      .def("num_parameters", &Module::num_parameters)
      .def(
          "train",
          [](Module& self, bool on) -> Module& {
            self.train(on);
            return self;
          },
          py::arg("mode") = true, py::return_value_policy::reference)
      .def(
          "eval",
          [](Module& self) -> Module& {
            self.eval();
            return self;
          },
          py::return_value_policy::reference)
      .def_property_readonly("training", &Module::is_training)
      .def(
          "to",
          [](Module& self, const py::object& a, const py::object& dtype) -> Module& {
            std::optional<DType> dt = dtype.is_none() ? std::nullopt : std::optional<DType>(dtype_arg(dtype));
            Device dev = kCPU;
            bool have_device = false;
            if (!a.is_none()) {
              try {
                dev = device_arg(a);
                have_device = true;
              } catch (const Error&) {
                dt = dtype_arg(a);
              }
            }
            if (!have_device) {  // a dtype alone: stay where the parameters are
              const auto params = self.parameters();
              dev = params.empty() ? kCPU : params.front().device();
            }
            py::gil_scoped_release nogil;
            self.to(dev, dt);
            return self;
          },
          py::arg("device") = py::none(), py::arg("dtype") = py::none(), py::return_value_policy::reference)
      .def("state_dict", &Module::state_dict)
      .def("load_state_dict", &Module::load_state_dict, py::arg("state_dict"), py::arg("strict") = true, nogil())
      .def("zero_grad", &Module::zero_grad)
      .def("register_forward_hook",
           [](Module& self, py::function fn) {
             auto f = keep(std::move(fn));
             self.register_forward_hook([f](Module& mod, const Tensor& out) {
               py::gil_scoped_acquire gil;
               (*f)(py::cast(&mod), out);
             });
           })
      .def("register_forward_pre_hook",
           [](Module& self, py::function fn) {
             auto f = keep(std::move(fn));
             self.register_forward_pre_hook([f](Module& mod) {
               py::gil_scoped_acquire gil;
               (*f)(py::cast(&mod));
             });
           })
      .def("_name", &Module::name)
      .def("__repr__", &Module::str);

  using OD = py::object;
  const auto pl = [](const OD& dtype, const OD& device) { return placement(dtype, device); };
  py::class_<nn::Linear, Module, std::shared_ptr<nn::Linear>>(m, "Linear")
      .def(py::init([pl](int64_t in, int64_t out, bool bias, const OD& dtype, const OD& device) {
             return std::make_shared<nn::Linear>(in, out, bias, pl(dtype, device));
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("device") = py::none())
      .def_readwrite("weight", &nn::Linear::weight)
      .def_readwrite("bias", &nn::Linear::bias);
  py::class_<nn::Conv2d, Module, std::shared_ptr<nn::Conv2d>>(m, "Conv2d")
      .def(py::init([pl](int64_t in, int64_t out, const OD& k, const OD& stride, const OD& padding, const OD& dilation, int64_t groups,
                         bool bias, const OD& dtype, const OD& device) {
             return std::make_shared<nn::Conv2d>(in, out, pair_of(k), pair_of(stride), pair_of(padding), pair_of(dilation), groups, bias,
                                                 pl(dtype, device));
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1, py::arg("padding") = 0,
           py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("device") = py::none())
      .def_readwrite("weight", &nn::Conv2d::weight)
      .def_readwrite("bias", &nn::Conv2d::bias);
  py::class_<nn::MaxPool2d, Module, std::shared_ptr<nn::MaxPool2d>>(m, "MaxPool2d")
      .def(py::init([](const OD& k, const OD& stride, const OD& padding, const OD& dilation, bool ceil_mode) {
             std::optional<Size2> s = stride.is_none() ? std::nullopt : std::optional<Size2>(pair_of(stride));
             return std::make_shared<nn::MaxPool2d>(pair_of(k), s, pair_of(padding), pair_of(dilation), ceil_mode);
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("ceil_mode") = false);
  py::class_<nn::AvgPool2d, Module, std::shared_ptr<nn::AvgPool2d>>(m, "AvgPool2d")
      .def(py::init([](const OD& k, const OD& stride, const OD& padding, bool ceil_mode, bool count_include_pad) {
             std::optional<Size2> s = stride.is_none() ? std::nullopt : std::optional<Size2>(pair_of(stride));
             return std::make_shared<nn::AvgPool2d>(pair_of(k), s, pair_of(padding), ceil_mode, count_include_pad);
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("ceil_mode") = false,
           py::arg("count_include_pad") = true);
  py::class_<nn::AdaptiveAvgPool2d, Module, std::shared_ptr<nn::AdaptiveAvgPool2d>>(m, "AdaptiveAvgPool2d")
      .def(py::init([](const OD& size) { return std::make_shared<nn::AdaptiveAvgPool2d>(pair_of(size)); }), py::arg("output_size"));
  py::class_<nn::BatchNorm, Module, std::shared_ptr<nn::BatchNorm>>(m, "_BatchNorm")
      .def_readwrite("weight", &nn::BatchNorm::weight)
      .def_readwrite("bias", &nn::BatchNorm::bias)
      .def_readwrite("running_mean", &nn::BatchNorm::running_mean)
      .def_readwrite("running_var", &nn::BatchNorm::running_var);
  py::class_<nn::BatchNorm1d, nn::BatchNorm, std::shared_ptr<nn::BatchNorm1d>>(m, "BatchNorm1d")
      .def(py::init([pl](int64_t f, double eps, double momentum, bool affine, const OD& dtype, const OD& device) {
             return std::make_shared<nn::BatchNorm1d>(f, eps, momentum, affine, pl(dtype, device));
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("device") = py::none());
  py::class_<nn::BatchNorm2d, nn::BatchNorm, std::shared_ptr<nn::BatchNorm2d>>(m, "BatchNorm2d")
      .def(py::init([pl](int64_t f, double eps, double momentum, bool affine, const OD& dtype, const OD& device) {
             return std::make_shared<nn::BatchNorm2d>(f, eps, momentum, affine, pl(dtype, device));
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("device") = py::none());
  py::class_<nn::LayerNorm, Module, std::shared_ptr<nn::LayerNorm>>(m, "LayerNorm")
      .def(py::init([pl](const OD& shape, double eps, bool affine, const OD& dtype, const OD& device) {
             Shape s = py::isinstance<py::int_>(shape) ? Shape{shape.cast<int64_t>()} : shape.cast<Shape>();
             return std::make_shared<nn::LayerNorm>(s, eps, affine, pl(dtype, device));
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("device") = py::none())
      .def_readwrite("weight", &nn::LayerNorm::weight)
      .def_readwrite("bias", &nn::LayerNorm::bias);
  py::class_<nn::GroupNorm, Module, std::shared_ptr<nn::GroupNorm>>(m, "GroupNorm")
      .def(py::init([pl](int64_t g, int64_t c, double eps, bool affine, const OD& dtype, const OD& device) {
             return std::make_shared<nn::GroupNorm>(g, c, eps, affine, pl(dtype, device));
           }),
           py::arg("num_groups"), py::arg("num_channels"), py::arg("eps") = 1e-5, py::arg("affine") = true, py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("device") = py::none());
  py::class_<nn::Dropout, Module, std::shared_ptr<nn::Dropout>>(m, "Dropout").def(py::init<double>(), py::arg("p") = 0.5);
  py::class_<nn::Flatten, Module, std::shared_ptr<nn::Flatten>>(m, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  // Modules whose forward takes more than one tensor: __call__ is their full forward.
  py::class_<nn::MultiHeadAttention, Module, std::shared_ptr<nn::MultiHeadAttention>>(m, "MultiHeadAttention")
      .def(py::init([pl](int64_t e, int64_t heads, bool bias, const OD& dtype, const OD& device) {
             return std::make_shared<nn::MultiHeadAttention>(e, heads, bias, pl(dtype, device));
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("bias") = true, py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("device") = py::none())
      .def(
          "__call__",
          [](nn::MultiHeadAttention& a, const Tensor& q, const std::optional<Tensor>& k, const std::optional<Tensor>& v, bool causal,
             const std::optional<Tensor>& key_padding_mask, const std::optional<Tensor>& attn_mask) {
            return a.call([&] {
              return a.forward(q, k ? *k : q, v ? *v : (k ? *k : q), causal, key_padding_mask ? *key_padding_mask : Tensor(),
                               attn_mask ? *attn_mask : Tensor());
            });
          },
          py::arg("query"), py::arg("key") = py::none(), py::arg("value") = py::none(), py::kw_only(), py::arg("causal") = false,
          py::arg("key_padding_mask") = py::none(), py::arg("attn_mask") = py::none(), nogil(),
          "Batch-first [B, L, E]; self-attention when key/value are omitted.");
  // LSTM and GRU take torch's constructor arguments, in its order.
  const auto def_recurrent_init = [pl](auto& cls) {
    using Layer = typename std::remove_reference_t<decltype(cls)>::type;
    cls.def(py::init([pl](int64_t in, int64_t hidden, int64_t layers, bool bias, bool batch_first, const OD& dtype, const OD& device) {
              nn::RecurrentOptions o;
              o.num_layers = layers;
              o.bias = bias;
              o.batch_first = batch_first;
              return std::make_shared<Layer>(in, hidden, o, pl(dtype, device));
            }),
            py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1, py::arg("bias") = true,
            py::arg("batch_first") = false, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  };
  py::class_<nn::LSTM, Module, std::shared_ptr<nn::LSTM>> lstm(m, "LSTM");
  def_recurrent_init(lstm);
  lstm.def(
      "__call__",
      [](nn::LSTM& l, const Tensor& x, const std::optional<std::pair<Tensor, Tensor>>& state) {
        std::pair<Tensor, std::pair<Tensor, Tensor>> r;
        l.call([&] {
          r = l.forward(x, state ? *state : std::pair<Tensor, Tensor>{});
          return r.first;
        });
        return r;
      },
      py::arg("input"), py::arg("state") = py::none(), nogil(), "(output, (h_n, c_n)), as torch.nn.LSTM.");
  py::class_<nn::GRU, Module, std::shared_ptr<nn::GRU>> gru(m, "GRU");
  def_recurrent_init(gru);
  gru.def(
      "__call__",
      [](nn::GRU& g, const Tensor& x, const std::optional<Tensor>& h0) {
        std::pair<Tensor, Tensor> r;
        g.call([&] {
          r = g.forward(x, h0 ? *h0 : Tensor());
          return r.first;
        });
        return r;
      },
      py::arg("input"), py::arg("hx") = py::none(), nogil(), "(output, h_n), as torch.nn.GRU.");
  py::class_<nn::Embedding, Module, std::shared_ptr<nn::Embedding>>(m, "Embedding")
      .def(py::init([pl](int64_t n, int64_t dim, std::optional<int64_t> padding_idx, const OD& dtype, const OD& device) {
             return padding_idx ? std::make_shared<nn::Embedding>(n, dim, *padding_idx, pl(dtype, device))
                                : std::make_shared<nn::Embedding>(n, dim, pl(dtype, device));
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("padding_idx") = py::none(), py::kw_only(),
           py::arg("dtype") = py::none(), py::arg("device") = py::none())
      .def_readwrite("weight", &nn::Embedding::weight);
  py::class_<nn::ReLU, Module, std::shared_ptr<nn::ReLU>>(m, "ReLU").def(py::init<>());
  py::class_<nn::SiLU, Module, std::shared_ptr<nn::SiLU>>(m, "SiLU").def(py::init<>());
  py::class_<nn::Tanh, Module, std::shared_ptr<nn::Tanh>>(m, "Tanh").def(py::init<>());
  py::class_<nn::Sigmoid, Module, std::shared_ptr<nn::Sigmoid>>(m, "Sigmoid").def(py::init<>());
  py::class_<nn::GELU, Module, std::shared_ptr<nn::GELU>>(m, "GELU").def(
      py::init([](const std::string& approximate) {
        TESSERA_CHECK(approximate == "none" || approximate == "tanh", "GELU", "approximate must be 'none' or 'tanh', got '", approximate,
                      "'");
        return std::make_shared<nn::GELU>(approximate == "tanh");
      }),
      py::arg("approximate") = "none");
  py::class_<nn::Sequential, Module, std::shared_ptr<nn::Sequential>>(m, "Sequential")
      .def(py::init([](const py::args& layers) {
             auto s = std::make_shared<nn::Sequential>();
             for (const auto& l : layers) s->add(l.cast<ModulePtr>());
             return s;
           }),
           py::keep_alive<1, 2>())  // the layers tuple: a Python-defined layer keeps its forward while the container lives
      .def(
          "append", [](nn::Sequential& s, const ModulePtr& l) -> nn::Sequential& { return s.add(l); }, py::keep_alive<1, 2>(),
          py::return_value_policy::reference)
      .def("__len__", &nn::Sequential::size)
      .def("__getitem__", [](const nn::Sequential& s, int64_t i) {
        const auto n = static_cast<int64_t>(s.size());
        TESSERA_CHECK(i >= -n && i < n, "Sequential", "index ", i, " out of range for ", n, " layers");
        return s.children()[static_cast<size_t>(i < 0 ? i + n : i)].second;
      });
  m.def(
      "make_mlp",
      [](const OD& dtype, const OD& device) { return std::static_pointer_cast<Module>(nn::make_mlp(placement(dtype, device))); },
      py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "make_cnn",
      [](const OD& dtype, const OD& device) { return std::static_pointer_cast<Module>(nn::make_cnn(placement(dtype, device))); },
      py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());

  m.def(
      "save_safetensors",
      [](const std::string& path, const nn::StateDict& tensors, const nn::Metadata& md) { nn::save_safetensors(path, tensors, md); },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = nn::Metadata{}, nogil());
  m.def(
      "load_safetensors",
      [](const std::string& path, const OD& device) {
        const Device d = device_arg(device);
        nn::SafetensorsContent c;
        {
          py::gil_scoped_release nogil;
          c = nn::load_safetensors(path, d);
        }
        return py::make_tuple(c.tensors, c.metadata);
      },
      py::arg("path"), py::arg("device") = py::none());

  // ---- data ----
  m.def(
      "load_mnist",
      [](const std::string& dir, const std::string& split, int64_t limit) {
        nn::ImageSet s;
        {
          py::gil_scoped_release nogil;
          s = nn::load_mnist_split(dir, split, limit);
        }
        return py::make_tuple(s.images, s.labels);
      },
      py::arg("root"), py::arg("split") = "train", py::arg("limit") = -1);
  py::class_<EpochIter>(m, "_EpochIter").def("__iter__", [](EpochIter& it) -> EpochIter& { return it; }).def("__next__", &EpochIter::next);
  py::class_<Loader>(m, "DataLoader")
      .def(py::init([](const Tensor& images, const Tensor& labels, int64_t batch_size, bool shuffle, bool drop_last, uint64_t seed,
                       int workers, const OD& device) {
             nn::LoaderOptions o;
             o.batch_size = batch_size;
             o.shuffle = shuffle;
             o.drop_last = drop_last;
             o.seed = seed;
             o.workers = workers;
             o.device = device_arg(device);
             return Loader{std::make_shared<nn::DataLoader>(nn::ImageSet{images, labels}, o)};
           }),
           py::arg("images"), py::arg("labels"), py::kw_only(), py::arg("batch_size") = 128, py::arg("shuffle") = true,
           py::arg("drop_last") = false, py::arg("seed") = 0, py::arg("workers") = 1, py::arg("device") = py::none())
      .def("__len__", [](const Loader& l) { return l.loader->batches(); })
      .def(
          "epoch",
          [](Loader& l, int64_t epoch) {
            {
              py::gil_scoped_release nogil;
              l.loader->start_epoch(epoch);
            }
            l.next_epoch = epoch + 1;
            return EpochIter{l.loader};
          },
          py::arg("epoch"), "The batches of epoch `epoch` (0-based): a function of (seed, epoch) alone, as the Trainer sees them.")
      .def("__iter__",
           [](Loader& l) {
             py::gil_scoped_release nogil;
             l.loader->start_epoch(l.next_epoch++);
             return EpochIter{l.loader};
           })
      .def_property_readonly("_source", [](const Loader& l) { return l.loader; });
  py::class_<nn::DataLoader, std::shared_ptr<nn::DataLoader>>(m, "_BatchSource");
}

}  // namespace tessera::python
