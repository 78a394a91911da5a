// Telemetry through the dlopen seam: fake NVML and ROCm SMI libraries (tests/telemetry) stand
// in for the real ones, so the code paths that read a real GPU's utilisation, memory, power,
// temperature and clocks run here; a missing library is a reason, not an error.
#include <doctest/doctest.h>

#include "tessera/telemetry.h"

using namespace tessera;

TEST_CASE("NVML readings come through the dlopen seam, unsupported sensors stay empty") {
  const telemetry::GpuSource s = telemetry::nvml(TESSERA_FAKE_NVML);
  REQUIRE(s.available);
  CHECK(s.reason.empty());
  CHECK(s.driver_version == "555.42-fake");
  REQUIRE(s.devices.size() == 2);
  const auto& d0 = s.devices[0];
  CHECK(d0.name == "Fake H100 0");
  CHECK(d0.utilization_pct == 37.0);
  CHECK(d0.memory_used_bytes == double(1ull << 30));
  CHECK(d0.memory_total_bytes == double(80ull << 30));
  CHECK(d0.power_w == 250.0);  // milliwatts converted
  CHECK(d0.temperature_c == 61.0);
  CHECK(d0.sm_clock_mhz == 1755.0);
  CHECK(d0.memory_clock_mhz == 2619.0);
  CHECK(s.devices[1].utilization_pct == 38.0);
  CHECK_FALSE(s.devices[1].power_w.has_value());  // NVML_ERROR_NOT_SUPPORTED
}

TEST_CASE("ROCm SMI readings come through the dlopen seam") {
  const telemetry::GpuSource s = telemetry::rocm_smi(TESSERA_FAKE_ROCM_SMI);
  REQUIRE(s.available);
  CHECK(s.driver_version == "6.7.0-fake");
  REQUIRE(s.devices.size() == 1);
  const auto& d = s.devices[0];
  CHECK(d.name == "Fake MI300X");
  CHECK(d.utilization_pct == 42.0);
  CHECK(d.memory_used_bytes == double(2ull << 30));
  CHECK(d.memory_total_bytes == double(192ull << 30));
  CHECK(d.power_w == 300.0);        // microwatts converted
  CHECK(d.temperature_c == 55.0);   // millidegrees converted
  CHECK_FALSE(d.sm_clock_mhz.has_value());
}

TEST_CASE("a missing telemetry library is reported, not thrown") {
  const telemetry::GpuSource s = telemetry::nvml("/nonexistent/libnvidia-ml.so.1");
  CHECK_FALSE(s.available);
  CHECK(s.reason.find("/nonexistent/libnvidia-ml.so.1") != std::string::npos);
  CHECK(s.devices.empty());
  const telemetry::GpuSource r = telemetry::rocm_smi(TESSERA_FAKE_NVML);  // a library without rsmi_init
  CHECK_FALSE(r.available);
  CHECK(r.reason.find("rsmi_init") != std::string::npos);
}

TEST_CASE("host telemetry reads this process's memory and CPU time") {
  const telemetry::HostReading h = telemetry::host();
  CHECK(h.rss_bytes > (1 << 20));
  CHECK(h.cores >= 1);
  CHECK(h.cpu_utilization_pct >= 0);
  volatile double x = 0;
  for (int i = 0; i < 20'000'000; ++i) x = x + 1e-9 * i;  // burn CPU: the next reading sees it
  CHECK(telemetry::host().cpu_utilization_pct > 10);
}
