#include "src/services/encryption/record_cipher.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "src/env/mem_env.h"
#include "src/services/encryption/key_manager.h"

namespace kvtier::encryption {
namespace {

constexpr uint16_t kFormat = 1;

BlockKey KeyOf(uint8_t seed) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(seed + i);
  return BlockKey(bytes);
}

std::vector<std::byte> Payload(size_t size, uint8_t seed) {
  std::vector<std::byte> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>((i * 131 + seed) & 0xFF);
  return out;
}

TEST(RecordAadTest, LayoutIsAsDocumented) {
  Result<RecordAad> aad = RecordAad::Build(0x0102, "ab", KeyOf(0));
  ASSERT_TRUE(aad.ok());
  std::vector<uint8_t> expected = {'K', 'V', 'A', '1', 0x02, 0x01, 2, 'a', 'b'};
  for (uint8_t i = 0; i < 32; ++i) expected.push_back(i);
  const auto bytes = aad->bytes();
  ASSERT_EQ(bytes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(bytes[i], std::byte{expected[i]}) << i;
  EXPECT_EQ(RecordAad::Build(1, "", KeyOf(0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecordAad::Build(1, std::string(256, 't'), KeyOf(0)).status().code(),
            StatusCode::kInvalidArgument);
  const std::array<std::byte, RecordAad::kMaxContextBytes> context{std::byte{9}};
  EXPECT_EQ(RecordAad::Build(1, std::string(255, 't'), KeyOf(0), context)->bytes().size(),
            RecordAad::kMaxBytes);
  EXPECT_EQ(RecordAad::Build(1, "ab", KeyOf(0), context)->bytes().back(), std::byte{0});
  EXPECT_EQ(RecordAad::Build(1, "ab", KeyOf(0), context)->bytes()[expected.size()],
            std::byte{9});
  const std::array<std::byte, RecordAad::kMaxContextBytes + 1> too_long{};
  EXPECT_EQ(RecordAad::Build(1, "ab", KeyOf(0), too_long).status().code(),
            StatusCode::kInvalidArgument);
}

class RecordCipherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_->CreateDir("/keys").ok());
    Result<std::unique_ptr<KeyManager>> keys =
        KeyManager::Open(env_.get(), "/keys", *MasterKey::FromHex(std::string(64, 'a')), {});
    ASSERT_TRUE(keys.ok());
    keys_ = std::move(*keys);
    Result<std::unique_ptr<RecordCipher>> cipher = RecordCipher::Create(keys_.get());
    ASSERT_TRUE(cipher.ok());
    cipher_ = std::move(*cipher);
  }

  SealedRecordInfo Seal(std::string_view tenant, const BlockKey& key,
                        const std::vector<std::byte>& plaintext, std::vector<std::byte>* out) {
    out->resize(plaintext.size());
    Result<SealedRecordInfo> info = cipher_->Seal(kFormat, tenant, key, plaintext, *out);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? *info : SealedRecordInfo{};
  }

  // Opens and checks that a failure leaves only zeros behind.
  Status Open(uint16_t format, std::string_view tenant, const BlockKey& key,
              const SealedRecordInfo& info, const std::vector<std::byte>& ciphertext,
              std::vector<std::byte>* plaintext) {
    plaintext->assign(ciphertext.size(), std::byte{0x5A});
    Status s = cipher_->Open(format, tenant, key, info, ciphertext, *plaintext);
    if (!s.ok()) {
      EXPECT_EQ(*plaintext, std::vector<std::byte>(ciphertext.size(), std::byte{0}));
    }
    return s;
  }

  std::unique_ptr<Env> env_ = NewMemEnv(Env::Default());
  std::unique_ptr<KeyManager> keys_;
  std::unique_ptr<RecordCipher> cipher_;
};

TEST_F(RecordCipherTest, RoundTrip) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{2} << 20}) {
    const std::vector<std::byte> plaintext = Payload(size, 3);
    std::vector<std::byte> ciphertext, opened;
    const SealedRecordInfo info = Seal("alice", KeyOf(1), plaintext, &ciphertext);
    EXPECT_EQ(info.key_version, 1u);
    ASSERT_TRUE(Open(kFormat, "alice", KeyOf(1), info, ciphertext, &opened).ok());
    EXPECT_EQ(opened, plaintext);
  }
}

