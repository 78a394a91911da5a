// `tessera generate`: sampling from a language model's checkpoint (tessera train --model
// gpt|lstm --checkpoint F) with a KV cache, or without one to check it.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "tessera/nn/lm_checkpoint.h"
#include "train_args.h"

namespace tessera::tools {

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a gpt/lstm checkpoint (tessera train --model gpt --checkpoint F)");
  struct Args {
    std::string checkpoint, prompt = "\n", backend = "cpu";
    int64_t tokens = 300, top_k = 0, seed = 0;
    double temperature = 0.8;
    bool no_cache = false, compare = false;
  };
  static Args a;
  a = Args{};
  cmd->add_option("--checkpoint", a.checkpoint, "Checkpoint written by train --model gpt|lstm")->required();
  cmd->add_option("--prompt", a.prompt, "Text to continue (characters of the training text)")->capture_default_str();
  cmd->add_option("--tokens", a.tokens, "Characters to generate")->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--temperature", a.temperature, "Sampling temperature (0 = greedy)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--top-k", a.top_k, "Sample among the k likeliest (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Sampling seed")->check(exact_nonnegative_int64())->capture_default_str();
  cmd->add_option("--backend", a.backend, "cpu, cuda[:i], hip[:i], kokkos, emulated, auto")->capture_default_str();
  cmd->add_flag("--no-cache", a.no_cache, "Re-run the whole window for every token (the reference the KV cache must match)");
  cmd->add_flag("--compare", a.compare, "Generate with and without the cache and report whether the tokens agree");
  cmd->callback([] {
    const Device device = pick_device(a.backend);
    nn::CharVocab vocab;
    const auto model = nn::load_language_model(a.checkpoint, device, vocab);
    const std::vector<int64_t> prompt = vocab.encode(a.prompt);
    nn::SampleOptions o;
    o.tokens = a.tokens;
    o.temperature = a.temperature;
    o.top_k = a.top_k;
    o.seed = static_cast<uint64_t>(a.seed);
    o.use_cache = !a.no_cache;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int64_t> out = nn::generate(*model, prompt, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s\n", vocab.decode(out).c_str());
    std::fprintf(stderr, "generate: %lld tokens in %.2f s (%.0f tokens/s, %s)\n", static_cast<long long>(a.tokens), s,
                 static_cast<double>(a.tokens) / std::max(s, 1e-9), o.use_cache ? "kv cache" : "no cache");
    if (a.compare) {
      o.use_cache = !o.use_cache;
      const auto t1 = std::chrono::steady_clock::now();
      const std::vector<int64_t> other = nn::generate(*model, prompt, o);
      const double s2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      size_t same = 0;
      while (same < out.size() && same < other.size() && out[same] == other[same]) ++same;
      std::printf("compare: %s with and without the kv cache (%zu of %zu tokens agree); %.2f s vs %.2f s\n",
                  same == out.size() && out.size() == other.size() ? "identical" : "DIFFERENT", same, out.size(), s, s2);
      TESSERA_CHECK(same == out.size() && out.size() == other.size(), "generate", "tokens with and without the kv cache differ at ", same);
    }
  });
}

}  // namespace tessera::tools
