#pragma once
// Language-model checkpoints: the Trainer's format (tessera-checkpoint-1) with the model's
// config and vocabulary beside the weights, so `tessera generate` rebuilds the model from the
// file alone. Training itself is the one Trainer's (trainer.h) over a WindowSource (text_data.h).
#include <memory>
#include <string>

#include "tessera/nn/language_model.h"
#include "tessera/nn/serialize.h"
#include "tessera/nn/text_data.h"

namespace tessera::nn {

/**
 * The checkpoint entries that describe a language model: "model_config" (JSON text: model
 * "gpt" or "lstm", layers, dim, and for the gpt heads and context) and its vocabulary (as hex:
 * the bytes need not be valid UTF-8). Pass as TrainOptions::metadata.
 */
Metadata language_model_metadata(const std::string& model_config_json, const CharVocab& vocab);

/**
 * Reads a checkpoint of a language model (from `tessera train --model gpt|lstm`, or the older
 * tessera-lm-1 files): checks its config against its tensors before building anything, rebuilds
 * the model on `device`, loads its weights (refusing non-finite ones) and returns it in eval
 * mode; `vocab` receives the vocabulary.
 */
std::shared_ptr<LanguageModel> load_language_model(const std::string& path, Device device, CharVocab& vocab);

}  // namespace tessera::nn
