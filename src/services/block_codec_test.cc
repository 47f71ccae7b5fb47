#include "src/services/block_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "src/env/mem_env.h"
#include "src/services/compression/dtype_convert.h"
#include "src/services/encryption/key_manager.h"
#include "src/services/encryption/master_key.h"

namespace kvtier {
namespace {

constexpr uint16_t kFormat = 7;

BlockKey KeyOf(uint8_t seed) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(seed * 7 + i);
  return BlockKey(bytes);
}

// bf16 values shaped like KV activations: normal around zero, a few outliers.
std::vector<std::byte> Bf16Block(size_t elements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<std::byte> out(elements * 2);
  for (size_t i = 0; i < elements; ++i) {
    const float f = dist(rng);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    const uint16_t b = static_cast<uint16_t>(bits >> 16);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

std::vector<std::byte> RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(size);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

class BlockCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_->CreateDir("/keys").ok());
    Result<std::unique_ptr<encryption::KeyManager>> keys = encryption::KeyManager::Open(
        env_.get(), "/keys", *encryption::MasterKey::FromHex(std::string(64, 'c')), {});
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    keys_ = std::move(*keys);
  }

  std::unique_ptr<BlockCodec> Make(bool compress, bool encrypt) {
    Result<std::unique_ptr<BlockCodec>> codec =
        BlockCodec::Create({compress, encrypt}, encrypt ? keys_.get() : nullptr);
    EXPECT_TRUE(codec.ok()) << codec.status().ToString();
    return codec.ok() ? std::move(*codec) : nullptr;
  }

  struct Encoded {
    std::vector<std::byte> payload;
    PayloadInfo info;
  };
  Encoded Encode(BlockCodec* codec, std::string_view tenant, const BlockKey& key,
                 std::optional<KvDtype> dtype, const std::vector<std::byte>& value) {
    Encoded e;
    e.payload.resize(codec->MaxEncodedBytes(value.size()));
    Result<size_t> size = codec->Encode(kFormat, tenant, key, dtype, value, e.payload, &e.info);
    EXPECT_TRUE(size.ok()) << size.status().ToString();
    e.payload.resize(size.ok() ? *size : 0);
    return e;
  }

  // Decodes a copy of `e` (Decode may overwrite its input); a failure must leave no bytes.
  Status Decode(BlockCodec* codec, std::string_view tenant, const BlockKey& key, Encoded e,
                size_t value_bytes, std::vector<std::byte>* out) {
    out->assign(value_bytes, std::byte{0x5A});
    Status s = codec->Decode(kFormat, tenant, key, e.info, e.payload, *out);
    if (!s.ok()) {
      EXPECT_EQ(*out, std::vector<std::byte>(value_bytes, std::byte{0}));
    }
    return s;
  }

  std::unique_ptr<Env> env_ = NewMemEnv(Env::Default());
  std::unique_ptr<encryption::KeyManager> keys_;
};

TEST_F(BlockCodecTest, EveryCombinationRoundTripsEveryKind) {
  const std::vector<std::byte> kv = Bf16Block(64 * 1024, 1);
  const std::vector<std::byte> noise = RandomBytes(100 * 1000 + 3, 2);
  const std::vector<std::byte> one = {std::byte{42}};
  for (bool compress : {false, true}) {
    for (bool encrypt : {false, true}) {
      std::unique_ptr<BlockCodec> codec = Make(compress, encrypt);
      ASSERT_NE(codec, nullptr);
      for (const auto* value : {&kv, &noise, &one}) {
        for (std::optional<KvDtype> dtype :
             {std::optional<KvDtype>(KvDtype::kBf16), std::optional<KvDtype>()}) {
          SCOPED_TRACE(testing::Message() << compress << encrypt << value->size());
          Encoded e = Encode(codec.get(), "acme", KeyOf(1), dtype, *value);
          EXPECT_EQ(e.info.encrypted, encrypt);
          if (!encrypt) {
            EXPECT_EQ(e.info.key_version, 0u);
          }
          std::vector<std::byte> out;
          ASSERT_TRUE(Decode(codec.get(), "acme", KeyOf(1), e, value->size(), &out).ok());
          EXPECT_EQ(out, *value);
        }
      }
    }
  }
}

