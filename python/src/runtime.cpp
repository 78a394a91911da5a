// Creation functions, the runtime switches, tessera.info(), tessera.bench.run() and
// tessera.distributed.
#include <cmath>

#include "bindings.h"
#include "bench.h"
#include "tessera/backend/modules.h"
#include "tessera/backend/registry.h"
#include "tessera/nn/ddp.h"

namespace tessera::python {
namespace {

using OD = py::object;

Tensor with_grad(Tensor t, bool requires_grad) {
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

template <class F>
void def_sized(py::module_& m, const char* name, F make) {
  m.def(
      name,
      [make](const py::args& args, const OD& size, const OD& dtype, const OD& device, bool requires_grad) {
        const Shape s = shape_arg(args, size);
        const DType dt = dtype_arg(dtype);
        const Device dev = device_arg(device);
        Tensor t;
        {
          py::gil_scoped_release nogil;
          t = make(s, dt, dev);
        }
        return with_grad(t, requires_grad);
      },
      py::kw_only(), py::arg("size") = py::none(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
}

py::dict record_dict(const bench::Record& r) {
  py::dict d;
  d["suite"] = r.suite;
  d["name"] = r.name;
  d["backend"] = r.backend;
  d["device"] = r.device;
  d["dtype"] = r.dtype;
  d["shape"] = r.shape;
  d["median_s"] = r.median_s;
  d["min_s"] = r.min_s;
  d["max_s"] = r.max_s;
  d["gflops"] = r.gflops;
  d["gbps"] = r.gbps;
  d["pct_of_peak"] = r.pct_of_peak < 0 ? py::object(py::none()) : py::object(py::float_(r.pct_of_peak));
  d["peer"] = r.peer.empty() ? py::object(py::none()) : py::object(py::str(r.peer));
  d["peer_median_s"] = r.peer.empty() ? py::object(py::none()) : py::object(py::float_(r.peer_median_s));
  d["ratio"] = r.peer.empty() ? py::object(py::none()) : py::object(py::float_(r.ratio));
  d["status"] = r.status;
  d["wrong"] = r.wrong;
  return d;
}

py::dict info_dict() {
  py::dict j;
  py::list backends;
  for (Backend* b : registered_backends()) {
    py::dict bj;
    bj["name"] = b->name();
    py::dict build;
    for (const auto& [k, v] : b->build_info()) build[py::str(k)] = v;
    bj["build"] = build;
    py::list devices;
    const int count = b->device_count();
    for (int i = 0; i < count; ++i) {
      const DeviceInfo info = b->device_info(i);
      py::dict dj;
      dj["device"] = Device(b->device_type(), i).str();
      dj["name"] = info.name;
      dj["memory_bytes"] = info.total_memory;
      dj["compute_units"] = info.compute_units;
      py::dict props;
      for (const auto& [k, v] : info.properties) props[py::str(k)] = v;
      dj["properties"] = props;
      devices.append(dj);
    }
    bj["devices"] = devices;
    bj["unavailable_reason"] = count == 0 ? py::object(py::str(b->unavailable_reason())) : py::object(py::none());
    backends.append(bj);
  }
  j["backends"] = backends;
  py::list missing;
  for (const auto& mb : missing_backends()) missing.append(py::dict(py::arg("name") = mb.name, py::arg("reason") = mb.reason));
  j["missing_backends"] = missing;
  py::list mods;
  for (const auto& s : modules::status())
    mods.append(py::dict(py::arg("name") = s.name, py::arg("loaded") = s.loaded, py::arg("reason") = s.reason));
  j["modules"] = mods;
  j["process_groups"] = dist::available_backends();
  j["devices"] = [] {
    std::vector<std::string> out;
    for (Backend* b : registered_backends())
      for (int i = 0; i < b->device_count(); ++i) out.push_back(Device(b->device_type(), i).str());
    return out;
  }();
  return j;
}

}  // namespace

void bind_runtime(py::module_& m) {
  def_sized(m, "zeros", [](const Shape& s, DType d, Device v) { return zeros(s, d, v); });
  def_sized(m, "ones", [](const Shape& s, DType d, Device v) { return ones(s, d, v); });
  def_sized(m, "empty", [](const Shape& s, DType d, Device v) { return empty(s, d, v); });
  def_sized(m, "rand", [](const Shape& s, DType d, Device v) { return rand(s, d, v); });
  def_sized(m, "randn", [](const Shape& s, DType d, Device v) { return randn(s, d, v); });
  m.def(
      "full",
      [](const Shape& size, Scalar value, const OD& dtype, const OD& device, bool rg) {
        const DType fallback = value.is_integral() ? DType::i64 : DType::f32;
        return with_grad(full(size, value, dtype_arg(dtype, fallback), device_arg(device)), rg);
      },
      py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
  m.def(
      "bernoulli",
      [](const py::object& p_or_input, const py::object& size, const OD& dtype, const OD& device) {
        if (py::isinstance<Tensor>(p_or_input)) {  // torch.bernoulli(probabilities): 1 where rand < p
          const Tensor& probs = p_or_input.cast<const Tensor&>();
          py::gil_scoped_release nogil;
          return lt(rand(probs.shape(), to_floating(probs.dtype()), probs.device()), probs).to(probs.dtype());
        }
        TESSERA_CHECK(!size.is_none(), "bernoulli", "give a probability tensor, or p and a size (bernoulli(0.3, (2, 3)))");
        const Shape s = size.cast<Shape>();
        const double p = p_or_input.cast<double>();
        const DType dt = dtype_arg(dtype);
        const Device dev = device_arg(device);
        py::gil_scoped_release nogil;
        return bernoulli(s, p, dt, dev);
      },
      py::arg("p"), py::arg("size") = py::none(), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "scalar_tensor", [](Scalar v, const OD& dtype, const OD& device) { return scalar_tensor(v, dtype_arg(dtype), device_arg(device)); },
      py::arg("s"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "randint",
      [](int64_t low, const OD& high, const OD& size, const OD& dtype, const OD& device) {
        int64_t lo = low, hi = 0;
        if (high.is_none()) throw Error("randint: give low, high and size (randint(0, 10, (3,)))");
        hi = high.cast<int64_t>();
        return randint(lo, hi, size.cast<Shape>(), dtype_arg(dtype, DType::i64), device_arg(device));
      },
      py::arg("low"), py::arg("high"), py::arg("size"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "arange",
      [](const OD& start, const OD& end, const OD& step, const OD& dtype, const OD& device) {
        const bool ints =
            py::isinstance<py::int_>(start) && (end.is_none() || py::isinstance<py::int_>(end)) && py::isinstance<py::int_>(step);
        double a = start.cast<double>(), b = 0;
        if (end.is_none()) std::swap(a, b);
        else b = end.cast<double>();
        return arange(a, b, step.cast<double>(), dtype_arg(dtype, ints ? DType::i64 : DType::f32), device_arg(device));
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1, py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none());
  m.def(
      "linspace",
      [](double a, double b, int64_t steps, const OD& dtype, const OD& device) {
        return linspace(a, b, steps, dtype_arg(dtype), device_arg(device));
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "eye", [](int64_t n, int64_t mm, const OD& dtype, const OD& device) { return eye(n, mm, dtype_arg(dtype), device_arg(device)); },
      py::arg("n"), py::arg("m") = -1, py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "zeros_like", [](const Tensor& t, const OD& dtype) { return zeros_like(t).to(dtype_arg(dtype, t.dtype())); }, py::arg("input"),
      py::kw_only(), py::arg("dtype") = py::none());
  m.def(
      "ones_like", [](const Tensor& t, const OD& dtype) { return ones_like(t).to(dtype_arg(dtype, t.dtype())); }, py::arg("input"),
      py::kw_only(), py::arg("dtype") = py::none());
  m.def("empty_like", &empty_like, py::arg("input"));
  m.def("full_like", &full_like, py::arg("input"), py::arg("fill_value"));
  m.def(
      "randn_like", [](const Tensor& t) { return randn(t.shape(), t.dtype(), t.device()); }, py::arg("input"));
  m.def(
      "rand_like", [](const Tensor& t) { return rand(t.shape(), t.dtype(), t.device()); }, py::arg("input"));

  m.def("set_num_threads", &set_num_threads);
  m.def("get_num_threads", &num_threads);
  m.def("set_deterministic", &set_deterministic);
  m.def("set_fused_kernels", &set_fused_kernels);
  m.def("set_allow_tf32", &set_allow_tf32);
  m.def(
      "synchronize", [](const OD& device) { synchronize(device_arg(device)); }, py::arg("device") = py::none(), nogil());
  m.def(
      "memory_stats",
      [](const OD& device) {
        const AllocatorStats s = memory_stats(device_arg(device));
        py::dict d;
        d["in_use_bytes"] = s.in_use_bytes;
        d["reserved_bytes"] = s.reserved_bytes;
        d["peak_in_use_bytes"] = s.peak_in_use_bytes;
        d["allocation_count"] = s.allocation_count;
        d["cache_hits"] = s.cache_hits;
        return d;
      },
      py::arg("device") = py::none());
  m.def(
      "empty_cache", [](const OD& device) { empty_cache(device_arg(device)); }, py::arg("device") = py::none());
  m.def("info", &info_dict, "Backends built in, their devices (or why none), modules loaded, process groups: `tessera info` as a dict.");

  py::module_ b = m.def_submodule("bench");
  b.def("suites", &bench::suite_names);
  b.def(
      "run",
      [](const std::vector<std::string>& backends, const std::vector<std::string>& suites, bool quick, int threads,
         const std::vector<std::string>& filters, const std::string& json_path) {
        bench::Options o;
        o.backends = backends;
        o.suites = suites;
        o.quick = quick;
        o.threads = threads;
        o.filters = filters;
        o.json_path = json_path;
        std::vector<bench::Record> records;
        {
          py::gil_scoped_release nogil;
          records = bench::run(o);
        }
        py::list out;
        for (const auto& r : records) out.append(record_dict(r));
        return out;
      },
      py::arg("backends") = std::vector<std::string>{}, py::arg("suites") = std::vector<std::string>{}, py::arg("quick") = false,
      py::arg("threads") = 0, py::arg("filters") = std::vector<std::string>{}, py::arg("json_path") = "",
      "Runs the benchmark (as `tessera bench`) and returns its records as dicts (ratio = peer time / Tessera time).");

  py::module_ d = m.def_submodule("distributed");
  py::class_<dist::ProcessGroup, std::shared_ptr<dist::ProcessGroup>>(d, "ProcessGroup")
      .def("rank", &dist::ProcessGroup::rank)
      .def("size", &dist::ProcessGroup::world_size)
      .def("backend", &dist::ProcessGroup::backend)
      .def("barrier", &dist::ProcessGroup::barrier, nogil());
  d.def("available_backends", &dist::available_backends);
  d.def("init_process_group", &dist::init_process_group, py::arg("backend") = "", nogil());
  d.def("is_initialized", &dist::is_initialized);
  d.def("get_rank", [] { return dist::default_group().rank(); });
  d.def("get_world_size", [] { return dist::default_group().world_size(); });
  d.def(
      "barrier", [] { dist::default_group().barrier(); }, nogil());
  const auto op_of = [](const std::string& op) {
    return op == "sum"    ? dist::ReduceOp::sum
           : op == "mean" ? dist::ReduceOp::mean
           : op == "max"  ? dist::ReduceOp::max
           : op == "min"  ? dist::ReduceOp::min
                          : throw Error("all_reduce: op must be sum, mean, max or min, got '" + op + "'");
  };
  d.def(
      "all_reduce", [op_of](const Tensor& t, const std::string& op) { dist::all_reduce(t, op_of(op)); }, py::arg("tensor"),
      py::arg("op") = "sum", nogil());
  d.def(
      "broadcast", [](const Tensor& t, int src) { dist::broadcast(t, src); }, py::arg("tensor"), py::arg("src") = 0, nogil());
  py::class_<nn::DistributedDataParallel>(d, "DistributedDataParallel")
      .def(py::init([](const std::shared_ptr<nn::Module>& module, int64_t bucket_cap_mb) {
             nn::DdpOptions o;
             o.bucket_bytes = bucket_cap_mb << 20;
             return std::make_unique<nn::DistributedDataParallel>(module, dist::default_group(), o);
           }),
           py::arg("module"), py::arg("bucket_cap_mb") = 25, py::keep_alive<1, 2>(), nogil())
      .def("__call__", &nn::DistributedDataParallel::forward, nogil())
      .def("forward", &nn::DistributedDataParallel::forward, nogil())
      .def("finish_gradient_sync", &nn::DistributedDataParallel::finish_gradient_sync, nogil(),
           "Waits for the gradient all-reduces started during backward (call before optimizer.step()).");
}

}  // namespace tessera::python
