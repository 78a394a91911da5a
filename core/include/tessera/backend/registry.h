#pragma once
// The backend registry: one backend per DeviceType. Built-in backends (those CMake compiled
// in) register themselves on first use; tests and plugins may add more with register_backend.
#include <memory>
#include <string>
#include <vector>

#include "tessera/backend/backend.h"

namespace tessera {

/** The backend for `type`; throws tessera::Error naming the type when none is compiled in. */
Backend& backend_for(DeviceType type);
/** The backend for `type`, or nullptr. */
Backend* find_backend(DeviceType type);
/** Every registered backend, in DeviceType order. */
std::vector<Backend*> registered_backends();
/** Adds a backend; throws if its device type is already taken. */
void register_backend(std::unique_ptr<Backend> backend);
/** Removes the backend of `type` (tests only; tensors on it must be gone). */
void unregister_backend(DeviceType type);

/**
 * Checks that `device` exists and returns its backend; throws
 * "<op>: device cuda:1 is not available (...)" otherwise.
 */
Backend& backend_for_device(Device device, const char* op);

/** What a backend lacks: an op with no kernel (every dtype it takes, why "no kernel") or a kernel
 *  that refuses some dtypes (Backend::supports is false for them). */
struct OpGap {
  OpId op;
  DTypeSet dtypes;
  std::string why;
};
/** The backend's gaps in OpId order; empty when it runs every op at every dtype (`tessera info`). */
std::vector<OpGap> op_gaps(const Backend& backend);

/** Backends the build knows about but did not compile, with the reason (for `tessera info`). */
struct MissingBackend {
  std::string name;
  std::string reason;
};
std::vector<MissingBackend> missing_backends();

/**
 * Testing hook: makes one kernel wrong on purpose -- its floating outputs are scaled by 1.01
 * after it runs -- so the checks that must catch a wrong kernel (the benchmark's correctness
 * gate, the CPU cross-check) can be shown to. `spec` is "op" (the CPU backend's) or
 * "backend:op" ("emulated:conv2d"); one kernel at a time. Throws naming an unknown op/backend.
 */
void plant_wrong_kernel(const std::string& spec);

}  // namespace tessera
