// `tessera onnx test DIR` (the ONNX node-test suite, or one case) and `tessera onnx run MODEL`.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "tessera/error.h"
#include "tessera/nn/file_io.h"
#include "train_args.h"

#ifdef TESSERA_HAS_ONNX
#include "onnx_outputs.h"
#include "tessera/onnx.h"
#endif

namespace tessera::tools {

#ifdef TESSERA_HAS_ONNX
namespace {
namespace fs = std::filesystem;

// "onnx: op Foo is not supported" -> "Foo"; other reasons whole.
std::string skip_reason(const std::string& detail) {
  const std::string op = "onnx: op ";
  if (detail.rfind(op, 0) == 0) return detail.substr(op.size(), detail.find(' ', op.size()) - op.size());
  return detail.rfind("onnx: ", 0) == 0 ? detail.substr(6) : detail;
}

int run_suite(const std::string& dir, const std::string& backend, const std::string& json_path, const std::string& filter, bool quiet) {
  const Device device = pick_device(backend);
  std::vector<std::string> cases;
  if (fs::exists(fs::path(dir) / "model.onnx")) {
    cases.push_back(dir);
  } else {
    TESSERA_CHECK(fs::is_directory(dir), "onnx test", "'", dir, "' is neither a test case (model.onnx) nor a directory of them");
    for (const auto& e : fs::directory_iterator(dir)) {
      if (fs::exists(e.path() / "model.onnx") && e.path().filename().string().find(filter) != std::string::npos) cases.push_back(e.path().string());
    }
    std::sort(cases.begin(), cases.end());
  }
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, int> reasons;
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& c : cases) {
    const onnx::CaseResult r = onnx::run_node_case(c, device);
    const char* status = r.status == onnx::CaseResult::passed ? "passed" : r.status == onnx::CaseResult::failed ? "failed" : "skipped";
    results.push_back({{"case", r.name}, {"status", status}, {"detail", r.detail}});
    if (r.status == onnx::CaseResult::passed) ++passed;
    if (r.status == onnx::CaseResult::skipped) ++skipped, ++reasons[skip_reason(r.detail)];
    if (r.status == onnx::CaseResult::failed) {
      ++failed;
      std::printf("FAIL %s: %s\n", r.name.c_str(), r.detail.c_str());
    }
  }
  if (!quiet && !reasons.empty()) {
    std::vector<std::pair<int, std::string>> top;
    for (const auto& [why, n] : reasons) top.emplace_back(n, why);
    std::sort(top.rbegin(), top.rend());
    std::printf("most common reasons to skip:\n");
    for (size_t i = 0; i < top.size() && i < 15; ++i) std::printf("  %4d  %s\n", top[i].first, top[i].second.c_str());
  }
  std::printf("%s: %d passed, %d failed, %d skipped\n", device.str().c_str(), passed, failed, skipped);
  if (!json_path.empty()) {
    const nlohmann::json j = {{"backend", device.str()}, {"passed", passed}, {"failed", failed}, {"skipped", skipped}, {"cases", results}};
    nn::write_file_atomic(json_path, j.dump(1) + "\n", "onnx test --json");
  }
  return failed == 0 ? 0 : 1;
}
}  // namespace
#endif

void add_onnx_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("onnx", "ONNX import: run the ONNX node-test suite or a model");
  cmd->require_subcommand(1);
  struct Args {
    std::string dir = "/usr/share/libonnx-testdata/data/node", backend = "cpu", json, filter, model, output;
    std::vector<std::string> inputs, compare;
    double rtol = 1e-5, atol = 1e-6;
    bool quiet = false;
  };
  static Args a;
  a = Args{};
  auto* test = cmd->add_subcommand("test", "Run every case under DIR (model.onnx + test_data_set_*): one line per failing case, then counts");
  test->add_option("dir", a.dir, "A case directory or a directory of them")->capture_default_str();
  test->add_option("--backend", a.backend, "cpu, cuda[:i], hip[:i], kokkos, emulated")->capture_default_str();
  test->add_option("--json", a.json, "Write the per-case results here");
  test->add_option("--filter", a.filter, "Only cases whose name contains this");
  test->add_flag("--quiet", a.quiet, "Only the failures and the closing counts");
  auto* run = cmd->add_subcommand("run", "Run MODEL on the given input tensors (.pb) and print its outputs");
  run->add_option("model", a.model, "model.onnx")->required();
  run->add_option("--input", a.inputs, "TensorProto files, one per model input, in order");
  run->add_option("--backend", a.backend, "cpu, cuda[:i], hip[:i], kokkos, emulated")->capture_default_str();
  run->add_option("--output", a.output, "Write each output at full precision to DIR/output_<i>.pb (TensorProto) and .npy");
  run->add_option("--compare", a.compare, "Reference TensorProto files, one per output in order: fail unless |out - ref| <= atol + rtol |ref|");
  run->add_option("--rtol", a.rtol, "Relative tolerance of --compare")->capture_default_str()->check(CLI::NonNegativeNumber);
  run->add_option("--atol", a.atol, "Absolute tolerance of --compare")->capture_default_str()->check(CLI::NonNegativeNumber);
#ifdef TESSERA_HAS_ONNX
  test->callback([] {
    const int rc = run_suite(a.dir, a.backend, a.json, a.filter, a.quiet);
    if (rc != 0) throw Error("onnx test: some cases gave wrong answers or crashed (listed above)");
  });
  run->callback([] {
    const onnx::Model model = onnx::Model::load(a.model);
    std::vector<Tensor> inputs;
    for (const std::string& p : a.inputs) inputs.push_back(onnx::load_tensor(p));
    const std::vector<Tensor> outs = model.run(inputs, pick_device(a.backend));
    for (size_t i = 0; i < outs.size(); ++i) std::printf("%s = %s\n", model.output_names()[i].c_str(), outs[i].to(kCPU).str().c_str());
    if (!a.output.empty()) {
      write_outputs(a.output, outs, model.output_names());
      std::printf("wrote %zu outputs to %s (output_<i>.pb, output_<i>.npy)\n", outs.size(), a.output.c_str());
    }
    if (!a.compare.empty() && !compare_outputs(outs, model.output_names(), a.compare, a.rtol, a.atol)) {
      throw Error("onnx run: outputs differ from the --compare references beyond the tolerance (above)");
    }
  });
#else
  const auto off = [] { throw Error("onnx: this build has no ONNX import (install libonnx-dev and reconfigure)"); };
  test->callback(off);
  run->callback(off);
#endif
}

}  // namespace tessera::tools
