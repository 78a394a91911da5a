#include "tessera/device.h"

#include <charconv>
#include <ostream>

#include "tessera/error.h"

namespace tessera {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::hip: return "hip";
    case DeviceType::kokkos: return "kokkos";
    case DeviceType::emulated: return "emulated";
  }
  return "?";
}

Device Device::parse(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view type = text.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view idx = text.substr(colon + 1);
    auto [p, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), index);
    if (ec != std::errc() || p != idx.data() + idx.size() || index < 0 || idx.empty()) {
      throw Error(detail::concat("device: malformed device '", text, "' (expected e.g. cuda:0)"));
    }
  }
  for (int t = 0; t < kNumDeviceTypes; ++t) {
    if (type == device_type_name(static_cast<DeviceType>(t))) return Device(static_cast<DeviceType>(t), index);
  }
  throw Error(detail::concat("device: unknown device type '", type, "' (known: cpu, cuda, hip, kokkos, emulated)"));
}

std::string Device::str() const { return std::string(device_type_name(type)) + ":" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace tessera
