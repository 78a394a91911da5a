// cuDNN convolutions on the CUDA backend (built when cuDNN is found; TESSERA_CUDA_CONV=tessera
// keeps Tessera's implicit-GEMM kernels). conv2d forward, input-grad and weight-grad map to
// cudnnConvolutionForward / BackwardData / BackwardFilter (the v7-style API, deprecated in cuDNN
// 9 but complete), with the fastest *deterministic* algorithm whose workspace fits 256 MiB, so
// results do not change from run to run. The workspace comes from Tessera's caching allocator
// and every call is queued on the thread's current stream. Layouts other than dense NCHW f32/f64
// fall back to the own kernels.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "tessera/backend/kernel.h"
#include "tessera/ops/creation.h"
#include "tessera/tensor.h"

namespace tessera {
namespace gpu::cuda {
cudaStream_t current_vendor_stream();  // backends/gpu/device_backend.cu
}

namespace cudnn {
namespace {

constexpr size_t kMaxWorkspace = size_t{256} << 20;
KernelFn g_own_fwd = nullptr, g_own_dgrad = nullptr, g_own_wgrad = nullptr;

void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw Error(detail::concat(what, " failed: ", cudnnGetErrorString(s)));
}

cudnnHandle_t handle(int device) {
  static std::mutex m;
  static std::vector<cudnnHandle_t> handles;
  std::lock_guard lock(m);
  if (static_cast<int>(handles.size()) <= device) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  if (!handles[device]) {
    if (cudaSetDevice(device) != cudaSuccess) throw Error("cudnn: cudaSetDevice failed");
    check(cudnnCreate(&handles[device]), "cudnnCreate");
  }
  check(cudnnSetStream(handles[device], gpu::cuda::current_vendor_stream()), "cudnnSetStream");
  return handles[device];
}

// The descriptors of one convolution: x [N,C,H,W], w [O,C/g,kh,kw], y [N,O,Ho,Wo].
struct Conv {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  Conv(const Shape& xs, const Shape& ws, const Shape& ys, const OpAttrs& a, DType dt) {
    type = dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    check(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, i(xs[0]), i(xs[1]), i(xs[2]), i(xs[3])), "x descriptor");
    check(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, i(ys[0]), i(ys[1]), i(ys[2]), i(ys[3])), "y descriptor");
    check(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, i(ws[0]), i(ws[1]), i(ws[2]), i(ws[3])), "w descriptor");
    check(cudnnSetConvolution2dDescriptor(conv, i(a.padding[0]), i(a.padding[1]), i(a.stride[0]), i(a.stride[1]), i(a.dilation[0]),
                                          i(a.dilation[1]), CUDNN_CROSS_CORRELATION, type),
          "convolution descriptor");
    check(cudnnSetConvolutionGroupCount(conv, i(a.groups)), "cudnnSetConvolutionGroupCount");
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

// The first (fastest) deterministic algorithm that succeeded and fits the workspace budget.
template <class Perf> bool pick(const Perf* perf, int n, Perf& out) {
  for (int k = 0; k < n; ++k) {
    if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].determinism == CUDNN_DETERMINISTIC && perf[k].memory <= kMaxWorkspace) {
      out = perf[k];
      return true;
    }
  }
  return false;
}

bool usable(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->is_contiguous() || !(t->dtype() == DType::f32 || t->dtype() == DType::f64) || t->numel() == 0) return false;
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
  if (!usable({&x, &w, &y}) || (bias.defined() && !usable({&bias}))) return g_own_fwd(c);
  const Conv d(x.shape(), w.shape(), y.shape(), c.attrs, x.dtype());
  cudnnHandle_t h = handle(y.device().index);
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT], best{};
  int found = 0;
  check(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
        "cudnnGetConvolutionForwardAlgorithm_v7");
  if (!pick(perf, found, best)) return g_own_fwd(c);
  const Tensor ws = workspace(best.memory, y.device());
  const Scale s;
  check(cudnnConvolutionForward(h, s.one(d.type), d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv, best.algo, ws.data_ptr(), best.memory,
                                s.zero(d.type), d.y, y.data_ptr()),
        "cudnnConvolutionForward");
  if (bias.defined()) {
    cudnnTensorDescriptor_t b = nullptr;
    check(cudnnCreateTensorDescriptor(&b), "cudnnCreateTensorDescriptor");
    const cudnnStatus_t st = cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, d.type, 1, static_cast<int>(bias.numel()), 1, 1);
    const cudnnStatus_t add = st == CUDNN_STATUS_SUCCESS ? cudnnAddTensor(h, s.one(d.type), b, bias.data_ptr(), s.one(d.type), d.y, y.data_ptr()) : st;
    cudnnDestroyTensorDescriptor(b);
    check(add, "cudnnAddTensor (bias)");
  }
}

void input_grad(const KernelCall& c) {
  const Tensor &gy = c.inputs[0], &w = c.inputs[1];
  Tensor& gx = c.outputs[0];
  if (!usable({&gy, &w, &gx})) return g_own_dgrad(c);
  const Conv d(gx.shape(), w.shape(), gy.shape(), c.attrs, gx.dtype());
  cudnnHandle_t h = handle(gx.device().index);
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT], best{};
  int found = 0;
  check(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf),
        "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  if (!pick(perf, found, best)) return g_own_dgrad(c);
  const Tensor ws = workspace(best.memory, gx.device());
  const Scale s;
  check(cudnnConvolutionBackwardData(h, s.one(d.type), d.w, w.data_ptr(), d.y, gy.data_ptr(), d.conv, best.algo, ws.data_ptr(),
                                     best.memory, s.zero(d.type), d.x, gx.data_ptr()),
        "cudnnConvolutionBackwardData");
}

void weight_grad(const KernelCall& c) {
  const Tensor &gy = c.inputs[0], &x = c.inputs[1];
  Tensor& gw = c.outputs[0];
  if (!usable({&gy, &x, &gw})) return g_own_wgrad(c);
  const Conv d(x.shape(), gw.shape(), gy.shape(), c.attrs, gw.dtype());
  cudnnHandle_t h = handle(gw.device().index);
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT], best{};
  int found = 0;
  check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf),
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  if (!pick(perf, found, best)) return g_own_wgrad(c);
  const Tensor ws = workspace(best.memory, gw.device());
  const Scale s;
  check(cudnnConvolutionBackwardFilter(h, s.one(d.type), d.x, x.data_ptr(), d.y, gy.data_ptr(), d.conv, best.algo, ws.data_ptr(),
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
}

}  // namespace cudnn
}  // namespace tessera
