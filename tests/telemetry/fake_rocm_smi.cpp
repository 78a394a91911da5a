// A stand-in for librocm_smi64.so with fixed readings (tests/core/telemetry_test.cpp).
#include <cstdint>
#include <cstring>

extern "C" {

int rsmi_init(uint64_t flags) { (void)flags; return 0; }
int rsmi_shut_down(void) { return 0; }
int rsmi_version_str_get(int component, char* out, uint32_t len) { (void)component; strncpy(out, "6.7.0-fake", len); return 0; }
int rsmi_num_monitor_devices(uint32_t* n) { *n = 1; return 0; }
int rsmi_dev_name_get(uint32_t i, char* out, size_t len) { (void)i; strncpy(out, "Fake MI300X", len); return 0; }
int rsmi_dev_busy_percent_get(uint32_t i, uint32_t* busy) { (void)i; *busy = 42; return 0; }
int rsmi_dev_memory_usage_get(uint32_t i, int type, uint64_t* used) { (void)i; if (type != 0) return 2; *used = 2ull << 30; return 0; }
int rsmi_dev_memory_total_get(uint32_t i, int type, uint64_t* total) { (void)i; if (type != 0) return 2; *total = 192ull << 30; return 0; }
int rsmi_dev_power_ave_get(uint32_t i, uint32_t sensor, uint64_t* uw) { (void)i; (void)sensor; *uw = 300000000ull; return 0; }
int rsmi_dev_temp_metric_get(uint32_t i, uint32_t sensor, int metric, int64_t* mc) { (void)i; (void)sensor; (void)metric; *mc = 55000; return 0; }
}  // extern "C"
