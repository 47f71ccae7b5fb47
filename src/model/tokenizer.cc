#include "src/model/tokenizer.h"

#include <bit>
#include <cstring>

#include "src/model/model_files.h"

namespace kvtier::model {
namespace {

static_assert(std::endian::native == std::endian::little,
              "tokenizer files are little-endian and read in place");

constexpr int32_t kFirstByteToken = 3;  // <0x00>; byte b has token b + 3.

// Reads a little-endian 4-byte value at *offset and advances it; false when out of bytes.
template <typename T>
bool ReadValue(std::span<const std::byte> bytes, size_t* offset, T* value) {
  static_assert(sizeof(T) == 4);
  if (bytes.size() - *offset < sizeof(T)) return false;
  std::memcpy(value, bytes.data() + *offset, sizeof(T));
  *offset += sizeof(T);
  return true;
}

// Parses "<0xXX>" (upper- or lower-case hex); false for anything else.
bool ParseByteToken(std::string_view piece, unsigned char* byte) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return false;
  unsigned value = 0;
  for (char ch : piece.substr(3, 2)) {
    value <<= 4;
    if (ch >= '0' && ch <= '9') {
      value |= static_cast<unsigned>(ch - '0');
    } else if (ch >= 'A' && ch <= 'F') {
      value |= static_cast<unsigned>(ch - 'A' + 10);
    } else if (ch >= 'a' && ch <= 'f') {
      value |= static_cast<unsigned>(ch - 'a' + 10);
    } else {
      return false;
    }
  }
  *byte = static_cast<unsigned char>(value);
  return true;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromBytes(std::span<const std::byte> bytes,
                                                        int32_t vocab_size) {
  if (vocab_size <= 0) return Status::InvalidArgument("tokenizer: vocab_size must be positive");
  size_t offset = 0;
  int32_t max_token_length = 0;
  if (!ReadValue(bytes, &offset, &max_token_length) || max_token_length <= 0) {
    return Status::InvalidArgument("tokenizer: missing or invalid max_token_length");
  }
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->pieces_.reserve(vocab_size);
  tok->scores_.reserve(vocab_size);
  for (int32_t i = 0; i < vocab_size; ++i) {
    float score = 0.0f;
    int32_t length = 0;
    if (!ReadValue(bytes, &offset, &score) || !ReadValue(bytes, &offset, &length) ||
        length < 0 || length > max_token_length ||
        bytes.size() - offset < static_cast<size_t>(length)) {
      return Status::InvalidArgument("tokenizer: record " + std::to_string(i) +
                                     " is truncated or has an invalid length");
    }
    tok->pieces_.emplace_back(reinterpret_cast<const char*>(bytes.data() + offset), length);
    tok->scores_.push_back(score);
    offset += length;
  }
  if (offset != bytes.size()) {
    return Status::InvalidArgument("tokenizer: " + std::to_string(bytes.size() - offset) +
                                   " bytes follow the last of " + std::to_string(vocab_size) +
                                   " records");
  }
  for (int32_t i = 0; i < vocab_size; ++i) tok->ids_.emplace(tok->pieces_[i], i);
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path, int32_t vocab_size) {
  Result<std::vector<std::byte>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  Result<std::unique_ptr<Tokenizer>> tok = FromBytes(*bytes, vocab_size);
  if (!tok.ok()) {
    return Status(tok.status().code(), path + ": " + std::string(tok.status().message()));
  }
  return tok;
}

int32_t Tokenizer::Lookup(std::string_view piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool bos) const {
  std::vector<int32_t> tokens;
  if (bos) tokens.push_back(kBosToken);
  if (!text.empty()) {
    const int32_t space = Lookup(" ");
    if (space < 0) return Status::InvalidArgument("tokenizer: the vocabulary has no space");
    tokens.push_back(space);
  }
  // One token per UTF-8 code point (at most 4 bytes), byte tokens as the fallback.
  size_t i = 0;
  while (i < text.size()) {
    size_t end = i + 1;
    while (end < text.size() && end - i < 4 &&
           (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
      ++end;
    }
    const std::string_view code_point = text.substr(i, end - i);
    const int32_t id = Lookup(code_point);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (char ch : code_point) {
        const int32_t byte_id = static_cast<unsigned char>(ch) + kFirstByteToken;
        if (byte_id >= vocab_size()) {
          return Status::InvalidArgument("tokenizer: no token for byte " +
                                         std::to_string(static_cast<unsigned char>(ch)));
        }
        tokens.push_back(byte_id);
      }
    }
    i = end;
  }
  // Merge the best-scoring adjacent pair until no pair is in the vocabulary.
  const size_t first = bos ? 1 : 0;
  std::string merged;
  while (true) {
    float best_score = 0.0f;
    int32_t best_id = -1;
    size_t best_index = 0;
    for (size_t t = first; t + 1 < tokens.size(); ++t) {
      merged = pieces_[tokens[t]];
      merged += pieces_[tokens[t + 1]];
      const int32_t id = Lookup(merged);
      if (id >= 0 && (best_id < 0 || scores_[id] > best_score)) {
        best_score = scores_[id];
        best_id = id;
        best_index = t;
      }
    }
    if (best_id < 0) break;
    tokens[best_index] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_index) + 1);
  }
  return tokens;
}

std::string Tokenizer::Decode(int32_t prev_token, int32_t token) const {
  if (token < 0 || token >= vocab_size()) return "";
  std::string_view piece = pieces_[token];
  if (prev_token == kBosToken && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
  unsigned char byte = 0;
  if (ParseByteToken(piece, &byte)) return std::string(1, static_cast<char>(byte));
  return std::string(piece);
}

std::string Tokenizer::DecodeAll(std::span<const int32_t> tokens) const {
  std::string text;
  int32_t prev = kBosToken;
  for (int32_t token : tokens) {
    text += Decode(prev, token);
    prev = token;
  }
  return text;
}

}  // namespace kvtier::model
