// index_select, gather, scatter_add, take_along_axis, one_hot, embedding.
#include "support/checks.h"
#include "support/gradcheck.h"

using namespace tessera;
using namespace tessera::test;

namespace {
using V = std::vector<Tensor>;
std::vector<int64_t> as_indices(const Tensor& t) { return t.to(DType::i64).to_vector<int64_t>(); }
}  // namespace

TEST_CASE("index_select along every axis with int32 and int64 indices") {
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f16, DType::i64, DType::boolean}) {
    for (Layout layout : kLayouts) {
      for (int64_t axis : {0, 1, 2}) {
        for (DType idt : {DType::i32, DType::i64}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(layout_name(layout));
          CAPTURE(axis);
          CAPTURE(dtype_name(idt));
          const Tensor x = make_input({4, 5, 3}, dt, ++seed, -9, 9, layout);
          Generator g(seed);
          const Tensor idx = randint(0, x.size(axis), {7}, idt, kCPU, &g).to(device());
          TESSERA_CHECK_CLOSE(index_select(x, axis, idx), ref::index_select(to_ref(x), axis, as_indices(idx)));
        }
      }
    }
  }
}

TEST_CASE("gather and take_along_axis") {
  uint64_t seed = 40;
  for (int64_t axis : {0, 1, -1}) {
    CAPTURE(axis);
    const Tensor x = make_input({4, 6}, DType::f32, ++seed, -1, 1, Layout::transposed);
    const int64_t a = axis < 0 ? axis + 2 : axis;
    Generator g(seed);
    Shape ishape = {3, 5};
    const Tensor idx = randint(0, x.size(a), ishape, DType::i64, kCPU, &g).to(device());
    TESSERA_CHECK_CLOSE(gather(x, axis, idx), ref::gather(to_ref(x), a, to_ref(idx)));
  }
  // take_along_axis broadcasts the index outside the axis: argsort-style top-1 selection.
  const Tensor x = make_input({3, 7}, DType::f32, 77);
  const Tensor best = argmax(x, 1, true);
  const Tensor picked = take_along_axis(x, best, 1);
  TESSERA_CHECK_CLOSE(picked, to_ref(amax(x, {1}, true)));
  const Tensor col = from_vector<int64_t>({0, 2}, {1, 2}).to(device());
  CHECK(take_along_axis(x, col, 1).shape() == Shape{3, 2});
}

TEST_CASE("scatter_add accumulates duplicate indices deterministically") {
  uint64_t seed = 90;
  for (DType dt : {DType::f32, DType::f64, DType::i32}) {
    for (int64_t axis : {0, 1}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(axis);
      const Tensor x = make_input({5, 4}, dt, ++seed, -3, 3);
      const Tensor src = make_input({6, 4}, dt, ++seed, -3, 3, Layout::strided);
      Generator g(seed);
      const Shape ishape = axis == 0 ? Shape{6, 3} : Shape{5, 4};
      const Tensor idx = randint(0, x.size(axis), ishape, DType::i64, kCPU, &g).to(device());
      const Tensor src_fit = axis == 0 ? src : src.narrow(0, 0, 5);
      const Tensor y = scatter_add(x, axis, idx, src_fit);
      TESSERA_CHECK_CLOSE(y, ref::scatter_add(to_ref(x), axis, to_ref(idx), to_ref(src_fit)), Tolerance{1e-5, 1e-5});
      CHECK(y.to_vector<double>() == scatter_add(x, axis, idx, src_fit).to_vector<double>());
    }
  }
}

