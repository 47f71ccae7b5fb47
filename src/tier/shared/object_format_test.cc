#include "src/tier/shared/object_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "src/common/checksum.h"
#include "src/env/mem_env.h"
#include "src/services/encryption/key_manager.h"
#include "src/services/encryption/master_key.h"

namespace kvtier::g4 {
namespace {

BlockKey KeyOf(uint8_t seed) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(seed * 13 + i);
  return BlockKey(bytes);
}

std::vector<std::byte> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng() % 7);  // Compressible.
  return v;
}

TEST(ObjectFormatTest, PlainRoundTrip) {
  const std::vector<std::byte> value = Bytes(5000, 1);
  Result<std::vector<std::byte>> object =
      SealObject(nullptr, "acme", KeyOf(1), 42, 1234, KvDtype::kBf16, value);
  ASSERT_TRUE(object.ok()) << object.status().ToString();
  size_t header_bytes = 0;
  Result<ObjectHeader> h = DecodeObjectHeader(*object, &header_bytes);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(header_bytes, ObjectHeaderBytes(4));
  EXPECT_EQ(header_bytes % 8, 0u);
  EXPECT_EQ(h->tenant, "acme");
  EXPECT_EQ(h->key, KeyOf(1));
  EXPECT_EQ(h->session, 42u);
  EXPECT_EQ(h->created_us, 1234u);
  EXPECT_EQ(h->dtype, KvDtype::kBf16);
  EXPECT_EQ(h->value_bytes, 5000u);
  EXPECT_EQ(h->stored_bytes, 5000u);
  EXPECT_FALSE(h->payload.encrypted);
  Result<std::vector<std::byte>> back = OpenObject(nullptr, "acme", KeyOf(1), *object);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, value);
}

TEST(ObjectFormatTest, EmptyValueAndLongTenant) {
  const std::string tenant(255, 't');
  Result<std::vector<std::byte>> object = SealObject(nullptr, tenant, KeyOf(2), 0, 1, {}, {});
  ASSERT_TRUE(object.ok());
  EXPECT_LE(object->size(), kMaxObjectHeaderBytes);
  Result<std::vector<std::byte>> back = OpenObject(nullptr, tenant, KeyOf(2), *object);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->empty());
  EXPECT_FALSE(SealObject(nullptr, "", KeyOf(2), 0, 1, {}, {}).ok());
  EXPECT_FALSE(SealObject(nullptr, std::string(256, 't'), KeyOf(2), 0, 1, {}, {}).ok());
}

TEST(ObjectFormatTest, EveryTruncationIsDataLoss) {
  const std::vector<std::byte> value = Bytes(100, 3);
  std::vector<std::byte> object = *SealObject(nullptr, "t", KeyOf(3), 0, 1, {}, value);
  for (size_t n = 0; n < object.size(); ++n) {
    std::vector<std::byte> cut(object.begin(), object.begin() + static_cast<ptrdiff_t>(n));
    bool bad = false;
    Result<std::vector<std::byte>> r = OpenObject(nullptr, "t", KeyOf(3), cut, &bad);
    ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << "length " << n;
    EXPECT_TRUE(bad);
  }
  object.push_back(std::byte{0});
  EXPECT_EQ(OpenObject(nullptr, "t", KeyOf(3), object).status().code(), StatusCode::kDataLoss);
}

TEST(ObjectFormatTest, EveryFlippedBitIsDataLoss) {
  const std::vector<std::byte> value = Bytes(64, 4);
  const std::vector<std::byte> object = *SealObject(nullptr, "tenant", KeyOf(4), 9, 1, {}, value);
  for (size_t i = 0; i < object.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> bad = object;
      bad[i] ^= std::byte(1u << bit);
      Result<std::vector<std::byte>> r = OpenObject(nullptr, "tenant", KeyOf(4), bad);
      // The version field flipped upward reads as "newer version"; everything else is loss.
      ASSERT_TRUE(r.status().code() == StatusCode::kDataLoss ||
                  r.status().code() == StatusCode::kFailedPrecondition)
          << "byte " << i << " bit " << bit << ": " << r.status().ToString();
    }
  }
}

