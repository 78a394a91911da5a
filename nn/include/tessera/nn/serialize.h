#pragma once
// safetensors files (the format of Hugging Face's safetensors library):
//   [u64 little-endian N][N bytes of JSON header, space-padded][data]
// header: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//          "__metadata__": {"key": "value"}}; offsets are relative to the data section, which
// the tensors cover exactly (no gaps, no overlap). Files written here load in PyTorch's
// safetensors and vice versa.
#include <map>
#include <string>

#include "tessera/nn/module.h"

namespace tessera::nn {

using Metadata = std::map<std::string, std::string>;

/**
 * Writes `tensors` and `metadata` atomically: a temporary file in the same directory is
 * written, fsync'd and renamed over `path`, so a crash leaves either the old or the new file.
 */
void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata = {});

struct SafetensorsContent {
  StateDict tensors;
  Metadata metadata;
};
/** Reads a safetensors file; throws tessera::Error naming the file on any inconsistency. */
SafetensorsContent load_safetensors(const std::string& path, Device device = kCPU);
/** load_safetensors on the bytes of a file already in memory; `name` appears in error messages. */
SafetensorsContent parse_safetensors(const std::string& bytes, const std::string& name, Device device = kCPU);
/** Only the "__metadata__" of a safetensors file (reads the header, not the data). */
Metadata read_safetensors_metadata(const std::string& path);

}  // namespace tessera::nn
