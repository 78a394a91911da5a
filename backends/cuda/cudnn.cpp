// cuDNN convolutions on the CUDA backend (built when cuDNN is found; TESSERA_CUDA_CONV=tessera
// keeps Tessera's implicit-GEMM kernels). conv2d forward, input-grad and weight-grad map to
// cudnnConvolutionForward / BackwardData / BackwardFilter (the v7-style API, deprecated in cuDNN
// 9 but complete), with the fastest *deterministic* algorithm whose workspace fits 256 MiB, so
// results do not change from run to run. The workspace comes from Tessera's caching allocator
// and every call is queued on the thread's current stream. Dense NCHW f32, f64, f16 and bf16 go
// to cuDNN (16-bit with f32 accumulation on the tensor cores: mixed-precision CNNs ran 3x slower
// than f32 on an H200 on the own kernels); other layouts, and geometries or types cuDNN refuses
// (BAD_PARAM / NOT_SUPPORTED from the algorithm query, cached per geometry), fall back to the own
// kernels. f32 convolutions run with CUDNN_FMA_MATH (strict f32) unless set_allow_tf32(true):
// cuDNN's default math lets sm_80+ use TF32 tensor cores. The algorithm chosen for a geometry is
// cached, so the heuristic query runs once per shape.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "conv_geometry.h"
#include "handle_cache.h"
#include "tessera/backend/kernel.h"
#include "tessera/ops/creation.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"

namespace tessera {
namespace gpu::cuda {
cudaStream_t current_vendor_stream();  // backends/gpu/device_backend.cu
void add_capture_prepare_hook(void (*hook)(int device));  // backends/gpu/device_backend.cu
}

namespace cudnn {
namespace {

constexpr size_t kMaxWorkspace = size_t{256} << 20;
KernelFn g_own_fwd = nullptr, g_own_dgrad = nullptr, g_own_wgrad = nullptr;

void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw Error(detail::concat(what, " failed: ", cudnnGetErrorString(s)));
}
// An algorithm query that cuDNN answers "not for this geometry / type": the own kernel runs.
bool refused(cudnnStatus_t s) { return s == CUDNN_STATUS_BAD_PARAM || s == CUDNN_STATUS_NOT_SUPPORTED; }

// The calling thread's handle for the device and its current stream (handle_cache.h).
cudnnHandle_t handle(int device) {
  return cuda_libs::cached_handle<cudnnHandle_t>(device, gpu::cuda::current_vendor_stream(), [](int, cudaStream_t stream) {
    cudnnHandle_t h = nullptr;
    check(cudnnCreate(&h), "cudnnCreate");
    check(cudnnSetStream(h, stream), "cudnnSetStream");
    return h;
  });
}

// The algorithm (and its workspace size) chosen for one direction and geometry; -1 = none usable.
struct Choice {
  int algo = -1;
  size_t memory = 0;
};
enum class Dir { fwd, dgrad, wgrad };

// Looks up (or computes with `query`, once) the choice for `dir` and the call's geometry.
template <class Query> Choice cached_choice(Dir dir, const Shape& xs, const Shape& ws, const Shape& ys, const OpAttrs& a, DType dt, int device,
                                            Query query) {
  using Key = std::vector<int64_t>;
  static std::mutex m;
  static std::map<Key, Choice> cache;
  Key key{static_cast<int64_t>(dir), static_cast<int64_t>(dt), device, allow_tf32(), a.groups};
  for (const Shape* s : {&xs, &ws, &ys}) key.insert(key.end(), s->begin(), s->end());
  for (const auto* p : {&a.padding, &a.stride, &a.dilation}) key.insert(key.end(), p->begin(), p->end());
  {
    std::lock_guard lock(m);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const Choice c = query();
  std::lock_guard lock(m);
  return cache.emplace(key, c).first->second;
}

// The descriptors of one convolution: x [N,C,H,W], w [O,C/g,kh,kw], y [N,O,Ho,Wo].
struct Conv {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  Conv(const Shape& xs, const Shape& ws, const Shape& ys, const OpAttrs& a, DType dt) {
    type = dt == DType::f64 ? CUDNN_DATA_DOUBLE : dt == DType::bf16 ? CUDNN_DATA_BFLOAT16 : dt == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    const cudnnDataType_t compute = type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;  // 16-bit: f32 accumulation
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    check(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, i(xs[0]), i(xs[1]), i(xs[2]), i(xs[3])), "x descriptor");
    check(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, i(ys[0]), i(ys[1]), i(ys[2]), i(ys[3])), "y descriptor");
    check(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, i(ws[0]), i(ws[1]), i(ws[2]), i(ws[3])), "w descriptor");
    check(cudnnSetConvolution2dDescriptor(conv, i(a.padding[0]), i(a.padding[1]), i(a.stride[0]), i(a.stride[1]), i(a.dilation[0]),
                                          i(a.dilation[1]), CUDNN_CROSS_CORRELATION, compute),
          "convolution descriptor");
    check(cudnnSetConvolutionGroupCount(conv, i(a.groups)), "cudnnSetConvolutionGroupCount");
    // Strict f32 unless TF32 was allowed: cuDNN's default math may use TF32 tensor cores on sm_80+.
    const cudnnMathType_t math = dt == DType::f32 && !allow_tf32() ? CUDNN_FMA_MATH
                                 : (dt == DType::f16 || dt == DType::bf16) ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH;
    check(cudnnSetConvolutionMathType(conv, math), "cudnnSetConvolutionMathType");
  }
  ~Conv() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
  Conv(const Conv&) = delete;
  Conv& operator=(const Conv&) = delete;
};

