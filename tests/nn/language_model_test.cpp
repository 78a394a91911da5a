// The GPT and char-LSTM language models: incremental decoding (KV cache / recurrent state)
// against full recomputation, generation with and without the cache, the text corpus reader's
// errors and split, and a short training run that must learn.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/checks.h"
#include "tessera/nn/lm_checkpoint.h"
#include "tessera/nn/trainer.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tessera_lm_" + std::to_string(::getpid()) + "_" + name)).string();
}
void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
std::vector<int64_t> values(const Tensor& t) { return t.contiguous().to(kCPU).to_vector<int64_t>(); }
Tensor tokens_of(const std::vector<int64_t>& t) { return from_vector(t, {1, static_cast<int64_t>(t.size())}, device()); }
}  // namespace

TEST_CASE("GPT decoding with the KV cache gives the logits of the full forward pass") {
  manual_seed(3);
  GPT gpt(GPTConfig{11, 16, 2, 2, 16, 0.0}, Placement{DType::f32, device()});
  gpt.eval();
  NoGradGuard no_grad;
  const std::vector<int64_t> seq{1, 4, 2, 8, 5, 7, 3, 9, 0, 10};
  const Tensor full = gpt.forward(tokens_of(seq));  // [1, 10, 11]
  DecodeState state;
  const Tensor prefix = gpt.forward_incremental(tokens_of({seq.begin(), seq.begin() + 6}), state);
  CHECK(state.length == 6);
  TESSERA_CHECK_CLOSE(prefix, to_ref(full.narrow(1, 0, 6)), Tolerance{1e-5, 1e-5});
  for (size_t i = 6; i < seq.size(); ++i) {
    const Tensor step = gpt.forward_incremental(tokens_of({seq[i]}), state);
    TESSERA_CHECK_CLOSE(step, to_ref(full.narrow(1, static_cast<int64_t>(i), 1)), Tolerance{1e-5, 1e-5});
  }
  CHECK(state.tensors[0].size(2) == 10);  // the cache holds every position once
  TESSERA_CHECK_THROWS_WITH(gpt.forward_incremental(tokens_of(std::vector<int64_t>(7, 1)), state), "exceed the context of 16");
}

TEST_CASE("generation with the cache gives the same tokens as without, past the context window") {
  manual_seed(5);
  GPT gpt(GPTConfig{13, 12, 2, 2, 16, 0.0}, Placement{DType::f32, device()});
  CharLSTM lstm(CharLSTMConfig{13, 16, 2}, Placement{DType::f32, device()});
  for (LanguageModel* m : {static_cast<LanguageModel*>(&gpt), static_cast<LanguageModel*>(&lstm)}) {
    CAPTURE(m->name());
    SampleOptions o;
    o.tokens = 30;  // the GPT's window slides twice
    o.temperature = 1.5;
    o.top_k = 8;
    o.seed = 11;
    const std::vector<int64_t> cached = generate(*m, {1, 2, 3}, o);
    o.use_cache = false;
    const std::vector<int64_t> plain = generate(*m, {1, 2, 3}, o);
    CHECK(cached.size() == 33);
    CHECK(cached == plain);
    for (int64_t t : cached) CHECK((t >= 0 && t < 13));
  }
  TESSERA_CHECK_THROWS_WITH(generate(gpt, {}, SampleOptions{}), "generate: the prompt is empty");
  TESSERA_CHECK_THROWS_WITH(generate(gpt, {13}, SampleOptions{}), "token 13 is outside the vocabulary of 13");
}

TEST_CASE("the text corpus reader cleans, splits deterministically and rejects bad input") {
  const std::string dir = temp_path("corpus");
  std::filesystem::create_directories(dir);
  write(dir + "/b", "Second file.\n%\nA _\bb_\bo_\bl_\bd word.\n");
  write(dir + "/a", std::string(100, 'x') + "\n");
  write(dir + "/a.dat", std::string("\0\1\2", 3));  // an index: skipped
  const TextCorpus c = load_text_corpus(dir);
  const std::string text = c.vocab.decode(c.train) + c.vocab.decode(c.val);
  CHECK(text == std::string(100, 'x') + "\nSecond file.\n\nA bold word.\n");
  CHECK(c.val.size() == text.size() - static_cast<size_t>(static_cast<double>(text.size()) * 0.9));
  CHECK(c.vocab.decode(c.vocab.encode("A bold")) == "A bold");
  TESSERA_CHECK_THROWS_WITH(load_text_corpus(dir + "/missing"), "does not exist");
  write(dir + "/empty.txt", "");
  TESSERA_CHECK_THROWS_WITH(load_text_corpus(dir + "/empty.txt"), "too little to train on");
  write(dir + "/binary.bin", std::string("abc\0def", 7) + std::string(100, 'x'));
  TESSERA_CHECK_THROWS_WITH(load_text_corpus(dir + "/binary.bin"), "holds NUL bytes");
  TESSERA_CHECK_THROWS_WITH(c.vocab.encode("Z"), "is not in the model's vocabulary");
  std::filesystem::remove_all(dir);
}

namespace {
// A GPT trained by the one Trainer over text windows, as `tessera train --model gpt` does.
struct ShortGPTRun {
  TextCorpus corpus;
  std::shared_ptr<GPT> gpt;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<WindowSource> train, val;
  TrainOptions options;

