#pragma once
// Random number state. Every draw is Philox4x32-10 keyed by the generator's seed at its
// current offset; the offset then advances by one. So the same seed and the same sequence
// of draws give the same numbers on every backend and for every thread count.
#include <cstdint>

namespace tessera {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  /** Returns the offset for one draw and advances. */
  uint64_t next_offset() { return offset_++; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/** The process-wide default generator (not thread-safe; give threads their own). */
Generator& default_generator();
/** Reseeds the default generator. */
void manual_seed(uint64_t seed);

}  // namespace tessera