TEST_F(BlockCodecTest, CompressesKvAndStoresNoiseAsIs) {
  std::unique_ptr<BlockCodec> codec = Make(true, false);
  const std::vector<std::byte> kv = Bf16Block(256 * 1024, 3);
  Encoded e = Encode(codec.get(), "acme", KeyOf(1), KvDtype::kBf16, kv);
  EXPECT_EQ(e.info.codec, kPayloadCodecKv);
  EXPECT_LT(e.payload.size() * 5, kv.size() * 4) << "bf16 KV should shrink by over 1.25:1";
  const std::vector<std::byte> noise = RandomBytes(256 * 1024, 4);
  Encoded n = Encode(codec.get(), "acme", KeyOf(1), std::nullopt, noise);
  EXPECT_EQ(n.info.codec, kPayloadCodecNone);
  EXPECT_EQ(n.payload, noise);
}

TEST_F(BlockCodecTest, EncryptedPayloadDoesNotContainThePlaintext) {
  std::unique_ptr<BlockCodec> codec = Make(false, true);
  std::vector<std::byte> value(4096, std::byte{'A'});
  Encoded e = Encode(codec.get(), "acme", KeyOf(1), std::nullopt, value);
  ASSERT_EQ(e.payload.size(), value.size());
  EXPECT_NE(e.payload, value);
  EXPECT_EQ(std::search(e.payload.begin(), e.payload.end(), value.begin(), value.begin() + 16),
            e.payload.end());
}

TEST_F(BlockCodecTest, TamperWrongTenantWrongKeyAndWrongFormatAreDataLoss) {
  std::unique_ptr<BlockCodec> codec = Make(true, true);
  const std::vector<std::byte> kv = Bf16Block(16 * 1024, 5);
  Encoded e = Encode(codec.get(), "acme", KeyOf(1), KvDtype::kBf16, kv);
  std::vector<std::byte> out;
  for (size_t at : {size_t{0}, e.payload.size() / 2, e.payload.size() - 1}) {
    Encoded bad = e;
    bad.payload[at] ^= std::byte{1};
    EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(1), bad, kv.size(), &out).code(),
              StatusCode::kDataLoss);
  }
  Encoded bad_tag = e;
  bad_tag.info.tag[3] ^= 1;
  EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(1), bad_tag, kv.size(), &out).code(),
            StatusCode::kDataLoss);
  // Another tenant's key (that tenant has a key too) and another block's key.
  Encode(codec.get(), "other", KeyOf(2), KvDtype::kBf16, kv);
  EXPECT_EQ(Decode(codec.get(), "other", KeyOf(1), e, kv.size(), &out).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(2), e, kv.size(), &out).code(),
            StatusCode::kDataLoss);
  // Relabelled as uncompressed, with the length made to match: the ciphertext is bound to the
  // codec and the length, so this fails instead of serving the compressed bytes as the block.
  ASSERT_EQ(e.info.codec, kPayloadCodecKv);
  Encoded relabelled = e;
  relabelled.info.codec = kPayloadCodecNone;
  EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(1), relabelled, e.payload.size(), &out).code(),
            StatusCode::kDataLoss);
  out.assign(kv.size(), std::byte{0});
  Encoded copy = e;
  EXPECT_EQ(codec->Decode(kFormat + 1, "acme", KeyOf(1), copy.info, copy.payload, out).code(),
            StatusCode::kDataLoss);
}