TEST_CASE("scatter_add in deterministic mode: the line kernel matches the reference bit for bit run to run") {
  struct Deterministic {
    Deterministic() { set_deterministic(true); }
    ~Deterministic() { set_deterministic(false); }
  } const on;
  uint64_t seed = 190;
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    for (int64_t axis : {0, 1}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(axis);
      const Tensor x = make_input({7, 33}, dt, ++seed, -3, 3);
      const Tensor src = make_input({40, 33}, dt, ++seed, -3, 3, Layout::strided);
      Generator g(seed);
      // Many duplicates: 40 sources into 7 rows (axis 0), 33 into 33 columns (axis 1).
      const Shape ishape = axis == 0 ? Shape{40, 33} : Shape{7, 33};
      const Tensor idx = randint(0, x.size(axis), ishape, DType::i64, kCPU, &g).to(device());
      const Tensor src_fit = axis == 0 ? src : src.narrow(0, 0, 7);
      const Tensor y = scatter_add(x, axis, idx, src_fit);
      TESSERA_CHECK_CLOSE(y, ref::scatter_add(to_ref(x), axis, to_ref(idx), to_ref(src_fit)),
                          Tolerance{1e-5, 1e-5});
      CHECK(y.to_vector<double>() == scatter_add(x, axis, idx, src_fit).to_vector<double>());
    }
  }
  // The embedding gradient goes through it too.
  Tensor w = randn({5, 16}, DType::f32, device()).set_requires_grad();
  const Tensor ids = from_vector<int64_t>({0, 3, 3, 1, 3, 0, 4, 3}, {8}).to(device());
  sum(mul(embedding(w, ids), 2.0)).backward();
  const auto g = w.grad().to_vector<float>();
  CHECK(g[3 * 16] == 8.0f);  // row 3 picked four times, each with gradient 2
  CHECK(g[2 * 16] == 0.0f);
}

TEST_CASE("one_hot and embedding") {
  const Tensor labels = from_vector<int64_t>({2, 0, 3}, {3}).to(device());
  const Tensor oh = one_hot(labels, 4);
  CHECK(oh.dtype() == DType::i64);
  CHECK(oh.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1});
  CHECK(one_hot(labels, -1).shape() == Shape{3, 4});
  const Tensor w = make_input({10, 4}, DType::f32, 5);
  const Tensor ids = from_vector<int32_t>({1, 9, 1, 0, 3, 3}, {2, 3}).to(device());
  const Tensor e = embedding(w, ids);
  CHECK(e.shape() == Shape{2, 3, 4});
  ref::Ref want = ref::index_select(to_ref(w), 0, {1, 9, 1, 0, 3, 3});
  want.shape = {2, 3, 4};
  TESSERA_CHECK_CLOSE(e, want);
}

// Device backends validate indices in the kernel and raise at the next host sync (like a
// device-side assert), so each expression below ends with a copy to the host or a synchronize.
TEST_CASE("out-of-range indices throw naming the op and leave outputs untouched") {
  const Tensor x = zeros({3, 4}, DType::f32, device());
  const Tensor bad = from_vector<int64_t>({0, 3}, {2}).to(device());
  TESSERA_CHECK_THROWS_WITH(index_select(x, 0, bad).to(kCPU), "index_select: index 3 is out of range for axis 0 of size 3");
  const Tensor neg = from_vector<int64_t>({0, -1, 0, 0}, {1, 4}).to(device());
  TESSERA_CHECK_THROWS_WITH(gather(x, 0, neg).to(kCPU), "gather: index -1 is out of range");
  Tensor target = zeros({3, 4}, DType::f32, device());
  const Tensor idx = from_vector<int64_t>({0, 1, 2, 7}, {1, 4}).to(device());
  TESSERA_CHECK_THROWS_WITH(
      [&] {
        scatter_add_(target, 0, idx, ones({1, 4}, DType::f32, device()));
        synchronize(device());
      }(),
      "scatter_add: index 7");
  CHECK(sum(target).item<float>() == 0.0f);
  TESSERA_CHECK_THROWS_WITH(one_hot(from_vector<int64_t>({5}, {1}).to(device()), 3), "one_hot: labels must lie in [0, 3)");
  TESSERA_CHECK_THROWS_WITH(index_select(x, 0, from_vector<float>({0}, {1}).to(device())), "index_select: index must be int32 or int64");
  // The error is reported once: the next sync is clean.
  CHECK(sum(gather(x, 0, from_vector<int64_t>({2, 0, 1, 0}, {1, 4}).to(device()))).item<float>() == 0.0f);
}

