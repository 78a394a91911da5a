// libFuzzer target: the IDX reader (raw and gzip) on arbitrary bytes. Every input must load or
// throw tessera::Error; a crash, a sanitizer report or another exception type is a finding.
#include <cstdint>
#include <string>

#include "tessera/nn/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tessera::Tensor t = tessera::nn::parse_idx(std::string(reinterpret_cast<const char*>(data), size), "fuzz.idx");
    if (t.numel() > 0) (void)t.to_vector<uint8_t>().back();  // the data is really there
  } catch (const tessera::Error&) {
  }
  return 0;
}