TEST_F(BlockCodecTest, TruncatedCompressedPayloadAndUnknownCodecAreClearErrors) {
  std::unique_ptr<BlockCodec> codec = Make(true, false);
  const std::vector<std::byte> kv = Bf16Block(16 * 1024, 6);
  Encoded e = Encode(codec.get(), "acme", KeyOf(1), KvDtype::kBf16, kv);
  ASSERT_EQ(e.info.codec, kPayloadCodecKv);
  std::vector<std::byte> out;
  for (size_t keep : {size_t{0}, size_t{5}, e.payload.size() / 2, e.payload.size() - 1}) {
    Encoded cut = e;
    cut.payload.resize(keep);
    EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(1), cut, kv.size(), &out).code(),
              StatusCode::kDataLoss)
        << keep;
  }
  // The record says the block is larger than the payload holds.
  EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(1), e, kv.size() + 2, &out).code(),
            StatusCode::kDataLoss);
  Encoded future = e;
  future.info.codec = 9;
  EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(1), future, kv.size(), &out).code(),
            StatusCode::kInvalidArgument);
  Encoded raw = Encode(codec.get(), "acme", KeyOf(1), std::nullopt, RandomBytes(100, 7));
  raw.payload.pop_back();
  EXPECT_EQ(Decode(codec.get(), "acme", KeyOf(1), raw, 100, &out).code(), StatusCode::kDataLoss);
}

TEST_F(BlockCodecTest, ShreddingMakesSealedRecordsUnreadableAndNewOnesUseAFreshKey) {
  std::unique_ptr<BlockCodec> codec = Make(true, true);
  const std::vector<std::byte> kv = Bf16Block(8 * 1024, 8);
  Encoded before = Encode(codec.get(), "acme", KeyOf(1), KvDtype::kBf16, kv);
  std::vector<std::byte> out;
  ASSERT_TRUE(Decode(codec.get(), "acme", KeyOf(1), before, kv.size(), &out).ok());
  ASSERT_TRUE(keys_->ShredTenant("acme", "test").ok());
  Status s = Decode(codec.get(), "acme", KeyOf(1), before, kv.size(), &out);
  EXPECT_TRUE(BlockCodec::IsShredded(s)) << s.ToString();
  Encoded after = Encode(codec.get(), "acme", KeyOf(1), KvDtype::kBf16, kv);
  EXPECT_GT(after.info.key_version, before.info.key_version);
  EXPECT_TRUE(Decode(codec.get(), "acme", KeyOf(1), after, kv.size(), &out).ok());
}

TEST_F(BlockCodecTest, EncryptionNeedsKeysAndPlainCodecCannotOpenSealedRecords) {
  EXPECT_EQ(BlockCodec::Create({true, true}, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  std::unique_ptr<BlockCodec> sealing = Make(false, true);
  Encoded e = Encode(sealing.get(), "acme", KeyOf(1), std::nullopt, RandomBytes(64, 9));
  std::unique_ptr<BlockCodec> plain = Make(false, false);
  std::vector<std::byte> out;
  EXPECT_TRUE(BlockCodec::IsShredded(Decode(plain.get(), "acme", KeyOf(1), e, 64, &out)));
}

TEST_F(BlockCodecTest, ConcurrentCallersEachGetTheirOwnBytes) {
  std::unique_ptr<BlockCodec> codec = Make(true, true);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::vector<std::byte> kv = Bf16Block(4096, t * 100 + i);
        const BlockKey key = KeyOf(static_cast<uint8_t>(t * 20 + i));
        std::vector<std::byte> payload(codec->MaxEncodedBytes(kv.size()));
        PayloadInfo info;
        Result<size_t> size = codec->Encode(kFormat, "acme", key, KvDtype::kBf16, kv, payload, &info);
        std::vector<std::byte> out(kv.size());
        if (!size.ok() ||
            !codec->Decode(kFormat, "acme", key, info, std::span(payload).first(*size), out).ok() ||
            out != kv) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace kvtier