TEST(ObjectFormatTest, GarbageAndWrongIdentityAreDataLoss) {
  std::vector<std::byte> garbage = Bytes(4096, 5);
  EXPECT_EQ(OpenObject(nullptr, "t", KeyOf(5), garbage).status().code(), StatusCode::kDataLoss);
  std::vector<std::byte> object = *SealObject(nullptr, "t", KeyOf(5), 0, 1, {}, Bytes(10, 5));
  std::vector<std::byte> copy = object;
  EXPECT_EQ(OpenObject(nullptr, "u", KeyOf(5), copy).status().code(), StatusCode::kDataLoss);
  copy = object;
  EXPECT_EQ(OpenObject(nullptr, "t", KeyOf(6), copy).status().code(), StatusCode::kDataLoss);
}

// Rewrites a field and re-seals the header checksum, as a buggy or hostile writer would.
std::vector<std::byte> Reseal(std::vector<std::byte> object, size_t offset,
                              std::span<const uint8_t> bytes) {
  std::memcpy(object.data() + offset, bytes.data(), bytes.size());
  size_t header_bytes = 0;
  uint16_t len = 0;
  std::memcpy(&len, object.data() + 6, 2);
  header_bytes = std::min<size_t>(len, object.size());
  if (header_bytes >= 8) {
    const uint64_t sum = Checksum64(std::span(object).first(header_bytes - 8));
    std::memcpy(object.data() + header_bytes - 8, &sum, 8);
  }
  return object;
}

TEST(ObjectFormatTest, NewerVersionIsFailedPrecondition) {
  std::vector<std::byte> object = *SealObject(nullptr, "t", KeyOf(7), 0, 1, {}, Bytes(10, 7));
  const uint8_t v2[2] = {2, 0};
  std::vector<std::byte> newer = Reseal(object, 4, v2);
  size_t n = 0;
  Result<ObjectHeader> h = DecodeObjectHeader(newer, &n);
  EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(h.status().message().find("newer format version 2"), std::string_view::npos);
  // Even with a broken checksum, a newer version is never interpreted.
  newer[30] ^= std::byte{1};
  EXPECT_EQ(DecodeObjectHeader(newer, &n).status().code(), StatusCode::kFailedPrecondition);
}

TEST(ObjectFormatTest, ResealedBadFieldsAreDataLoss) {
  const std::vector<std::byte> object =
      *SealObject(nullptr, "t", KeyOf(8), 0, 1, {}, Bytes(10, 8));
  size_t n = 0;
  const uint8_t v0[2] = {0, 0};
  EXPECT_EQ(DecodeObjectHeader(Reseal(object, 4, v0), &n).status().code(), StatusCode::kDataLoss);
  const uint8_t flags[1] = {0x80};
  EXPECT_EQ(DecodeObjectHeader(Reseal(object, 8, flags), &n).status().code(),
            StatusCode::kDataLoss);
  const uint8_t codec[1] = {9};
  EXPECT_EQ(DecodeObjectHeader(Reseal(object, 9, codec), &n).status().code(),
            StatusCode::kDataLoss);
  const uint8_t dtype[1] = {99};
  EXPECT_EQ(DecodeObjectHeader(Reseal(object, 10, dtype), &n).status().code(),
            StatusCode::kDataLoss);
  const uint8_t tenant_len[1] = {0};
  EXPECT_EQ(DecodeObjectHeader(Reseal(object, 11, tenant_len), &n).status().code(),
            StatusCode::kDataLoss);
  const uint8_t huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x7f};
  EXPECT_EQ(DecodeObjectHeader(Reseal(object, 64, huge), &n).status().code(),
            StatusCode::kDataLoss);
  const uint8_t short_len[2] = {8, 0};
  EXPECT_EQ(DecodeObjectHeader(Reseal(object, 6, short_len), &n).status().code(),
            StatusCode::kDataLoss);
}

