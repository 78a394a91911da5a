// Views share storage and see each other's writes; copies do not. Join/split ops.
#include "support/checks.h"

using namespace tessera;
using namespace tessera::test;

namespace {
Tensor iota(const Shape& shape, DType dt = DType::f32) {
  return arange(0.0, static_cast<double>(numel(shape)), 1.0, dt, device()).reshape(shape);
}
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
}  // namespace

TEST_CASE("views share storage: reshape, view, permute, transpose, slice, expand, squeeze, flatten") {
  Tensor x = iota({2, 3, 4});
  const Tensor r = x.reshape({6, 4});
  CHECK(r.storage() == x.storage());
  CHECK(x.view({4, -1}).shape() == Shape{4, 6});
  const Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Strides{1, 12, 4});
  TESSERA_CHECK_CLOSE(p, ref::permute(to_ref(x), {2, 0, 1}));
  const Tensor s = x.slice(2, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(values(s.select(0, 1).select(0, 2)) == std::vector<float>{21, 23});
  CHECK(values(x.slice(1, -2, 100)) .size() == 16);
  Tensor col = x.select(2, 0);
  col.fill_(-1);
  CHECK(values(x)[4] == -1.0f);  // writes through a view land in the base tensor
  const Tensor e = iota({3, 1}).expand({3, 5});
  CHECK(e.strides()[1] == 0);
  CHECK(values(e)[7] == 1.0f);
  CHECK(iota({1, 3, 1}).squeeze().shape() == Shape{3});
  CHECK(iota({1, 3, 1}).squeeze(0).shape() == Shape{3, 1});
  CHECK(iota({3}).unsqueeze(-1).shape() == Shape{3, 1});
  CHECK(x.flatten(1).shape() == Shape{2, 12});
  CHECK(x.narrow(1, 1, 2).shape() == Shape{2, 2, 4});
}

TEST_CASE("reshape copies only when a view is impossible and view refuses") {
  const Tensor x = iota({3, 4});
  const Tensor t = x.mT();  // [4, 3], non-contiguous
  CHECK_FALSE(t.is_contiguous());
  TESSERA_CHECK_THROWS_WITH(t.view({12}), "view: shape [12] is incompatible");
  const Tensor flat = t.reshape({12});
  CHECK(flat.storage() != x.storage());
  CHECK(values(flat) == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  // Splitting a dimension of a transposed tensor is still a view.
  CHECK(t.reshape({2, 2, 3}).storage() == x.storage());
  const Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(values(c) == values(flat));
  const Tensor k = x.clone();
  CHECK(k.storage() != x.storage());
  TESSERA_CHECK_THROWS_WITH(x.reshape({5, -1}), "reshape: cannot reshape [3, 4]");
}

TEST_CASE("cat, stack, split and chunk") {
  const Tensor a = iota({2, 3}), b = iota({1, 3}, DType::i32);
  const Tensor c = cat({a, b}, 0);
  CHECK(c.shape() == Shape{3, 3});
  CHECK(c.dtype() == DType::f32);
  CHECK(values(c) == std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1, 2});
  CHECK(values(cat({a, a.mT().contiguous().mT()}, 1)) == std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  const Tensor s = stack({a, a}, 1);
  CHECK(s.shape() == Shape{2, 2, 3});
  CHECK(stack({a, a}, -1).shape() == Shape{2, 3, 2});
  const auto parts = split(iota({7, 2}), 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].shape() == Shape{1, 2});
  CHECK(parts[1].storage() == parts[0].storage());
  const auto sized = split(iota({6}), std::vector<int64_t>{1, 2, 3});
  CHECK(values(sized[2]) == std::vector<float>{3, 4, 5});
  CHECK(chunk(iota({5}), 2).size() == 2);
  CHECK(chunk(iota({5}), 2)[1].size(0) == 2);
  TESSERA_CHECK_THROWS_WITH(cat({a, iota({2, 4})}, 0), "cat: shapes [2, 3] and [2, 4] differ outside axis 0");
  TESSERA_CHECK_THROWS_WITH(split(iota({6}), std::vector<int64_t>{1, 2}), "split: sizes [1, 2] sum to 3");
}

