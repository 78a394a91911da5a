#pragma once
// Sub-commands of the `tessera` tool; each registers its options on the CLI11 app.
#include <CLI/CLI.hpp>

namespace tessera::tools {

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
