// A stand-in for libnvidia-ml.so.1 with fixed readings, loaded through the same dlopen seam as
// the real library (tests/core/telemetry_test.cpp, tools/info-json-fake-gpu). Two devices;
// device 1 has no power sensor (NVML_ERROR_NOT_SUPPORTED = 3), as some boards do.
#include <cstdint>
#include <cstring>

extern "C" {

typedef struct { unsigned gpu, memory; } Utilization;
typedef struct { unsigned long long total, free, used; } Memory;
static int initialised = 0;

int nvmlInit_v2(void) { initialised = 1; return 0; }
int nvmlShutdown(void) { initialised = 0; return 0; }
int nvmlSystemGetDriverVersion(char* out, unsigned len) { strncpy(out, "555.42-fake", len); return 0; }
int nvmlDeviceGetCount_v2(unsigned* n) { if (!initialised) return 1; *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) { if (i > 1) return 2; *d = reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1)); return 0; }
static unsigned index_of(void* d) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(d)) - 1; }
int nvmlDeviceGetName(void* d, char* out, unsigned len) { strncpy(out, index_of(d) ? "Fake H100 1" : "Fake H100 0", len); return 0; }
int nvmlDeviceGetUtilizationRates(void* d, Utilization* u) { u->gpu = 37 + index_of(d); u->memory = 12; return 0; }
int nvmlDeviceGetMemoryInfo(void* d, Memory* m) {
  (void)d;
  m->total = 80ull << 30; m->used = 1ull << 30; m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(void* d, unsigned* mw) { if (index_of(d) == 1) return 3; *mw = 250000; return 0; }
int nvmlDeviceGetTemperature(void* d, int sensor, unsigned* c) { (void)d; if (sensor != 0) return 2; *c = 61; return 0; }
int nvmlDeviceGetClockInfo(void* d, int type, unsigned* mhz) { (void)d; *mhz = type == 1 ? 1755 : type == 2 ? 2619 : 1980; return 0; }
}  // extern "C"
