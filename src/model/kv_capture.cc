#include "src/model/kv_capture.h"

#include "src/model/model_files.h"
#include "src/model/tokenizer.h"

namespace kvtier::model {

Result<CapturedKv> CaptureKv(const std::string& model_dir, std::string_view prompt,
                             size_t positions) {
  Result<std::unique_ptr<Llama2cModel>> model =
      Llama2cModel::Load(model_dir + "/" + kCheckpointFile);
  if (!model.ok()) return model.status();
  const Llama2cConfig& config = (*model)->config();
  Result<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(model_dir + "/" + kTokenizerFile, config.vocab_size);
  if (!tokenizer.ok()) return tokenizer.status();
  Result<std::vector<int32_t>> prompt_tokens = (*tokenizer)->Encode(prompt, true);
  if (!prompt_tokens.ok()) return prompt_tokens.status();
  if (positions == 0 || positions > static_cast<size_t>(config.seq_len) ||
      positions < prompt_tokens->size()) {
    return Status::InvalidArgument("cannot capture " + std::to_string(positions) +
                                   " positions: the prompt takes " +
                                   std::to_string(prompt_tokens->size()) + ", seq_len is " +
                                   std::to_string(config.seq_len));
  }
  Llama2cSession session(**model);
  // The last generated token is not fed back, so ask for one more than the cache needs.
  Result<std::vector<int32_t>> generated =
      GenerateGreedy(session, *prompt_tokens, positions - prompt_tokens->size() + 1, false);
  if (!generated.ok()) return generated.status();
  CapturedKv kv;
  kv.config = config;
  kv.positions = positions;
  kv.tokens = *prompt_tokens;
  kv.tokens.insert(kv.tokens.end(), generated->begin(), generated->end());
  kv.tokens.resize(positions);
  kv.text = (*tokenizer)->DecodeAll(std::span(kv.tokens).subspan(1));
  KVTIER_RETURN_IF_ERROR(session.ExportKv(positions, &kv.k, &kv.v));
  return kv;
}

}  // namespace kvtier::model
