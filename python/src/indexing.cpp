// x[key] and x[key] = value with PyTorch's semantics: integers select (basic, as torch, unlike
// NumPy's treatment beside an index array), slices take strided views, None inserts an axis,
// ... fills; integer and bool tensors (or lists) index advanced-style: broadcast together, their
// result axes where the first one stood when they are adjacent, otherwise in front.
#include <numeric>

#include "bindings.h"

namespace tessera::python {

Tensor tensor_from_py(const py::object& data, const py::object& dtype, Device device);

namespace {

struct Indexed {
  Tensor view;                  ///< x after the basic part of the key (a view of x)
  std::vector<int64_t> axes;    ///< axes of `view` the index tensors apply to
  std::vector<Tensor> indices;  ///< int64, one per entry of `axes`
};

bool is_index_tensor(const py::handle& o) {
  return py::isinstance<Tensor>(o) || py::isinstance<py::list>(o) || (py::hasattr(o, "__array__") && !py::isinstance<py::int_>(o));
}

/** A bool mask over `mask.dim()` axes becomes that many int64 index tensors (its nonzero positions). */
std::vector<Tensor> mask_to_indices(const Tensor& mask) {
  const Tensor host = mask.to(kCPU).contiguous();
  const auto* m = host.data<bool>();
  const Shape& s = host.shape();
  const int64_t n = host.numel(), dims = host.dim();
  std::vector<std::vector<int64_t>> cols(static_cast<size_t>(dims));
  for (int64_t i = 0; i < n; ++i) {
    if (!m[i]) continue;
    int64_t rem = i;
    for (int64_t d = dims - 1; d >= 0; --d) {
      cols[static_cast<size_t>(d)].push_back(rem % s[static_cast<size_t>(d)]);
      rem /= s[static_cast<size_t>(d)];
    }
  }
  std::vector<Tensor> out;
  for (auto& c : cols) {
    const auto len = static_cast<int64_t>(c.size());
    out.push_back(from_vector<int64_t>(c, {len}, mask.device()));
  }
  return out;
}

Indexed apply_basic(const Tensor& x, const py::object& key) {
  py::tuple items = py::isinstance<py::tuple>(key) ? key.cast<py::tuple>() : py::make_tuple(key);
  // How many axes of x the key consumes (None and ... consume none; a bool mask consumes its rank).
  int64_t consumed = 0;
  bool ellipsis = false;
  for (const auto& it : items) {
    if (it.is_none()) continue;
    if (it.is(py::ellipsis())) {
      TESSERA_CHECK(!ellipsis, "index", "an index can only have a single ellipsis ('...')");
      ellipsis = true;
      continue;
    }
    if (py::isinstance<Tensor>(it) && it.cast<const Tensor&>().dtype() == DType::boolean)
      consumed += std::max<int64_t>(1, it.cast<const Tensor&>().dim());
    else ++consumed;
  }
  TESSERA_CHECK(consumed <= x.dim(), "index", "too many indices for a tensor of dimension ", x.dim(), " (shape ", shape_str(x.shape()),
                ")");
  Indexed r{x, {}, {}};
  int64_t axis = 0;
  for (const auto& it : items) {
    if (it.is_none()) {
      r.view = r.view.unsqueeze(axis++);
    } else if (it.is(py::ellipsis())) {
      axis += x.dim() - consumed;
    } else if (py::isinstance<py::slice>(it)) {
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(it.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      TESSERA_CHECK(step > 0, "index", "slice step must be positive, got ", step);
      const int64_t len = r.view.size(axis);
      PySlice_AdjustIndices(len, &start, &stop, step);
      r.view = r.view.slice(axis++, start, std::max<int64_t>(start, stop), step);
    } else if (py::isinstance<py::bool_>(it) || !is_index_tensor(it)) {
      if (py::isinstance<py::bool_>(it)) {  // x[True] adds an axis; x[False] an empty one
        r.view = r.view.unsqueeze(axis);
        if (!it.cast<bool>()) r.view = r.view.slice(axis, 0, 0);
        ++axis;
        continue;
      }
      int64_t i = py::int_(py::reinterpret_borrow<py::object>(it)).cast<int64_t>();
      const int64_t len = r.view.size(axis);
      TESSERA_CHECK(i >= -len && i < len, "index", "index ", i, " is out of bounds for dimension ", axis, " with size ", len);
      r.view = r.view.select(axis, i < 0 ? i + len : i);
    } else {
      Tensor t =
          py::isinstance<Tensor>(it) ? it.cast<Tensor>() : tensor_from_py(py::reinterpret_borrow<py::object>(it), py::none(), x.device());
      if (t.dtype() == DType::boolean) {
        for (int64_t d = 0; d < t.dim(); ++d)
          TESSERA_CHECK(t.size(d) == r.view.size(axis + d), "index", "the shape of the mask ", shape_str(t.shape()),
                        " does not match the shape of the indexed tensor ", shape_str(r.view.shape()), " at axis ", axis + d);
        for (Tensor& col : mask_to_indices(t)) {
          r.axes.push_back(axis++);
          r.indices.push_back(col);
        }
        if (t.dim() == 0) {  // a 0-d mask: adds an axis of 1 (true) or 0 (false)
          r.view = r.view.unsqueeze(axis);
          r.axes.push_back(axis++);
          r.indices.push_back(zeros({t.item<bool>() ? 1 : 0}, DType::i64, x.device()));
        }
      } else {
        TESSERA_CHECK(is_integer(t.dtype()), "index", "tensors used as indices must be integer or bool, got ", dtype_name(t.dtype()));
        r.axes.push_back(axis++);
        r.indices.push_back(t.to(x.device(), DType::i64));
      }
    }
  }
  return r;
}

/** The order that brings the indexed axes to the front, and whether their result axes go
 *  back to where the first one was (adjacent index tensors, as PyTorch and NumPy). */
std::vector<int64_t> front_order(const Indexed& r) {
  std::vector<int64_t> order(r.axes);
  for (int64_t d = 0; d < r.view.dim(); ++d)
    if (std::find(r.axes.begin(), r.axes.end(), d) == r.axes.end()) order.push_back(d);
  return order;
}
bool adjacent(const Indexed& r) {
  for (size_t i = 1; i < r.axes.size(); ++i)
    if (r.axes[i] != r.axes[i - 1] + 1) return false;
  return true;
}

/** Broadcast index tensors with negative entries wrapped, bounds checked. */
std::vector<Tensor> prepared_indices(const Indexed& r, Shape& bshape) {
  bshape = {};
  for (const Tensor& t : r.indices) {
    Shape a = bshape, b = t.shape();
    const size_t n = std::max(a.size(), b.size());
    Shape out(n, 1);
    for (size_t i = 0; i < n; ++i) {
      const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())], db = i < n - b.size() ? 1 : b[i - (n - b.size())];
      TESSERA_CHECK(da == db || da == 1 || db == 1, "index",
                    "shape mismatch: indexing tensors could not be broadcast together with shapes ", shape_str(a), " and ", shape_str(b));
      out[i] = da == 1 ? db : da;
    }
    bshape = out;
  }
  std::vector<Tensor> out;
  for (size_t k = 0; k < r.indices.size(); ++k) {
    const int64_t len = r.view.size(r.axes[k]);
    Tensor idx = r.indices[k];
    if (idx.numel() > 0) {
      // Both bounds in one transfer: one host sync per index tensor, not two.
      const Tensor bounds = cat({amin(idx).reshape({1}), amax(idx).reshape({1})}, 0).to(DType::i64).to(kCPU);
      const int64_t lo = bounds.data<int64_t>()[0], hi = bounds.data<int64_t>()[1];
      TESSERA_CHECK(lo >= -len && hi < len, "index", "index ", lo < -len ? lo : hi, " is out of bounds for dimension ", r.axes[k],
                    " with size ", len);
    }
    out.push_back(broadcast_to(where(lt(idx, Scalar(0)), add(idx, Scalar(len)), idx), bshape));
  }
  return out;
}

Tensor getitem(const Tensor& x, const py::object& key) {
  Indexed r = apply_basic(x, key);
  if (r.indices.empty()) return r.view;
  py::gil_scoped_release nogil;
  Shape bshape;
  std::vector<Tensor> idx = prepared_indices(r, bshape);
  const auto k = static_cast<int64_t>(idx.size());
  Tensor front = r.view.permute(front_order(r));
  Shape rest(front.shape().begin() + k, front.shape().end());
  // One linear index into the flattened indexed axes, then one index_select.
  Tensor linear = idx[0];
  for (int64_t j = 1; j < k; ++j) linear = add(mul(linear, Scalar(front.size(j))), idx[static_cast<size_t>(j)]);
  Shape flat_shape{-1};
  flat_shape.insert(flat_shape.end(), rest.begin(), rest.end());
  Tensor picked = index_select(front.reshape(flat_shape), 0, linear.reshape({-1}));
  Shape out_shape = bshape;
  out_shape.insert(out_shape.end(), rest.begin(), rest.end());
  Tensor out = picked.reshape(out_shape);
  if (adjacent(r) && r.axes[0] != 0) {  // the broadcast axes go where the first index stood
    const auto nb = static_cast<int64_t>(bshape.size()), first = r.axes[0];
    std::vector<int64_t> order;
    for (int64_t d = 0; d < first; ++d) order.push_back(nb + d);
    for (int64_t d = 0; d < nb; ++d) order.push_back(d);
    for (int64_t d = nb + first; d < out.dim(); ++d) order.push_back(d);
    out = out.permute(order);
  }
  return out;
}

void setitem(Tensor& x, const py::object& key, const py::object& value) {
  Indexed r = apply_basic(x, key);
  Tensor v = py::isinstance<Tensor>(value) ? value.cast<Tensor>() : Tensor();
  std::optional<Scalar> s;
  if (!v.defined()) {
    if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) s = value.cast<Scalar>();
    else v = tensor_from_py(value, py::cast(x.dtype()), x.device());
  }
  py::gil_scoped_release nogil;
  if (r.indices.empty()) {
    if (s) r.view.fill_(s->to_double());
    else r.view.copy_(v);
    return;
  }
  Shape bshape;
  std::vector<Tensor> idx = prepared_indices(r, bshape);
  Tensor front = r.view.permute(front_order(r));
  const auto k = static_cast<int64_t>(idx.size());
  Shape target = bshape;
  target.insert(target.end(), front.shape().begin() + k, front.shape().end());
  Tensor values = s ? full(target, *s, x.dtype(), x.device()) : v.to(x.device(), x.dtype());
  if (!s && adjacent(r) && r.axes[0] != 0) {
    // value broadcasts against getitem's layout (broadcast axes at the first index): bring them to the front.
    const auto nb = static_cast<int64_t>(bshape.size()), first = r.axes[0];
    Shape as_get(front.shape().begin() + k, front.shape().begin() + k + first);
    as_get.insert(as_get.end(), bshape.begin(), bshape.end());
    as_get.insert(as_get.end(), front.shape().begin() + k + first, front.shape().end());
    values = broadcast_to(values, as_get);
    std::vector<int64_t> order;
    for (int64_t d = 0; d < nb; ++d) order.push_back(first + d);
    for (int64_t d = 0; d < first; ++d) order.push_back(d);
    for (int64_t d = first + nb; d < values.dim(); ++d) order.push_back(d);
    values = values.permute(order);
  }
  front.copy_(index_put(front, idx, broadcast_to(values, target)));
}

}  // namespace

void bind_indexing(py::class_<Tensor>& cls) {
  cls.def("__getitem__", &getitem).def("__setitem__", &setitem).def("__iter__", [](const Tensor& t) {
    TESSERA_CHECK(t.dim() > 0, "iter", "iteration over a 0-d tensor");
    py::list rows;
    for (int64_t i = 0; i < t.size(0); ++i) rows.append(t.select(0, i));
    return py::iter(rows);
  });
}

}  // namespace tessera::python