TEST_CASE("to(dtype), to(device), item and to_vector") {
  const Tensor x = from_vector<float>({1.5f, -2.25f}, {2}).to(device());
  CHECK(x.to(DType::f64).to_vector<double>() == std::vector<double>{1.5, -2.25});
  CHECK(x.to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, -2});
  CHECK(x.to(kCPU).device() == kCPU);
  CHECK(x.to(kCPU).to(device()).to_vector<float>() == x.to_vector<float>());
  CHECK(x.select(0, 1).item<double>() == -2.25);
  TESSERA_CHECK_THROWS_WITH(x.item<float>(), "item: expected a tensor with one element, got shape [2]");
}

TEST_CASE("pinned host staging and asynchronous uploads") {
  const Tensor host = arange(0.0, 6.0).reshape({2, 3}).mT();  // non-contiguous on purpose
  const Tensor pinned = pin_memory(host, device());
  CHECK(pinned.device() == kCPU);
  CHECK(pinned.is_contiguous());
  CHECK(pinned.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  auto stream = backend_for(device().type).new_stream(device().index);
  const Tensor up = to_device_async(pinned, device(), *stream);
  stream->synchronize();
  CHECK(up.device() == device());
  CHECK(up.to_vector<float>() == pinned.to_vector<float>());
  TESSERA_CHECK_THROWS_WITH(to_device_async(host, device(), *stream), "to_device_async: expected a contiguous cpu tensor");
  // empty_pinned: host tensors from a pool; a buffer that died is handed out again.
  const void* first = nullptr;
  {
    const Tensor staging = empty_pinned({3, 5}, DType::f32, device());
    CHECK(staging.device() == kCPU);
    CHECK(staging.shape() == Shape{3, 5});
    first = staging.data_ptr();
  }
  const Tensor again = empty_pinned({3, 5}, DType::f32, device());
  // Backends without pinned memory (cpu, kokkos) give plain allocations, which the heap may or may
  // not hand back: only the pool's reuse is asserted.
  Backend& backend = backend_for(device().type);
  if (void* probe = backend.allocate_pinned(1)) {
    backend.free_pinned(probe);
    CHECK(again.data_ptr() == first);
  }
}

TEST_CASE("ops under a StreamGuard run on that stream and match the default stream") {
  auto stream = backend_for(device().type).new_stream(device().index);
  const Tensor a = arange(0.0, 64.0).reshape({8, 8}).to(device());
  const Tensor expected = matmul(a, a) + 1.0;
  Tensor on_stream;
  {
    StreamGuard guard(*stream);
    on_stream = matmul(a, a) + 1.0;  // allocated, computed and read back on `stream`
    CHECK(on_stream.to_vector<float>() == expected.to_vector<float>());
    record_stream(a, *stream);  // a came from the default stream
  }
  stream->synchronize();
  synchronize(device());
  CHECK(on_stream.to_vector<float>() == expected.to_vector<float>());
  CHECK(memory_stats(device()).pending_bytes == 0);  // synchronize released blocks held for other streams
  if (device() != kCPU) {
    TESSERA_CHECK_THROWS_WITH(record_stream(a.to(kCPU), *stream), "record_stream: tensor on cpu:0 but stream on");
  }
}

TEST_CASE("Stream::wait orders one stream's work after an event recorded on another") {
  Backend& backend = backend_for(device().type);
  auto producer = backend.new_stream(device().index), consumer = backend.new_stream(device().index);
  Tensor x = zeros({3, 5}, DType::f32, device()), y;
  {
    StreamGuard guard(*producer);
    x.fill_(3.0);
    record_stream(x, *producer);
  }
  auto ready = backend.new_event(device().index);
  ready->record(*producer);
  {
    StreamGuard guard(*consumer);
    consumer->wait(*ready);
    y = add(x, 1.0);
    record_stream(x, *consumer);
  }
  consumer->synchronize();
  CHECK(y.to_vector<float>() == std::vector<float>(15, 4.0f));
  synchronize(device());
}