  ShortGPTRun(const std::string& text_path, const std::string& checkpoint, int64_t steps, int64_t eval_every) {
    corpus = load_text_corpus(text_path);
    manual_seed(1);
    gpt = std::make_shared<GPT>(GPTConfig{corpus.vocab.size(), 32, 1, 2, 32, 0.0}, Placement{DType::f32, device()});
    OptimOptions oo;
    oo.lr = 1e-2;
    oo.weight_decay = 0.1;
    optimizer = std::make_unique<AdamW>(gpt->param_groups(oo));
    scheduler =
        std::make_unique<Scheduler>(*optimizer, std::make_shared<ChainedLR>(std::vector<std::shared_ptr<LRSchedule>>{
                                                    std::make_shared<LinearWarmup>(5, 0.01), std::make_shared<CosineLR>(steps, 0.1)}));
    WindowOptions w;
    w.batch = 8;
    w.context = 16;  // shorter than the model's 32: every window position is still trained
    w.batches_per_epoch = eval_every;
    w.total_batches = steps;
    w.seed = 7;
    w.device = device();
    train = std::make_unique<WindowSource>(corpus.train, w);
    w.batches_per_epoch = 2;
    w.total_batches = -1;
    w.seed = 1234;
    w.same_every_epoch = true;
    val = std::make_unique<WindowSource>(corpus.val, w);
    options.epochs = (steps + eval_every - 1) / eval_every;
    options.clip_norm = 1.0;
    options.checkpoint = checkpoint;
    options.metadata = language_model_metadata(R"({"model": "gpt", "layers": 1, "heads": 2, "dim": 32, "context": 32})", corpus.vocab);
  }
  std::vector<EpochStats> fit() {
    Trainer trainer(*gpt, *optimizer, scheduler.get(), next_token_loss);
    return trainer.fit(*train, val.get(), options);
  }
};
}  // namespace

TEST_CASE("a short GPT run in the Trainer learns, checkpoints, and the checkpoint generates the same text") {
  // Bit-identical resumption needs deterministic kernels: on GPUs the embedding gradient adds
  // with float atomics in arrival order otherwise.
  struct Deterministic {
    const bool was = deterministic();
    Deterministic() { set_deterministic(true); }
    ~Deterministic() { set_deterministic(was); }
  } deterministic_kernels;
  const std::string dir = temp_path("train");
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  write(dir + "/text", text);
  ShortGPTRun run(dir + "/text", dir + "/gpt.safetensors", 40, 20);
  const auto logs = run.fit();
  REQUIRE(logs.size() == 2);
  CHECK(logs[1].step == 40);
  CHECK(logs[1].test.loss < logs[0].test.loss);
  CHECK(logs[1].test.loss < 1.5);             // from ln(28) = 3.3: the repeated sentence is learnable
  CHECK(logs[1].test.samples == 2 * 8 * 16);  // validation counts tokens
  CharVocab vocab;
  const auto loaded = load_language_model(run.options.checkpoint, device(), vocab);
  CHECK(vocab.chars == run.corpus.vocab.chars);
  SampleOptions so;
  so.tokens = 20;
  so.temperature = 0;
  CHECK(generate(*loaded, vocab.encode("the "), so) == generate(*run.gpt, vocab.encode("the "), so));

  // Resumed after its first validation, a run ends with the uninterrupted run's checkpoint, bit
  // for bit: the windows of an epoch depend on (seed, epoch) alone, and the checkpoint holds the
  // optimizer, the schedule and the random state.
  ShortGPTRun half(dir + "/text", dir + "/half.safetensors", 40, 20);
  half.options.epochs = 1;
  half.fit();
  ShortGPTRun resumed(dir + "/text", dir + "/half.safetensors", 40, 20);
  resumed.options.resume = true;
  const auto rest = resumed.fit();
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].step == 40);
  std::ifstream a(dir + "/gpt.safetensors", std::ios::binary), b(dir + "/half.safetensors", std::ios::binary);
  const std::string bytes_a((std::istreambuf_iterator<char>(a)), {}), bytes_b((std::istreambuf_iterator<char>(b)), {});
  CHECK(bytes_a.size() > 1000);
  CHECK(bytes_a == bytes_b);
  std::filesystem::remove_all(dir);
}

TEST_CASE("WindowSource: an epoch's windows depend on the seed and the epoch alone; the last epoch is cut to the total") {
  std::vector<int64_t> tokens(500);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i % 37);
  WindowOptions w;
  w.batch = 3;
  w.context = 8;
  w.batches_per_epoch = 4;
  w.total_batches = 10;
  w.seed = 5;
  WindowSource a(tokens, w), b(tokens, w);
  a.start_epoch(1);
  Batch first, skipped, again;
  REQUIRE(a.next(first));
  b.start_epoch(0);
  b.next(skipped);
  b.start_epoch(1);
  REQUIRE(b.next(again));
  CHECK(values(first.x) == values(again.x));
  CHECK(values(first.y.slice(1, 0, 7)) == values(first.x.slice(1, 1, 8)));  // targets are the inputs shifted by one
  a.start_epoch(2);
  CHECK(a.batches() == 2);  // 10 - 2 x 4
  a.start_epoch(3);
  CHECK(a.batches() == 0);
  CHECK_FALSE(a.next(first));
  b.start_epoch(0);
  Batch e0;
  b.next(e0);
  CHECK(values(e0.x) != values(first.x));
  CHECK_THROWS_WITH_AS(WindowSource(std::vector<int64_t>(8), w), doctest::Contains("need more than 9"), Error);
}
