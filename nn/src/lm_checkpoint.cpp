// Language-model checkpoints: the config and vocabulary entries, and rebuilding the model.
#include "tessera/nn/lm_checkpoint.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace tessera::nn {
namespace {
// Vocabulary bytes as hex: the corpus may hold bytes that are not valid UTF-8 on their own,
// and safetensors metadata is JSON text.
std::string to_hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    out += digits[u >> 4];
    out += digits[u & 15];
  }
  return out;
}
std::string from_hex(const std::string& h, const std::string& path) {
  auto val = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw Error(detail::concat("load_language_model: '", path, "' has a corrupt vocabulary"));
  };
  TESSERA_CHECK(h.size() % 2 == 0 && !h.empty(), "load_language_model", "'", path, "' has a corrupt vocabulary");
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) out.push_back(static_cast<char>(val(h[i]) * 16 + val(h[i + 1])));
  return out;
}

}  // namespace

Metadata language_model_metadata(const std::string& model_config_json, const CharVocab& vocab) {
  return Metadata{{"model_config", model_config_json}, {"vocab_hex", to_hex(vocab.chars)}};
}

std::shared_ptr<LanguageModel> load_language_model(const std::string& path, Device device, CharVocab& vocab) {
  const SafetensorsContent content = load_safetensors(path, device);
  const Metadata& m = content.metadata;
  auto get = [&](const char* key) {
    const auto it = m.find(key);
    TESSERA_CHECK(it != m.end(), "load_language_model", "'", path, "' is not a language-model checkpoint (no '", key,
                  "'; write one with tessera train --model gpt --checkpoint F)");
    return it->second;
  };
  // tessera-lm-1: the weights-only files written before language models trained in the Trainer.
  TESSERA_CHECK(get("format") == "tessera-checkpoint-1" || get("format") == "tessera-lm-1", "load_language_model", "'", path,
                "' has format '", get("format"), "', expected tessera-checkpoint-1");
  vocab.chars = from_hex(get("vocab_hex"), path);
  // The config is checked against the tensors before anything is built: a config that says a
  // million layers must not allocate them before load_state_dict could refuse the file.
  int64_t largest_extent = 0;
  for (const auto& [k, t] : content.tensors) {
    for (int64_t e : t.shape()) largest_extent = std::max(largest_extent, e);
  }
  const auto tensor_count = static_cast<int64_t>(content.tensors.size());
  const auto check_size = [&](const char* key, int64_t v, int64_t most) {
    TESSERA_CHECK(v >= 1 && v <= most, "load_language_model", "'", path, "' has model_config ", key, " ", v, ", which its ", tensor_count,
                  " tensors (largest extent ", largest_extent, ") cannot hold");
  };
  nlohmann::json cfg;
  std::shared_ptr<LanguageModel> model;
  try {
    cfg = nlohmann::json::parse(get("model_config"));
    check_size("layers", cfg.at("layers").get<int64_t>(), tensor_count);
    check_size("dim", cfg.at("dim").get<int64_t>(), largest_extent);
    if (cfg.contains("context")) check_size("context", cfg.at("context").get<int64_t>(), largest_extent);
    if (cfg.contains("heads")) check_size("heads", cfg.at("heads").get<int64_t>(), cfg.at("dim").get<int64_t>());
    const std::string kind = cfg.at("model").get<std::string>();
    const Placement place{DType::f32, device};
    if (kind == "gpt") {
      GPTConfig c;
      c.vocab = vocab.size();
      c.context = cfg.at("context").get<int64_t>();
      c.layers = cfg.at("layers").get<int64_t>();
      c.heads = cfg.at("heads").get<int64_t>();
      c.dim = cfg.at("dim").get<int64_t>();
      model = std::make_shared<GPT>(c, place);
    } else if (kind == "lstm") {
      CharLSTMConfig c;
      c.vocab = vocab.size();
      c.layers = cfg.at("layers").get<int64_t>();
      c.dim = cfg.at("dim").get<int64_t>();
      model = std::make_shared<CharLSTM>(c, place);
    } else {
      throw Error(detail::concat("load_language_model: '", path, "' holds an unknown model '", kind, "'"));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat("load_language_model: '", path, "' has a corrupt model_config: ", e.what()));
  }
  StateDict state;
  for (const auto& [k, t] : content.tensors) {
    if (k.rfind("model.", 0) == 0) state[k.substr(6)] = t;
  }
  model->load_state_dict(state);
  TESSERA_CHECK(tessera::all_finite(model->parameters()), "load_language_model", "'", path,
                "' holds non-finite weights (NaN or infinity): the run that wrote it diverged");
  model->eval();
  return model;
}

}  // namespace tessera::nn