TEST_F(RecordCipherTest, MisboundRecordsAreDataLoss) {
  const std::vector<std::byte> plaintext = Payload(8192, 9);
  std::vector<std::byte> ciphertext, opened, bob_ciphertext;
  const SealedRecordInfo info = Seal("alice", KeyOf(1), plaintext, &ciphertext);
  // bob has a key of the same version number: alice's record under bob's name and key fails.
  Seal("bob", KeyOf(1), plaintext, &bob_ciphertext);
  EXPECT_EQ(Open(kFormat, "bob", KeyOf(1), info, ciphertext, &opened).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(Open(kFormat, "alice", KeyOf(2), info, ciphertext, &opened).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(Open(kFormat + 1, "alice", KeyOf(1), info, ciphertext, &opened).code(),
            StatusCode::kDataLoss);
  SealedRecordInfo bad_nonce = info;
  bad_nonce.nonce[0] ^= 1;
  EXPECT_EQ(Open(kFormat, "alice", KeyOf(1), bad_nonce, ciphertext, &opened).code(),
            StatusCode::kDataLoss);
  SealedRecordInfo bad_tag = info;
  bad_tag.tag[15] ^= 1;
  EXPECT_EQ(Open(kFormat, "alice", KeyOf(1), bad_tag, ciphertext, &opened).code(),
            StatusCode::kDataLoss);
  std::vector<std::byte> bad_ciphertext = ciphertext;
  bad_ciphertext[100] ^= std::byte{1};
  EXPECT_EQ(Open(kFormat, "alice", KeyOf(1), info, bad_ciphertext, &opened).code(),
            StatusCode::kDataLoss);
  SealedRecordInfo unknown_version = info;
  unknown_version.key_version = 7;
  EXPECT_EQ(Open(kFormat, "alice", KeyOf(1), unknown_version, ciphertext, &opened).code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(Open(kFormat, "alice", KeyOf(1), info, ciphertext, &opened).ok());
}

TEST_F(RecordCipherTest, RotationKeepsOldRecordsReadable) {
  const std::vector<std::byte> plaintext = Payload(1000, 4);
  std::vector<std::byte> old_ciphertext, new_ciphertext, opened;
  const SealedRecordInfo old_info = Seal("alice", KeyOf(1), plaintext, &old_ciphertext);
  ASSERT_TRUE(keys_->RotateTenantKey("alice", "admin").ok());
  const SealedRecordInfo new_info = Seal("alice", KeyOf(1), plaintext, &new_ciphertext);
  EXPECT_EQ(old_info.key_version, 1u);
  EXPECT_EQ(new_info.key_version, 2u);
  ASSERT_TRUE(Open(kFormat, "alice", KeyOf(1), old_info, old_ciphertext, &opened).ok());
  EXPECT_EQ(opened, plaintext);
  ASSERT_TRUE(Open(kFormat, "alice", KeyOf(1), new_info, new_ciphertext, &opened).ok());
  EXPECT_EQ(opened, plaintext);
}

TEST_F(RecordCipherTest, ShredMakesReadableRecordsUnreadable) {
  const std::vector<std::byte> plaintext = Payload(4096, 5);
  std::vector<std::byte> ciphertext, opened, other;
  const SealedRecordInfo info = Seal("alice", KeyOf(1), plaintext, &ciphertext);
  const SealedRecordInfo bob_info = Seal("bob", KeyOf(1), plaintext, &other);
  ASSERT_TRUE(Open(kFormat, "alice", KeyOf(1), info, ciphertext, &opened).ok());
  // Another reader's cipher (another tier's thread) is affected at once as well.
  Result<std::unique_ptr<RecordCipher>> second = RecordCipher::Create(keys_.get());
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->Open(kFormat, "alice", KeyOf(1), info, ciphertext, opened).ok());

  ASSERT_TRUE(keys_->ShredTenant("alice", "admin").ok());

  const Status s = Open(kFormat, "alice", KeyOf(1), info, ciphertext, &opened);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("tenant keys shredded"), std::string_view::npos);
  EXPECT_EQ((*second)->Open(kFormat, "alice", KeyOf(1), info, ciphertext, opened).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Open(kFormat, "bob", KeyOf(1), bob_info, other, &opened).ok());
}

TEST_F(RecordCipherTest, NoncesNeverRepeatAcrossThreads) {
  constexpr int kThreads = 4;
  constexpr int kSealsPerThread = 20000;
  std::vector<std::vector<GcmNonce>> nonces(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Result<std::unique_ptr<RecordCipher>> cipher = RecordCipher::Create(keys_.get());
      ASSERT_TRUE(cipher.ok());
      std::vector<std::byte> plaintext = Payload(64, static_cast<uint8_t>(t)), out(64);
      for (int i = 0; i < kSealsPerThread; ++i) {
        Result<SealedRecordInfo> info = (*cipher)->Seal(kFormat, "alice", KeyOf(1), plaintext, out);
        ASSERT_TRUE(info.ok());
        nonces[t].push_back(info->nonce);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::set<GcmNonce> unique;
  for (const auto& list : nonces) unique.insert(list.begin(), list.end());
  EXPECT_EQ(unique.size(), size_t{kThreads} * kSealsPerThread);
}

}  // namespace
}  // namespace kvtier::encryption
