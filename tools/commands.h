#pragma once
// Sub-commands of the `tessera` tool; each registers its options on the CLI11 app.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <string>

namespace tessera::tools {

/** A whole number in 0..2^63-1 written exactly: CLI11 converts an out-of-range one to the
 *  nearest representable value without a word (a seed of 10^23 became 2^63-1). */
inline CLI::Validator exact_nonnegative_int64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc::result_out_of_range) return "'" + text + "' is out of range (0 to 2^63-1)";
        if (ec != std::errc() || end != text.data() + text.size()) return "'" + text + "' is not a whole number";
        if (v < 0) return "must be >= 0, got " + text;
        return {};
      },
      "INT in [0 - 2^63-1]");
}

/** `tessera info`: backends compiled in, devices, and why a backend has no device. */
void add_info_command(CLI::App& app);
/** `tessera demo`: a short tour of the tensor API on a chosen device. */
void add_demo_command(CLI::App& app);
/** `tessera train`: trains the MLP or CNN on Fashion-MNIST on a chosen backend. */
void add_train_command(CLI::App& app);
/** `tessera generate`: samples text from a gpt/lstm checkpoint with a KV cache. */
void add_generate_command(CLI::App& app);
/** Parse and validate only, never run a command (the CLI fuzzer). */
void set_parse_only(bool on);
/** `tessera onnx test|run`: the ONNX node-test suite and ONNX models (onnx_cmd.cpp). */
void add_onnx_command(CLI::App& app);
/** `tessera bench`: the benchmark suites (perf/). */
void add_bench_command(CLI::App& app);

}  // namespace tessera::tools
