// Backend::supports(OpId, DType): what it answers, what the dispatcher does with a refused dtype
// (the CPU fallback or a NotImplemented naming op, backend and dtype), and the gap it closes on
// the device backends (scatter_add of 16-bit floats and 8-bit integers, accumulated wider).
#include <algorithm>
#include <cmath>

#include "support/checks.h"

using namespace tessera;

namespace {

const DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean};

}  // namespace

TEST_CASE("DTypeSet: membership, set algebra and names") {
  CHECK(kFloatDTypes.contains(DType::bf16));
  CHECK_FALSE(kFloatDTypes.contains(DType::i32));
  CHECK((kNumericDTypes - kFloatDTypes) == DTypeSet{DType::i8, DType::u8, DType::i32, DType::i64});
  CHECK(kIntegralDTypes.contains(DType::boolean));
  CHECK((kFloatDTypes & kIntegralDTypes).empty());
  CHECK(DTypeSet{DType::bf16, DType::f16}.str() == "float16, bfloat16");
  CHECK(DTypeSet{}.str() == "none");
}

TEST_CASE("the CPU backend supports exactly what each op takes, and has no gaps") {
  const Backend& cpu = backend_for(DeviceType::cpu);
  CHECK(op_gaps(cpu).empty());
  for (int i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<OpId>(i);
    CAPTURE(op_name(op));
    CHECK_FALSE(op_dtypes(op).empty());
    for (DType dt : kAll) CHECK(cpu.supports(op, dt) == op_dtypes(op).contains(dt));
  }
  CHECK(cpu.supports(OpId::Exp, DType::bf16));
  CHECK_FALSE(cpu.supports(OpId::Exp, DType::i32));  // the front-end computes it in float32
  CHECK(cpu.supports(OpId::BitwiseAnd, DType::boolean));
  CHECK_FALSE(cpu.supports(OpId::Conv2d, DType::i64));
}

TEST_CASE("kernel_dtype names the operand that selects the kernel") {
  const Tensor cond = from_vector<float>({1, 0}, {2}).to(DType::boolean);
  const Tensor a = from_vector<float>({1, 2}, {2}), idx = from_vector<int64_t>({0, 1}, {2});
  const Tensor h = a.to(DType::f16);
  const Tensor where_in[3] = {cond, a, a};
  CHECK(kernel_dtype(OpId::Where, where_in, std::span<const Tensor>(&a, 1)) == DType::f32);
  const Tensor scatter_in[2] = {idx, a};
  CHECK(kernel_dtype(OpId::ScatterAdd, scatter_in, std::span<const Tensor>(&h, 1)) == DType::f16);
  CHECK(kernel_dtype(OpId::Fill, {}, std::span<const Tensor>(&h, 1)) == DType::f16);
  CHECK(kernel_dtype(OpId::Exp, std::span<const Tensor>(&h, 1), std::span<const Tensor>(&a, 1)) == DType::f16);
}

TEST_CASE("a refused dtype is a NotImplemented naming op, backend and dtype, or the CPU fallback's") {
  Backend* emu = find_backend(DeviceType::emulated);
  if (!emu || emu->device_count() == 0) {
    MESSAGE("no emulated backend in this build: the test needs a non-cpu backend to refuse a dtype");
    return;
  }
  const Device dev(DeviceType::emulated, 0);
  // An emulated exp that takes float32 only, as a backend declares it in its kernel table.
  const KernelTable::Refusal saved = emu->replace_refusal(OpId::Exp, {kFloatDTypes - DTypeSet{DType::f32}, "float32 only in this test"});
  CHECK(emu->supports(OpId::Exp, DType::f32));
  CHECK_FALSE(emu->supports(OpId::Exp, DType::f64));
  const std::vector<OpGap> gaps = op_gaps(*emu);
  const auto exp_gap = std::find_if(gaps.begin(), gaps.end(), [](const OpGap& g) { return g.op == OpId::Exp; });
  REQUIRE(exp_gap != gaps.end());
  CHECK(exp_gap->dtypes == DTypeSet{DType::f64, DType::f16, DType::bf16});
  CHECK(exp_gap->why == "float32 only in this test");

  const Tensor x32 = from_vector<float>({0, 1, 2}, {3}).to(dev);
  CHECK(exp(x32).to(kCPU).to_vector<float>()[1] == doctest::Approx(std::exp(1.0)).epsilon(1e-6));
  const Tensor x64 = from_vector<double>({0, 1, 2}, {3}).to(dev);
  CHECK_THROWS_WITH_AS(exp(x64),
                       "exp: emulated has no kernel for float64 (float32 only in this test) (TESSERA_CPU_FALLBACK=1 runs it on the cpu)",
                       NotImplemented);
  set_cpu_fallback(true);
  const int64_t before = cpu_fallback_count();
  const Tensor y = exp(x64);
  set_cpu_fallback(false);
  emu->replace_refusal(OpId::Exp, saved);
  CHECK(y.device() == dev);
  CHECK(y.dtype() == DType::f64);
  CHECK(y.to(kCPU).to_vector<double>()[2] == doctest::Approx(std::exp(2.0)).epsilon(1e-12));
  CHECK(cpu_fallback_count() == before + 1);
  CHECK(emu->supports(OpId::Exp, DType::f64));
}

TEST_CASE("scatter_add of 16-bit floats and 8-bit integers on a device without their atomics accumulates wider") {
  const Tensor index = from_vector<int64_t>({0, 2, 0, 0, 1, 2, 0}, {7});
  for (Backend* b : registered_backends()) {
    if (b->device_count() == 0) continue;
    const Device dev(b->device_type(), 0);
    CAPTURE(dev.str());
    if (dev.type != DeviceType::cpu) CHECK(b->supports(OpId::ScatterAdd, DType::f32));
    for (DType dt : {DType::f16, DType::bf16, DType::i8, DType::u8, DType::f32}) {
      CAPTURE(dt);
      // Values whose sum wraps in 8 bits, and whose 16-bit float partial sums would round.
      const Tensor src = from_vector<double>({100, 3, 100, 100, 7, 5, 0.75}, {7}).to(dt);
      Tensor want = zeros({3}, dt);
      scatter_add_(want, 0, index, src);
      Tensor got = zeros({3}, dt, dev);
      scatter_add_(got, 0, index.to(dev), src.to(dev));
      // The CPU kernel accumulates in the compute type (float32 for 16-bit floats), the devices
      // in their wide copy: the same sums.
      CHECK(got.to(kCPU).to(DType::f64).to_vector<double>() == want.to(DType::f64).to_vector<double>());
    }
    // The backward of index_select (an embedding's) in bfloat16.
    Tensor table = zeros({5, 4}, DType::bf16, dev);
    table.set_requires_grad();
    const Tensor rows = index_select(table, 0, from_vector<int64_t>({1, 1, 3}, {3}).to(dev));
    sum(rows).backward();
    const auto g = table.grad().to(kCPU).to(DType::f32).to_vector<float>();
    CHECK(g[4] == 2.0f);   // row 1 picked twice
    CHECK(g[12] == 1.0f);  // row 3 once
    CHECK(g[0] == 0.0f);
  }
  const Backend* emu = find_backend(DeviceType::emulated);
  if (emu) {
    CHECK_FALSE(emu->supports(OpId::ScatterAdd, DType::f16));
    CHECK_FALSE(emu->supports(OpId::ScatterAdd, DType::i8));
    CHECK(emu->supports(OpId::ScatterAdd, DType::i64));
  }
}
