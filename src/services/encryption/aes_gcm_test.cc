#include "src/services/encryption/aes_gcm.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/services/encryption/kdf.h"

namespace kvtier::encryption {
namespace {

std::vector<uint8_t> Hex(std::string_view hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::span<const std::byte> B(const std::vector<uint8_t>& v) { return std::as_bytes(std::span(v)); }
std::span<std::byte> W(std::vector<uint8_t>& v) { return std::as_writable_bytes(std::span(v)); }

SecretKey KeyFromHex(std::string_view hex) {
  const std::vector<uint8_t> bytes = Hex(hex);
  return SecretKey(std::span<const uint8_t, kSecretKeyBytes>(bytes.data(), kSecretKeyBytes));
}

GcmNonce NonceFromHex(std::string_view hex) {
  GcmNonce nonce{};
  const std::vector<uint8_t> bytes = Hex(hex);
  std::copy(bytes.begin(), bytes.end(), nonce.begin());
  return nonce;
}

// AES-256 test cases 13-16 of McGrew & Viega, "The Galois/Counter Mode of Operation".
struct GcmVector {
  const char* key;
  const char* nonce;
  const char* plaintext;
  const char* aad;
  const char* ciphertext;
  const char* tag;
};

constexpr char kKey15[] = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
constexpr GcmVector kVectors[] = {
    {"0000000000000000000000000000000000000000000000000000000000000000",
     "000000000000000000000000", "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"},
    {"0000000000000000000000000000000000000000000000000000000000000000",
     "000000000000000000000000", "00000000000000000000000000000000", "",
     "cea7403d4d606b6e074ec5d3baf39d18", "d0d1c8a799996bf0265b98b5d48ab919"},
    {kKey15, "cafebabefacedbaddecaf888",
     "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
     "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
     "",
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
     "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad",
     "b094dac5d93471bdec1a502270e3cc6c"},
    {kKey15, "cafebabefacedbaddecaf888",
     "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
     "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
     "feedfacedeadbeeffeedfacedeadbeefabaddad2",
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
     "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
     "76fc6ece0f4e1768cddf8853bb2d551b"},
};

std::unique_ptr<AesGcm> NewGcm() {
  Result<std::unique_ptr<AesGcm>> gcm = AesGcm::Create();
  EXPECT_TRUE(gcm.ok()) << gcm.status().ToString();
  return std::move(*gcm);
}

TEST(AesGcmTest, GcmSpecVectorsSealAndOpen) {
  std::unique_ptr<AesGcm> gcm = NewGcm();
  for (const GcmVector& v : kVectors) {
    SCOPED_TRACE(v.tag);
    const SecretKey key = KeyFromHex(v.key);
    const GcmNonce nonce = NonceFromHex(v.nonce);
    const std::vector<uint8_t> plaintext = Hex(v.plaintext);
    const std::vector<uint8_t> aad = Hex(v.aad);
    std::vector<uint8_t> ciphertext(plaintext.size());
    GcmTag tag{};
    ASSERT_TRUE(gcm->Seal(key, nonce, B(aad), B(plaintext), W(ciphertext), &tag).ok());
    EXPECT_EQ(ciphertext, Hex(v.ciphertext));
    EXPECT_EQ(std::vector<uint8_t>(tag.begin(), tag.end()), Hex(v.tag));
    std::vector<uint8_t> opened(ciphertext.size());
    ASSERT_TRUE(gcm->Open(key, nonce, B(aad), B(ciphertext), tag, W(opened)).ok());
    EXPECT_EQ(opened, plaintext);
  }
}

class AesGcmTamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gcm_ = NewGcm();
    plaintext_.resize(4096);
    for (size_t i = 0; i < plaintext_.size(); ++i) plaintext_[i] = static_cast<uint8_t>(i * 7 + 1);
    aad_ = Hex("4b564131010004616c696365");
    ciphertext_.resize(plaintext_.size());
    ASSERT_TRUE(gcm_->Seal(key_, nonce_, B(aad_), B(plaintext_), W(ciphertext_), &tag_).ok());
  }

  // Opens with the given inputs; expects DataLoss and an all-zero output.
  void ExpectRejected(const SecretKey& key, const GcmNonce& nonce, const std::vector<uint8_t>& aad,
                      const std::vector<uint8_t>& ciphertext, const GcmTag& tag) {
    std::vector<uint8_t> out(ciphertext.size(), 0xAA);
    const Status s = gcm_->Open(key, nonce, B(aad), B(ciphertext), tag, W(out));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_EQ(out, std::vector<uint8_t>(ciphertext.size(), 0));
  }

