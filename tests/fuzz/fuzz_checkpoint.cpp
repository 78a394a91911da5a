// libFuzzer target: a training checkpoint loaded into a small model, Adam and a scheduler --
// metadata counters, optimizer state keys, shapes, dtypes and values all come from the input.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "tessera/nn/layers.h"
#include "tessera/nn/trainer.h"

using namespace tessera;
using namespace tessera::nn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tessera_fuzz_checkpoint_" + std::to_string(::getpid()) + ".safetensors";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  Sequential model(std::vector<ModulePtr>{std::make_shared<Linear>(2, 3), std::make_shared<ReLU>(), std::make_shared<Linear>(3, 2)});
  Adam adam(model.parameters(), OptimOptions{});
  Scheduler scheduler(adam, std::make_shared<CosineLR>(100));
  GradScaler scaler;
  Trainer trainer(model, adam, &scheduler);
  try {
    (void)read_safetensors_metadata(path);
    trainer.load_checkpoint(path, size % 2 == 0);
    adam.step();  // whatever was loaded must be usable
  } catch (const Error&) {
  }
  return 0;
}
