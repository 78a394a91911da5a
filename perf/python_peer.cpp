// Out-of-process peers: a Python script under perf/ run with Debian's python3-torch, which
// times its own steps and prints one JSON line. The harness records that median as the peer's
// time (Peer::external_median_s) instead of calling it in process.
#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "peers.h"

namespace tessera::bench::peers {
namespace {

// Where perf/gpt_peer.py is: TESSERA_GPT_PEER, else the source tree this binary was built from.
std::string gpt_peer_script() {
  if (const char* env = std::getenv("TESSERA_GPT_PEER")) return env;
  return std::string(TESSERA_PERF_SOURCE_DIR) + "/gpt_peer.py";
}

// stdout of `command`, or nullopt when it cannot run or exits non-zero.
std::optional<std::string> run_capture(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  return ::pclose(pipe) == 0 ? std::optional<std::string>(out) : std::nullopt;
}

}  // namespace

std::optional<Peer> python_gpt_step(int64_t vocab, int64_t context, int64_t layers, int64_t heads, int64_t dim, int64_t batch, int threads,
                                    int steps) {
  const std::string script = gpt_peer_script();
  if (!std::filesystem::exists(script)) return std::nullopt;
  // OPENBLAS_CORETYPE (set by `tessera` for its own peers) is inherited by the child.
  const std::string args = " '" + script + "' --bench-steps " + std::to_string(steps) + " --vocab " + std::to_string(vocab) +
                          " --context " + std::to_string(context) + " --layers " + std::to_string(layers) + " --heads " +
                          std::to_string(heads) + " --dim " + std::to_string(dim) + " --batch " + std::to_string(batch) +
                          " --threads " + std::to_string(threads > 0 ? threads : 1) + " 2>/dev/null";
  // The first interpreter that has torch: TESSERA_PYTHON, the system's (Debian's python3-torch
  // lives there even when a pyenv or venv python3 comes first on PATH), then PATH's.
  std::vector<std::string> pythons;
  if (const char* env = std::getenv("TESSERA_PYTHON")) pythons.push_back(env);
  pythons.push_back("/usr/bin/python3");
  pythons.push_back("python3");
  std::optional<std::string> out;
  for (const std::string& py : pythons) {
    if (py.front() == '/' && !std::filesystem::exists(py)) continue;
    if ((out = run_capture("'" + py + "'" + args))) break;
  }
  if (!out) return std::nullopt;  // no python3 with a torch module: the case runs without this peer
  try {
    const auto j = nlohmann::json::parse(out->substr(out->rfind('{')));
    Peer p{"pytorch (python)", [] {}};
    p.external_median_s = j.at("median_step_s").get<double>();
    return p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace tessera::bench::peers