  std::unique_ptr<AesGcm> gcm_;
  SecretKey key_ = KeyFromHex(kKey15);
  GcmNonce nonce_ = NonceFromHex("cafebabefacedbaddecaf888");
  std::vector<uint8_t> plaintext_, aad_, ciphertext_;
  GcmTag tag_{};
};

TEST_F(AesGcmTamperTest, UntouchedOpens) {
  std::vector<uint8_t> out(ciphertext_.size());
  ASSERT_TRUE(gcm_->Open(key_, nonce_, B(aad_), B(ciphertext_), tag_, W(out)).ok());
  EXPECT_EQ(out, plaintext_);
  EXPECT_NE(ciphertext_, plaintext_);
}

TEST_F(AesGcmTamperTest, FlippedCiphertextBitIsDataLoss) {
  for (size_t at : {size_t{0}, ciphertext_.size() / 2, ciphertext_.size() - 1}) {
    std::vector<uint8_t> bad = ciphertext_;
    bad[at] ^= 0x01;
    ExpectRejected(key_, nonce_, aad_, bad, tag_);
  }
}

TEST_F(AesGcmTamperTest, FlippedTagBitIsDataLoss) {
  for (size_t at = 0; at < kGcmTagBytes; ++at) {
    GcmTag bad = tag_;
    bad[at] ^= 0x80;
    ExpectRejected(key_, nonce_, aad_, ciphertext_, bad);
  }
}

TEST_F(AesGcmTamperTest, OtherNonceIsDataLoss) {
  GcmNonce bad = nonce_;
  bad[11] ^= 0x01;
  ExpectRejected(key_, bad, aad_, ciphertext_, tag_);
}

TEST_F(AesGcmTamperTest, OtherAadIsDataLoss) {
  std::vector<uint8_t> bad = aad_;
  bad.back() ^= 0x01;
  ExpectRejected(key_, nonce_, bad, ciphertext_, tag_);
  ExpectRejected(key_, nonce_, {}, ciphertext_, tag_);
}

TEST_F(AesGcmTamperTest, WrongKeyIsDataLoss) {
  SecretKey other = key_;
  other.mutable_bytes()[0] ^= 0x01;
  ExpectRejected(other, nonce_, aad_, ciphertext_, tag_);
  // The context recovers: the right key opens again afterwards.
  std::vector<uint8_t> out(ciphertext_.size());
  EXPECT_TRUE(gcm_->Open(key_, nonce_, B(aad_), B(ciphertext_), tag_, W(out)).ok());
}

TEST_F(AesGcmTamperTest, TruncatedCiphertextIsDataLoss) {
  std::vector<uint8_t> shorter(ciphertext_.begin(), ciphertext_.end() - 1);
  ExpectRejected(key_, nonce_, aad_, shorter, tag_);
}

TEST(AesGcmTest, InPlaceAndAlternatingKeysRoundTrip) {
  std::unique_ptr<AesGcm> gcm = NewGcm();
  std::unique_ptr<AesGcm> reference = NewGcm();
  const SecretKey keys[2] = {KeyFromHex(kKey15), KeyFromHex(std::string(64, '1'))};
  for (int round = 0; round < 6; ++round) {
    const SecretKey& key = keys[round % 2];
    GcmNonce nonce{};
    nonce[0] = static_cast<uint8_t>(round);
    std::vector<uint8_t> data(1000 + static_cast<size_t>(round) * 333, static_cast<uint8_t>(round));
    const std::vector<uint8_t> original = data;
    GcmTag tag{};
    ASSERT_TRUE(gcm->Seal(key, nonce, {}, B(data), W(data), &tag).ok());
    // A fresh context (no cached key schedule) agrees with the reused one.
    std::vector<uint8_t> expected(original.size());
    GcmTag expected_tag{};
    ASSERT_TRUE(reference->Seal(key, nonce, {}, B(original), W(expected), &expected_tag).ok());
    reference = NewGcm();
    EXPECT_EQ(data, expected);
    EXPECT_EQ(tag, expected_tag);
    ASSERT_TRUE(gcm->Open(key, nonce, {}, B(data), tag, W(data)).ok());
    EXPECT_EQ(data, original);
  }
}

TEST(AesGcmTest, SizeMismatchIsInvalidArgument) {
  std::unique_ptr<AesGcm> gcm = NewGcm();
  std::vector<uint8_t> in(16), out(15);
  GcmTag tag{};
  EXPECT_EQ(gcm->Seal(SecretKey(), GcmNonce{}, {}, B(in), W(out), &tag).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(gcm->Open(SecretKey(), GcmNonce{}, {}, B(in), tag, W(out)).code(),
            StatusCode::kInvalidArgument);
}

// RFC 5869, appendix A, test cases 1-3 (SHA-256).
TEST(KdfTest, HkdfSha256Rfc5869Vectors) {
  struct Vector {
    std::vector<uint8_t> ikm, salt, info;
    const char* okm;
  };
  std::vector<uint8_t> ikm2, salt2, info2;
  for (int i = 0; i < 80; ++i) {
    ikm2.push_back(static_cast<uint8_t>(i));
    salt2.push_back(static_cast<uint8_t>(0x60 + i));
    info2.push_back(static_cast<uint8_t>(0xb0 + i));
  }
  const Vector vectors[] = {
      {std::vector<uint8_t>(22, 0x0b), Hex("000102030405060708090a0b0c"),
       Hex("f0f1f2f3f4f5f6f7f8f9"),
       "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"},
      {ikm2, salt2, info2,
       "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c6"
       "5e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"},
      {std::vector<uint8_t>(22, 0x0b), {}, {},
       "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"},
  };
  for (const Vector& v : vectors) {
    const std::vector<uint8_t> expected = Hex(v.okm);
    std::vector<uint8_t> okm(expected.size());
    ASSERT_TRUE(HkdfSha256(v.ikm, v.salt, v.info, okm).ok());
    EXPECT_EQ(okm, expected);
  }
}

TEST(KdfTest, HkdfRejectsImpossibleLengths) {
  std::vector<uint8_t> ikm(32, 1), out(255 * 32 + 1);
  EXPECT_EQ(HkdfSha256(ikm, {}, {}, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HkdfSha256(ikm, {}, {}, std::span<uint8_t>()).code(), StatusCode::kInvalidArgument);
}

// RFC 4231, test case 1.
TEST(KdfTest, HmacSha256Rfc4231Vector) {
  const std::vector<uint8_t> key(20, 0x0b);
  const std::string data = "Hi There";
  std::array<uint8_t, kSha256Bytes> mac{};
  ASSERT_TRUE(HmacSha256(key, {reinterpret_cast<const uint8_t*>(data.data()), data.size()}, &mac)
                  .ok());
  EXPECT_EQ(std::vector<uint8_t>(mac.begin(), mac.end()),
            Hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
}

}  // namespace
}  // namespace kvtier::encryption
