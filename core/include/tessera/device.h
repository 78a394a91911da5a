#pragma once
// Devices: a backend type plus an index.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace tessera {

/** The kinds of device Tessera knows. Each is served by at most one backend. */
enum class DeviceType : uint8_t { cpu, cuda, hip, kokkos, emulated };
inline constexpr int kNumDeviceTypes = 5;

const char* device_type_name(DeviceType t);

/** A device: "cpu:0", "cuda:1", ... */
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: implicit by design
  /** Parses "cpu", "cuda:1", ...; throws tessera::Error when malformed. */
  static Device parse(std::string_view text);

  std::string str() const;
  bool operator==(const Device&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

inline constexpr Device kCPU{DeviceType::cpu, 0};

}  // namespace tessera
