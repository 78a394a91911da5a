// Prints a digest of the bits of the CPU kernels' results on fixed inputs, one line per op.
// tests/cpu/isa_parity.cmake runs it under the AVX2 and the AVX-512 kernel sets and requires
// the same output: the row kernels promise identical bits whatever the ISA (lanes.h), and the
// AVX-512 set's hand-written rows (softmax_row_avx512.h) must keep that promise. Row lengths
// cover whole vectors, tails and one element; the inputs include NaN, +-inf, an all -inf row and
// signed zeros.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/tessera.h"

using namespace tessera;

namespace {
uint64_t fnv1a(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xffu)) * 1099511628211ull;
  }
  return h;
}

Tensor rows(int64_t n, uint64_t seed) {
  manual_seed(seed);
  std::vector<float> v = mul(randn({7, n}), 30.0).to_vector<float>();
  v[0] = NAN;
  v[static_cast<size_t>(n) + (n > 3 ? 2 : 0)] = -INFINITY;
  v[static_cast<size_t>(2 * n)] = INFINITY;
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(3 * n + j)] = -INFINITY;
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(4 * n + j)] = j % 3 == 0 ? -0.0f : 0.0f;
  v[static_cast<size_t>(5 * n)] = -200.0f;
  return from_vector<float>(v, {7, n});
}
}  // namespace

int main() {
  set_num_threads(2);
  for (const int64_t n : {1L, 5L, 16L, 17L, 64L, 65L, 1000L, 1024L, 4099L}) {
    const Tensor x = rows(n, static_cast<uint64_t>(n));
    const std::pair<const char*, Tensor> results[] = {
        {"softmax", softmax(x, -1)}, {"log_softmax", log_softmax(x, -1)}, {"layer_norm", layer_norm(x, 1)},
        {"sum", sum(x, {1})},         {"amax", amax(x, {1})},               {"exp", exp(x)},
        {"gelu", gelu(x)},            {"tanh", tanh(x)}};
    for (const auto& [name, t] : results) std::printf("%s n=%lld %016llx\n", name, static_cast<long long>(n), static_cast<unsigned long long>(fnv1a(t.to_vector<float>())));
  }
  return 0;
}