// The first (fastest) deterministic algorithm that succeeded, fits the workspace budget and
// keeps the math type asked for (FMA_MATH when TF32 is not allowed).
template <class Perf> Choice pick(const Perf* perf, int n, bool strict_f32) {
  for (int k = 0; k < n; ++k) {
    if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].determinism == CUDNN_DETERMINISTIC && perf[k].memory <= kMaxWorkspace &&
        (!strict_f32 || perf[k].mathType == CUDNN_FMA_MATH)) {
      return {static_cast<int>(perf[k].algo), perf[k].memory};
    }
  }
  return {};
}

bool usable(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    const DType dt = t->dtype();
    if (dt != (*ts.begin())->dtype()) return false;  // one data type for every operand
    if (!t->is_contiguous() || !(dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16) || t->numel() == 0) return false;
    for (int64_t s : t->shape()) {
      if (s > INT32_MAX) return false;
    }
  }
  return true;
}

Tensor workspace(size_t bytes, Device device) { return empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DType::u8, device); }

struct Scale {
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
  const void* one(cudnnDataType_t t) const { return t == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(cudnnDataType_t t) const { return t == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d0) : &f0; }
};

void forward(const KernelCall& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &bias = c.inputs[2];
  Tensor& y = c.outputs[0];
  if (!usable({&x, &w, &y}) || (bias.defined() && !usable({&bias})) ||
      !geometry_consistent(x.shape(), w.shape(), y.shape(), c.attrs.padding, c.attrs.stride, c.attrs.dilation)) {
    return g_own_fwd(c);
  }
  const int device = y.device().index;
  const cuda_libs::DeviceGuard guard(device, "cudnn");
  const Conv d(x.shape(), w.shape(), y.shape(), c.attrs, x.dtype());
  cudnnHandle_t h = handle(device);
  const Choice best = cached_choice(Dir::fwd, x.shape(), w.shape(), y.shape(), c.attrs, x.dtype(), device, [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    const cudnnStatus_t st = cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf);
    if (refused(st)) return Choice{};
    check(st, "cudnnGetConvolutionForwardAlgorithm_v7");
    return pick(perf, found, x.dtype() == DType::f32 && !allow_tf32());
  });
  if (best.algo < 0) return g_own_fwd(c);
  const Tensor ws = workspace(best.memory, y.device());
  const Scale s;
  check(cudnnConvolutionForward(h, s.one(d.type), d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv,
                                static_cast<cudnnConvolutionFwdAlgo_t>(best.algo), ws.data_ptr(), best.memory,
                                s.zero(d.type), d.y, y.data_ptr()),
        "cudnnConvolutionForward");
  if (bias.defined()) {
    cudnnTensorDescriptor_t b = nullptr;
    check(cudnnCreateTensorDescriptor(&b), "cudnnCreateTensorDescriptor");
    const cudnnStatus_t st = cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, d.type, 1, static_cast<int>(bias.numel()), 1, 1);
    const cudnnStatus_t add = st == CUDNN_STATUS_SUCCESS ? cudnnAddTensor(h, s.one(d.type), b, bias.data_ptr(), s.one(d.type), d.y, y.data_ptr()) : st;
    cudnnDestroyTensorDescriptor(b);
    if (refused(add)) return g_own_fwd(c);  // a cuDNN without this type's bias add: the own kernel redoes y
    check(add, "cudnnAddTensor (bias)");
  }
}

