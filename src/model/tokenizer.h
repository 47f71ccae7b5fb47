// The BPE tokenizer of llama2.c checkpoints (the `tokenizer.bin` format).
//
// File format: int32 max_token_length, then vocab_size records of
// {float32 score, int32 length, `length` bytes}; vocab_size comes from the model header.
// Encoding follows llama2.c (and sentencepiece): optional BOS (1), a dummy-prefix space,
// one token per UTF-8 code point (or byte tokens <0xXX> = byte + 3 when the code point is
// not in the vocabulary), then repeated merging of the adjacent pair whose concatenation is
// in the vocabulary with the highest score (the leftmost pair wins a tie).
//
// Immutable after loading: const methods are safe to call from any thread.

#ifndef KVTIER_SRC_MODEL_TOKENIZER_H_
#define KVTIER_SRC_MODEL_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::model {

inline constexpr int32_t kBosToken = 1;
inline constexpr int32_t kEosToken = 2;

class Tokenizer {
 public:
  Tokenizer(const Tokenizer&) = delete;  // ids_ views into pieces_.
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Parses a tokenizer held in memory; the bytes must hold exactly `vocab_size` records.
  // InvalidArgument on anything else (truncated, padded, negative lengths).
  static Result<std::unique_ptr<Tokenizer>> FromBytes(std::span<const std::byte> bytes,
                                                      int32_t vocab_size);
  // Reads and parses the tokenizer file at `path`.
  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& path, int32_t vocab_size);

  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }

  // Tokens of `text`, preceded by BOS when `bos`. InvalidArgument when a byte has no token.
  Result<std::vector<int32_t>> Encode(std::string_view text, bool bos) const;

  // Text of `token` following `prev_token`: drops the leading space of the first piece after
  // BOS and turns byte tokens "<0xXX>" into their byte. Empty for an out-of-range token.
  std::string Decode(int32_t prev_token, int32_t token) const;

  // Concatenated Decode() of `tokens`, the first one taken as following BOS.
  std::string DecodeAll(std::span<const int32_t> tokens) const;

 private:
  Tokenizer() = default;
  // Id of `piece`, or -1.
  int32_t Lookup(std::string_view piece) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  // Keys view into pieces_; a duplicated piece maps to its lowest id.
  std::unordered_map<std::string_view, int32_t> ids_;
};

}  // namespace kvtier::model

#endif  // KVTIER_SRC_MODEL_TOKENIZER_H_
