// The GPT and char-LSTM language models: incremental decoding (KV cache / recurrent state)
// against full recomputation, generation with and without the cache, the text corpus reader's
// errors and split, and a short training run that must learn.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/checks.h"
#include "tessera/nn/lm_trainer.h"

using namespace tessera;
using namespace tessera::test;
using namespace tessera::nn;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tessera_lm_" + std::to_string(::getpid()) + "_" + name)).string();
}
void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
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

TEST_CASE("a short GPT run learns, checkpoints, and the checkpoint generates the same text") {
  const std::string dir = temp_path("train");
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  write(dir + "/text", text);
  const TextCorpus corpus = load_text_corpus(dir + "/text");
  manual_seed(1);
  GPT gpt(GPTConfig{corpus.vocab.size(), 32, 1, 2, 32, 0.0}, Placement{DType::f32, device()});
  LMTrainOptions o;
  o.steps = 60;
  o.batch = 8;
  o.context = 32;
  o.warmup = 5;
  o.eval_every = 30;
  o.eval_batches = 2;
  o.lr = 1e-2;
  o.checkpoint = dir + "/gpt.safetensors";
  o.metadata["model_config"] = R"({"model": "gpt", "layers": 1, "heads": 2, "dim": 32, "context": 32})";
  o.metadata["vocab"] = corpus.vocab.chars;
  const auto logs = train_language_model(gpt, corpus, o);
  REQUIRE(logs.size() == 2);
  CHECK(logs[1].val_loss < 1.5);  // from ln(28) = 3.3: the repeated sentence is learnable
  CharVocab vocab;
  const auto loaded = load_language_model(o.checkpoint, device(), vocab);
  CHECK(vocab.chars == corpus.vocab.chars);
  SampleOptions so;
  so.tokens = 20;
  so.temperature = 0;
  CHECK(generate(*loaded, vocab.encode("the "), so) == generate(gpt, vocab.encode("the "), so));
  std::filesystem::remove_all(dir);
}