void input_grad(const KernelCall& c) {
  const Tensor &gy = c.inputs[0], &w = c.inputs[1];
  Tensor& gx = c.outputs[0];
  if (!usable({&gy, &w, &gx}) || !geometry_consistent(gx.shape(), w.shape(), gy.shape(), c.attrs.padding, c.attrs.stride, c.attrs.dilation)) {
    return g_own_dgrad(c);
  }
  const int device = gx.device().index;
  const cuda_libs::DeviceGuard guard(device, "cudnn");
  const Conv d(gx.shape(), w.shape(), gy.shape(), c.attrs, gx.dtype());
  cudnnHandle_t h = handle(device);
  const Choice best = cached_choice(Dir::dgrad, gx.shape(), w.shape(), gy.shape(), c.attrs, gx.dtype(), device, [&] {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int found = 0;
    const cudnnStatus_t st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf);
    if (refused(st)) return Choice{};
    check(st, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    return pick(perf, found, gx.dtype() == DType::f32 && !allow_tf32());
  });
  if (best.algo < 0) return g_own_dgrad(c);
  const Tensor ws = workspace(best.memory, gx.device());
  const Scale s;
  check(cudnnConvolutionBackwardData(h, s.one(d.type), d.w, w.data_ptr(), d.y, gy.data_ptr(), d.conv,
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(best.algo), ws.data_ptr(),
                                     best.memory, s.zero(d.type), d.x, gx.data_ptr()),
        "cudnnConvolutionBackwardData");
}

void weight_grad(const KernelCall& c) {
  const Tensor &gy = c.inputs[0], &x = c.inputs[1];
  Tensor& gw = c.outputs[0];
  if (!usable({&gy, &x, &gw}) || !geometry_consistent(x.shape(), gw.shape(), gy.shape(), c.attrs.padding, c.attrs.stride, c.attrs.dilation)) {
    return g_own_wgrad(c);
  }
  const int device = gw.device().index;
  const cuda_libs::DeviceGuard guard(device, "cudnn");
  const Conv d(x.shape(), gw.shape(), gy.shape(), c.attrs, gw.dtype());
  cudnnHandle_t h = handle(device);
  const Choice best = cached_choice(Dir::wgrad, x.shape(), gw.shape(), gy.shape(), c.attrs, gw.dtype(), device, [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int found = 0;
    const cudnnStatus_t st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf);
    if (refused(st)) return Choice{};
    check(st, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    return pick(perf, found, gw.dtype() == DType::f32 && !allow_tf32());
  });
  if (best.algo < 0) return g_own_wgrad(c);
  const Tensor ws = workspace(best.memory, gw.device());
  const Scale s;
  check(cudnnConvolutionBackwardFilter(h, s.one(d.type), d.x, x.data_ptr(), d.y, gy.data_ptr(), d.conv,
                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(best.algo), ws.data_ptr(),
                                       best.memory, s.zero(d.type), d.w, gw.data_ptr()),
        "cudnnConvolutionBackwardFilter");
}
}  // namespace

void install(KernelTable& table) {
  const char* choice = std::getenv("TESSERA_CUDA_CONV");
  if (choice && std::strcmp(choice, "tessera") == 0) return;
  g_own_fwd = table[OpId::Conv2d];
  g_own_dgrad = table[OpId::Conv2dInputGrad];
  g_own_wgrad = table[OpId::Conv2dWeightGrad];
  table[OpId::Conv2d] = &forward;
  table[OpId::Conv2dInputGrad] = &input_grad;
  table[OpId::Conv2dWeightGrad] = &weight_grad;
  gpu::cuda::add_capture_prepare_hook([](int device) { (void)handle(device); });  // before the capture, as cuBLAS
}

}  // namespace cudnn
}  // namespace tessera
