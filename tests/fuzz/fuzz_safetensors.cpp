// libFuzzer target: the safetensors reader on arbitrary bytes, header and data.
#include <cstdint>
#include <string>

#include "tessera/nn/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto content = tessera::nn::parse_safetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    for (const auto& [name, t] : content.tensors) {
      if (t.numel() > 0) (void)t.contiguous().to(tessera::DType::f64).to_vector<double>().back();
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
