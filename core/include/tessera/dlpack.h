#pragma once
// DLPack interop (https://dmlc.github.io/dlpack, Debian's libdlpack-dev, ABI version 0.6 as in
// libtorch 1.13): tensors cross to and from PyTorch, JAX, CuPy, ... without a copy. Available
// when the library was built with the DLPack header (TESSERA_HAS_DLPACK).
#include <dlpack/dlpack.h>

#include "tessera/tensor.h"

namespace tessera {

/**
 * Exports `t` without copying: the capsule points at t's memory (with its shape and strides, in
 * elements) and holds a reference to its storage until the consumer calls its deleter, exactly
 * once. Devices: cpu -> kDLCPU, cuda:i -> kDLCUDA, hip:i -> kDLROCM; other devices (emulated,
 * kokkos) throw, naming the device. bool goes out as 8-bit unsigned (DLPack 0.6 has no bool).
 */
DLManagedTensor* to_dlpack(const Tensor& t);

/**
 * Imports a DLPack tensor without copying: the Tensor (and its views) use the producer's memory
 * and call its deleter when the last of them dies. Takes ownership of `managed` even when it
 * throws (the deleter is called): unsupported dtypes, devices this build has no backend for,
 * negative strides.
 */
Tensor from_dlpack(DLManagedTensor* managed);

}  // namespace tessera