TEST_CASE("index validation makes no host sync of its own") {
  const Tensor x = arange(12, DType::f32, device()).reshape({3, 4});
  const Tensor idx = from_vector<int64_t>({2, 0, 1, 2}, {1, 4}).to(device());
  Tensor acc = zeros({3, 4}, DType::f32, device());
  reset_host_sync_stats();
  const Tensor g = gather(x, 0, idx);
  const Tensor s = index_select(x, 1, from_vector<int32_t>({3, 0}, {2}).to(kCPU).to(device()));
  scatter_add_(acc, 0, idx, ones({1, 4}, DType::f32, device()));
  const Tensor ce = cross_entropy(x, from_vector<int64_t>({3, 0, 1}, {3}).to(device()));
  const HostSyncStats stats = host_sync_stats();
  int64_t in_ops = 0;
  for (const auto& [op, n] : stats.by_op) in_ops += op == "(host)" ? 0 : n;
  CHECK(in_ops == 0);  // only the host-side uploads of the index tensors may sync
  CHECK(g.to_vector<float>()[0] == 8.0f);
  CHECK(s.to_vector<float>()[0] == 3.0f);
  CHECK(sum(acc).item<float>() == 4.0f);
  CHECK(std::isfinite(ce.item<float>()));
  TESSERA_CHECK_THROWS_WITH(cross_entropy(x, from_vector<int64_t>({3, 4, 1}, {3}).to(device())).item<float>(),
                            "cross_entropy: target 4 at position 1 is out of range for 4 classes");
}

TEST_CASE("index_put assigns and accumulates at advanced indices, as PyTorch's index_put") {
  const Tensor x = arange(0, 12, 1, DType::f32, device()).reshape({3, 4});
  const Tensor rows = from_vector<int64_t>({0, 2, 0}, {3}).to(device()), cols = from_vector<int64_t>({1, 3, 1}, {3}).to(device());
  const Tensor vals = from_vector<float>({10, 20, 30}, {3}).to(device());
  // Accumulate: the repeated (0, 1) adds both values.
  std::vector<float> want = x.to_vector<float>();
  want[1] += 40, want[11] += 20;
  CHECK(index_put(x, {rows, cols}, vals, true).to_vector<float>() == want);
  // Assignment: a whole row through one index (negative from the end), a broadcast scalar.
  const Tensor last = index_put(x, {from_vector<int64_t>({-1}, {1}).to(device())}, full({}, 5.0, DType::f32, device()));
  CHECK(last.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 5, 5, 5, 5});
  // Broadcast index tensors: rows [2, 1] x cols [1, 2] pick a 2 x 2 block.
  const Tensor r2 = from_vector<int64_t>({0, 2}, {2, 1}).to(device()), c2 = from_vector<int64_t>({1, 3}, {1, 2}).to(device());
  CHECK(index_put(x, {r2, c2}, from_vector<float>({-1, -2, -3, -4}, {2, 2}).to(device())).to_vector<float>() ==
        std::vector<float>{0, -1, 2, -2, 4, 5, 6, 7, 8, -3, 10, -4});
  TESSERA_CHECK_GRAD([&](const V& in) { return index_put(in[0], {rows.to(in[0].device()), cols.to(in[0].device())}, in[1], true); },
                     {grad_input({3, 4}, 90), grad_input({3}, 91)});
  // An index outside its axis is refused, never landing on another row.
  TESSERA_CHECK_THROWS_WITH(index_put(x, {from_vector<int64_t>({0}, {1}).to(device()), from_vector<int64_t>({4}, {1}).to(device())},
                                      full({}, 1.0, DType::f32, device())).to(kCPU),
                            "out of range");
  TESSERA_CHECK_THROWS_WITH(index_put(x, {rows, cols, rows}, vals), "index_put: needs 1 to 2 index tensors for input [3, 4], got 3");
  TESSERA_CHECK_THROWS_WITH(index_put(x, {rows, cols}, from_vector<float>({1, 2}, {2}).to(device())), "index_put");
}