TEST(ObjectFormatTest, TenantComponents) {
  EXPECT_EQ(*TenantComponent("acme-prod_1"), "acme-prod_1");
  Result<std::string> odd = TenantComponent("../etc/passwd");
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->size(), 65u);
  EXPECT_EQ((*odd)[0], '~');
  EXPECT_EQ(odd->find('/'), std::string::npos);
  EXPECT_NE(*TenantComponent("a b"), *TenantComponent("a_b"));
  EXPECT_EQ(TenantComponent(std::string(65, 'a'))->size(), 65u);  // Long: hashed.
  EXPECT_FALSE(TenantComponent("").ok());
  EXPECT_FALSE(TenantComponent(std::string(256, 'a')).ok());
}

TEST(ObjectFormatTest, Names) {
  const BlockKey key = KeyOf(9);
  const std::string hex = key.ToHex();
  EXPECT_EQ(ObjectName("acme", key),
            "kvtier-g4/v1/objects/acme/" + hex.substr(0, 2) + "/" + hex);
  EXPECT_EQ(SessionMarkerName("acme", 0x1f, key),
            "kvtier-g4/v1/sessions/acme/000000000000001f/" + hex);
}

class ObjectCodecTest : public ::testing::Test {
 protected:
  std::unique_ptr<encryption::KeyManager> OpenKeys(const std::string& dir, char master) {
    EXPECT_TRUE(env_->CreateDir(dir).ok());
    Result<std::unique_ptr<encryption::KeyManager>> keys = encryption::KeyManager::Open(
        env_.get(), dir, *encryption::MasterKey::FromHex(std::string(64, master)), {});
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    return keys.ok() ? std::move(*keys) : nullptr;
  }
  std::unique_ptr<Env> env_ = NewMemEnv(Env::Default());
};

TEST_F(ObjectCodecTest, EncryptedRoundTripAndForeignKey) {
  auto keys_a = OpenKeys("/a", 'a');
  auto keys_b = OpenKeys("/b", 'b');
  auto codec_a = BlockCodec::Create({true, true}, keys_a.get()).value();
  auto codec_b = BlockCodec::Create({true, true}, keys_b.get()).value();
  const std::vector<std::byte> value = Bytes(8192, 10);
  std::vector<std::byte> object =
      *SealObject(codec_a.get(), "acme", KeyOf(10), 1, 1, KvDtype::kBf16, value);
  size_t n = 0;
  EXPECT_TRUE(DecodeObjectHeader(object, &n)->payload.encrypted);
  // The plaintext is not in the object.
  EXPECT_EQ(std::search(object.begin(), object.end(), value.begin(), value.begin() + 64),
            object.end());
  std::vector<std::byte> copy = object;
  EXPECT_EQ(*OpenObject(codec_a.get(), "acme", KeyOf(10), copy), value);
  // A node whose keystore never saw the tenant: a miss, and the object is not "bad".
  copy = object;
  bool bad = true;
  Result<std::vector<std::byte>> foreign = OpenObject(codec_b.get(), "acme", KeyOf(10), copy, &bad);
  EXPECT_FALSE(foreign.ok());
  EXPECT_FALSE(bad);
  // No data services at all: a clear error, never ciphertext.
  copy = object;
  EXPECT_EQ(OpenObject(nullptr, "acme", KeyOf(10), copy).status().code(),
            StatusCode::kFailedPrecondition);
  // Shredded tenant: FailedPrecondition.
  ASSERT_TRUE(keys_a->ShredTenant("acme", "test").ok());
  copy = object;
  Result<std::vector<std::byte>> shredded = OpenObject(codec_a.get(), "acme", KeyOf(10), copy);
  EXPECT_TRUE(BlockCodec::IsShredded(shredded.status())) << shredded.status().ToString();
}

TEST_F(ObjectCodecTest, CompressedRoundTrip) {
  auto codec = BlockCodec::Create({true, false}, nullptr).value();
  const std::vector<std::byte> value = Bytes(1 << 16, 11);
  std::vector<std::byte> object =
      *SealObject(codec.get(), "acme", KeyOf(11), 0, 1, KvDtype::kFp16, value);
  EXPECT_LT(object.size(), value.size());
  EXPECT_EQ(*OpenObject(codec.get(), "acme", KeyOf(11), object), value);
}

}  // namespace
}  // namespace kvtier::g4
