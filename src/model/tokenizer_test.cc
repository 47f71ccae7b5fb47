#include "src/model/tokenizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "src/model/model_test_util.h"

namespace kvtier::model {
namespace {

using testing::AppendBytes;
using testing::kNoModelMessage;
using testing::TestModelDir;

// A tokenizer file of (piece, score) records.
std::vector<std::byte> TokenizerBytes(const std::vector<std::pair<std::string, float>>& vocab) {
  std::vector<std::byte> bytes;
  const int32_t max_len = 16;
  AppendBytes(&bytes, &max_len, sizeof(max_len));
  for (const auto& [piece, score] : vocab) {
    const int32_t len = static_cast<int32_t>(piece.size());
    AppendBytes(&bytes, &score, sizeof(score));
    AppendBytes(&bytes, &len, sizeof(len));
    AppendBytes(&bytes, piece.data(), piece.size());
  }
  return bytes;
}

// Ids 0-2 specials, 3 " ", 4 "a", 5 "b", 6 "ab", 7 "ba", 8 " a", 9 "aba".
const std::vector<std::pair<std::string, float>> kToyVocab = {
    {"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}, {" ", 0}, {"a", 0},
    {"b", 0},     {"ab", -1},     {"ba", -2},      {" a", -3}, {"aba", -4}};

TEST(Llama2cTokenizerTest, MergesTheBestScoringPairFirst) {
  auto tok = Tokenizer::FromBytes(TokenizerBytes(kToyVocab), 10);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // " bab": [" ", "b", "a", "b"]; "ab" (-1) beats "ba" (-2): [" ", "b", "ab"]; then nothing.
  auto ids = (*tok)->Encode("bab", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{3, 5, 6}));
  // " aba": "ab" first -> [" ", "ab", "a"]; then " ab"? no; "aba" (-4) -> [" ", "aba"].
  ids = (*tok)->Encode("aba", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 3, 9}));
  // The dummy-prefix space after BOS is dropped on decoding.
  EXPECT_EQ((*tok)->DecodeAll(std::span(*ids).subspan(1)), "aba");
}

TEST(Llama2cTokenizerTest, LeftmostPairWinsATie) {
  auto tok = Tokenizer::FromBytes(TokenizerBytes(kToyVocab), 10);
  ASSERT_TRUE(tok.ok());
  // " abab": two "ab" pairs score the same; the left one merges first, then the right one.
  auto ids = (*tok)->Encode("abab", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{3, 6, 6}));
}

TEST(Llama2cTokenizerTest, UnknownBytesWithoutByteTokensAreAnError) {
  auto tok = Tokenizer::FromBytes(TokenizerBytes(kToyVocab), 10);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Encode("abc", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*tok)->Encode("", true)->size(), 1u);
}

TEST(Llama2cTokenizerTest, RejectsTruncatedOrPaddedFiles) {
  std::vector<std::byte> bytes = TokenizerBytes(kToyVocab);
  EXPECT_EQ(Tokenizer::FromBytes(bytes, 11).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromBytes(bytes, 9).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromBytes(std::span(bytes).first(bytes.size() - 1), 10).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromBytes(std::span(bytes).first(3), 10).status().code(),
            StatusCode::kInvalidArgument);
  // A record length past the end of the file.
  std::vector<std::byte> lying = TokenizerBytes({{"x", 0}});
  const int32_t huge = 1 << 30;
  std::memcpy(lying.data() + 8, &huge, sizeof(huge));
  EXPECT_EQ(Tokenizer::FromBytes(lying, 1).status().code(), StatusCode::kInvalidArgument);
}

class Llama2cRealTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = TestModelDir();
    if (dir.empty()) GTEST_SKIP() << kNoModelMessage;
    auto tok = Tokenizer::Load(dir + "/" + kTokenizerFile, 512);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = std::move(*tok);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Llama2cRealTokenizerTest, EncodesThePromptAsLlama2cDoes) {
  auto ids = tokenizer_->Encode("Once upon a time", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tokenizer_->Decode(1, 403), "Once");
  EXPECT_EQ(tokenizer_->Decode(403, 407), " upon");
}

TEST_F(Llama2cRealTokenizerTest, RoundTripsTextIncludingByteFallback) {
  for (const std::string text : {"Lily and Ben went to the park.", "tab\there\nnewline",
                                 "caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80", "\x01\x7f"}) {
    auto ids = tokenizer_->Encode(text, true);
    ASSERT_TRUE(ids.ok()) << text;
    EXPECT_EQ(tokenizer_->DecodeAll(std::span(*ids).subspan(1)), text);
  }
  // A code point absent from the 512-token vocabulary falls back to its UTF-8 bytes + 3.
  auto ids = tokenizer_->Encode("\xe2\x98\x83", false);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 4u);  // The dummy-prefix space, then three byte tokens.
  EXPECT_EQ(std::vector<int32_t>(ids->begin() + 1, ids->end()),
            (std::vector<int32_t>{0xe2 + 3, 0x98 + 3, 0x83 + 3}));
}

}  // namespace
}  // namespace kvtier::model
