// Timing, the result table and the JSON records of `tessera bench`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "checks.h"
#include "peer_info.h"
#include "tessera/backend/backend.h"
#include "tessera/backend/registry.h"
#include "tessera/nn/file_io.h"
#include "tessera/error.h"
#include "tessera/runtime.h"

namespace tessera::bench {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Samples {
  std::vector<double> engine, peer;
};

// Warm-up, then repetitions until ~0.4 s (quick: 3) have been spent, engine and peer
// alternating so both see the same machine state. Each sample times a block of calls lasting
// ~10 ms: the first call of a block absorbs the other library's thread pool still spinning
// from its own block (OpenBLAS and TBB workers busy-wait after a call), which would otherwise
// land on every sub-millisecond measurement.
Samples time_case(const Case& c, Device dev, bool quick) {
  Samples s;
  const auto block = [](int calls, const auto& once) {
    const double t0 = now_s();
    for (int i = 0; i < calls; ++i) once();
    return (now_s() - t0) / calls;
  };
  const auto engine_once = [&] {
    c.run();
    synchronize(dev);
  };
  // A peer made of Tessera ops ("unfused", "naive") queues device work like the engine: without
  // the same wait its time was the host's launch time alone (on an H200 the unfused dropout_add
  // read 0.05 ms against PyTorch's 0.135). Library peers wait themselves; one more wait is free.
  const auto peer_once = [&] {
    c.peer->run();
    synchronize(dev);
  };
  const bool timed_peer = c.peer && c.peer->external_median_s <= 0;  // else the peer timed itself
  const double warm = block(1, engine_once);
  double peer_warm = 0;
  if (timed_peer) peer_warm = block(1, peer_once);
  const auto calls_for = [&](double t) { return quick ? 1 : static_cast<int>(std::clamp(0.01 / std::max(t, 1e-7), 1.0, 200.0)); };
  const int engine_calls = calls_for(warm), peer_calls = calls_for(peer_warm);
  const int reps = quick ? 3 : static_cast<int>(std::clamp(0.4 / std::max(warm * engine_calls, 1e-6), 5.0, 31.0));
  for (int r = 0; r < reps; ++r) {
    // After a settle pause both cores have idled: on this 2-vCPU VM the first parallel call then
    // waits milliseconds for the sleeping worker's vCPU (1024^3 sgemm: 6.5 ms back to back, 7-11
    // ms as the first call after 150 ms idle). Each block after a pause therefore starts with an
    // untimed call, and both libraries get the same pause and the same warm-up call.
    const bool paused = timed_peer && c.peer->settle_s > 0;
    if (paused && !quick) engine_once();
    s.engine.push_back(block(engine_calls, engine_once) / c.calls);
    if (paused) std::this_thread::sleep_for(std::chrono::duration<double>(c.peer->settle_s));
    if (timed_peer) {
      if (paused && !quick) peer_once();
      s.peer.push_back(block(peer_calls, peer_once) / c.calls);
      if (c.peer->settle_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(c.peer->settle_s));
    }
  }
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

// Peak allocator bytes of one call above what was in use before it (the cache emptied first:
// a cached block up to twice a request's size may serve it and would count in full).
int64_t peak_bytes_of(const Body& body, Device dev) {
  synchronize(dev);
  empty_cache(dev);
  const int64_t base = memory_stats(dev).in_use_bytes;
  reset_peak_memory(dev);
  body();
  synchronize(dev);
  return memory_stats(dev).peak_in_use_bytes - base;
}

Record measure(const Case& c, Device dev, const std::string& device_name, const Peak& peak, bool quick) {
  Record r;
  r.suite = c.suite, r.name = c.name, r.backend = device_type_name(dev.type), r.device = device_name, r.dtype = c.dtype, r.shape = c.shape;
  if (c.check) {
    std::optional<std::string> error;
    try {
      error = c.check();
    } catch (const std::exception& e) {
      error = std::string("threw: ") + e.what();
    }
    r.status = error ? "wrong" : "ok";
    if (error) {
      r.wrong = *error;
      return r;  // never timed: a wrong result must not read as a fast one
    }
  }
  const Samples s = time_case(c, dev, quick);
  r.median_s = median(s.engine);
  r.min_s = *std::min_element(s.engine.begin(), s.engine.end());
  r.max_s = *std::max_element(s.engine.begin(), s.engine.end());
  const double work = c.flops > 0 ? c.flops : c.bytes;
  if (c.flops > 0) r.gflops = c.flops / r.median_s * 1e-9;
  if (c.bytes > 0) r.gbps = c.bytes / r.median_s * 1e-9;
  const double peak_value = c.flops > 0 ? (c.dtype == "f32" ? peak.f32_gflops : peak.f16_gflops) : peak.gbps;
  if (peak_value > 0 && (r.gflops > 0 || r.gbps > 0)) r.pct_of_peak = 100.0 * (c.flops > 0 ? r.gflops : r.gbps) / peak_value;
  if (c.peer) {
    r.peer = c.peer->name;
    r.peer_median_s = c.peer->external_median_s > 0 ? c.peer->external_median_s : median(s.peer);
    // Throughput ratio: equal work gives peer time / engine time; a peer with its own work
    // (the triad moves 12 bytes per element) is compared by rate.
    r.ratio = c.peer->work > 0 && work > 0 ? (work / r.median_s) / (c.peer->work / r.peer_median_s) : r.peer_median_s / r.median_s;
  }
  if (c.peak_memory) {
    r.peak_bytes = peak_bytes_of(c.run, dev);
    if (c.peer && c.peer->external_median_s <= 0) r.peer_peak_bytes = peak_bytes_of(c.peer->run, dev);
  }
  return r;
}

void print_row(const Record& r) {
  if (r.status == "wrong") {
    std::printf("%-11s %-18s %-8s %-8s %-18s WRONG: %s\n", r.suite.c_str(), r.name.c_str(), r.backend.c_str(), r.dtype.c_str(),
                shape_text(r.shape).c_str(), r.wrong.c_str());
    std::fflush(stdout);
    return;
  }
  char rate[32] = "", pct[16] = "", peer[48] = "";
  if (r.gflops > 0) std::snprintf(rate, sizeof rate, "%.1f GF/s", r.gflops);
  else if (r.gbps > 0) std::snprintf(rate, sizeof rate, "%.1f GB/s", r.gbps);
  if (r.pct_of_peak >= 0) std::snprintf(pct, sizeof pct, "%.0f%%", r.pct_of_peak);
  if (!r.peer.empty()) std::snprintf(peer, sizeof peer, "%s %.3g ms  x%.2f", r.peer.c_str(), r.peer_median_s * 1e3, r.ratio);
  char mem[64] = "";
  if (r.peer_peak_bytes >= 0) std::snprintf(mem, sizeof mem, "  peak %.1f vs %.1f MiB", r.peak_bytes / 1048576.0, r.peer_peak_bytes / 1048576.0);
  else if (r.peak_bytes >= 0) std::snprintf(mem, sizeof mem, "  peak %.1f MiB", r.peak_bytes / 1048576.0);
  std::printf("%-11s %-18s %-8s %-8s %-18s %10.4f ms  %-13s %-5s %s%s\n", r.suite.c_str(), r.name.c_str(), r.backend.c_str(), r.dtype.c_str(),
              shape_text(r.shape).c_str(), r.median_s * 1e3, rate, pct, peer, mem);
  std::fflush(stdout);
}

// Every backend with a device (not the emulator), or the devices named with --backend
// ("cuda" means its device 0; "cuda:1" a given device).
std::vector<Device> selected_devices(const Options& o) {
  std::vector<Device> devs;
  if (!o.backends.empty()) {
    for (const std::string& want : o.backends) {
      const Device d = Device::parse(want);
      Backend* b = find_backend(d.type);
      if (!b) throw Error(detail::concat("bench: backend '", want, "' is not in this build"));
      if (b->device_count() <= d.index) {
        std::printf("# %s: skipped, no device (%s)\n", want.c_str(), b->unavailable_reason().c_str());
        continue;
      }
      devs.push_back(d);
    }
    return devs;
  }
  for (Backend* b : registered_backends()) {
    if (b->device_type() == DeviceType::emulated) continue;  // it verifies kernels; bench it by name
    if (b->device_count() == 0) {
      std::printf("# %s: skipped, no device (%s)\n", b->name(), b->unavailable_reason().c_str());
      continue;
    }
    devs.push_back(Device(b->device_type(), 0));
  }
  return devs;
}
}  // namespace

std::vector<Record> run(const Options& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  plant_wrong_kernel_from_env();
  const int threads = num_threads();
  const peers::LibraryInfo libs = peers::library_info();
  if (!libs.openblas_version.empty()) {
    std::printf("# peers: %s, core %s (from %s)%s%s%s%s\n", libs.openblas_version.c_str(), libs.openblas_core.c_str(),
                libs.openblas_core_source.c_str(), libs.onednn_version.empty() ? "" : "; ", libs.onednn_version.c_str(),
                libs.torch_version.empty() ? "" : "; ", libs.torch_version.c_str());
  }
  for (const std::string& w : libs.warnings) std::printf("# WARNING: %s\n", w.c_str());
  for (const std::string& s : o.suites) {
    if (std::find(suite_names().begin(), suite_names().end(), s) == suite_names().end()) {
      throw Error(detail::concat("bench: unknown suite '", s, "'"));
    }
  }
  std::vector<Record> records;
  for (const Device dev : selected_devices(o)) {
    const Peak peak = dev.type == DeviceType::cpu ? cpu_peak(threads) : device_peak(dev);
    const std::string device_name = find_backend(dev.type)->device_info(dev.index).name;
    std::printf("# %s (%s), %d threads; peak: %s%s\n", dev.str().c_str(), device_name.c_str(), threads, peak.source.c_str(),
                peak.f32_gflops > 0 ? (" = " + std::to_string(static_cast<int>(peak.f32_gflops)) + " GF/s f32").c_str() : "");
    for (const std::string& suite : suite_names()) {
      if (!o.suites.empty() && std::find(o.suites.begin(), o.suites.end(), suite) == o.suites.end()) continue;
      for (const Case& c : make_cases(suite, dev, o.quick, threads)) {
        if (!o.filters.empty()) {
          std::string id = c.name + "/" + c.dtype + "/";
          for (size_t i = 0; i < c.shape.size(); ++i) id += (i ? "x" : "") + std::to_string(c.shape[i]);
          if (std::none_of(o.filters.begin(), o.filters.end(), [&](const std::string& f) { return id.find(f) != std::string::npos; })) continue;
        }
        records.push_back(measure(c, dev, device_name, peak, o.quick));
        print_row(records.back());
      }
    }
  }
  return records;
}

void write_json(const std::vector<Record>& records, const std::string& path, const Options& o) {
  nlohmann::json arr = nlohmann::json::array();
  nlohmann::json system = {{"tessera_version", TESSERA_VERSION_TEXT}, {"threads", num_threads()}, {"quick", o.quick},
                           {"cores", static_cast<int>(std::thread::hardware_concurrency())}, {"devices", nlohmann::json::array()}};
  const peers::LibraryInfo libs = peers::library_info();
  // What each peer is, so a ratio can be judged: the library version and the OpenBLAS core
  // under it (libtorch's matmuls run on the same OpenBLAS), and any fallback warning.
  auto peer_library = [&](const std::string& peer) -> std::string {
    if (peer == "openblas") return libs.openblas_version;
    if (peer == "libtorch") return libs.torch_version + (libs.onednn_version.empty() ? "" : " (convolutions: " + libs.onednn_version + ")");
    if (peer == "onednn") return libs.onednn_version;
    return "";
  };
  const std::string cpu_isa = cpu_kernel_set();
  system["cpu_kernels"] = cpu_isa;
  system["cpu_family"] = cpu_property("cpu family");
  system["cpu_bf16_gemm"] = cpu_property("bf16 GEMM");
  system["libraries"] = {{"openblas", libs.openblas_version}, {"openblas_core", libs.openblas_core}, {"onednn", libs.onednn_version},
                         {"libtorch", libs.torch_version}};
  for (Backend* b : registered_backends()) {
    for (int i = 0; i < b->device_count(); ++i) {
      const DeviceInfo info = b->device_info(i);
      nlohmann::json dj = {{"device", Device(b->device_type(), i).str()}, {"name", info.name}, {"memory_bytes", info.total_memory},
                           {"compute_units", info.compute_units}};
      for (const auto& [k, v] : b->build_info()) dj["build"][k] = v;
      system["devices"].push_back(dj);
    }
  }
  for (const Record& r : records) {
    if (r.status == "wrong") {  // untimed: no numbers that could be read as a result
      arr.push_back({{"suite", r.suite}, {"case", r.name}, {"backend", r.backend}, {"device", r.device}, {"dtype", r.dtype}, {"shape", r.shape},
                     {"status", "wrong"}, {"wrong", r.wrong}, {"median_s", nullptr}, {"min_s", nullptr}, {"max_s", nullptr},
                     {"pct_of_peak", nullptr}, {"peer", nullptr}, {"peer_median_s", nullptr}, {"ratio", nullptr}, {"threads", num_threads()},
                     {"quick", o.quick}});
      continue;
    }
    nlohmann::json j{{"suite", r.suite}, {"case", r.name}, {"backend", r.backend}, {"device", r.device}, {"dtype", r.dtype},
                     {"shape", r.shape}, {"median_s", r.median_s}, {"min_s", r.min_s}, {"max_s", r.max_s},
                     {"threads", num_threads()}, {"quick", o.quick}, {"status", r.status}};
    if (r.gflops > 0) j["gflops"] = r.gflops;
    if (r.gbps > 0) j["gbps"] = r.gbps;
    j["pct_of_peak"] = r.pct_of_peak >= 0 ? nlohmann::json(r.pct_of_peak) : nlohmann::json(nullptr);
    // Whole training steps with counted FLOPs: their % of peak is the model FLOPs utilisation.
    if (r.name.find("step") != std::string::npos && r.gflops > 0 && r.pct_of_peak >= 0) j["mfu_pct"] = r.pct_of_peak;
    j["peer"] = r.peer.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.peer);
    j["peer_median_s"] = r.peer.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.peer_median_s);
    j["ratio"] = r.peer.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.ratio);
    if (r.backend == "cpu" && !cpu_isa.empty()) j["cpu_kernels"] = cpu_isa;
    if (r.peak_bytes >= 0) j["peak_bytes"] = r.peak_bytes;
    if (r.peer_peak_bytes >= 0) j["peer_peak_bytes"] = r.peer_peak_bytes;
    if (const std::string lib = peer_library(r.peer); !lib.empty()) j["peer_library"] = lib;
    if ((r.peer == "openblas" || r.peer == "libtorch") && !libs.openblas_core.empty()) {
      j["peer_openblas_core"] = libs.openblas_core;
      j["peer_openblas_core_fallback"] = peers::openblas_core_is_fallback(libs.openblas_core);
    }
    arr.push_back(j);
  }
  const nlohmann::json doc = {{"schema", "tessera-bench/1"}, {"system", system}, {"records", arr}};
  write_file_atomically(doc.dump(1) + "\n", path);
}

// fsync'd, close() checked, renamed into place (nn/file_io.h): a full disk is an error, never
// a silently empty file.
void write_file_atomically(const std::string& text, const std::string& path) { nn::write_file_atomic(path, text, "bench --json"); }

}  // namespace tessera::bench
