#include "src/services/encryption/master_key.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace kvtier::encryption {
namespace {

constexpr char kHexKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(MasterKeyTest, HexAndRawFormsAreTheSameKey) {
  Result<MasterKey> from_hex = MasterKey::FromHex(std::string("  ") + kHexKey + "\n");
  ASSERT_TRUE(from_hex.ok()) << from_hex.status().ToString();
  std::vector<uint8_t> raw(32);
  for (int i = 0; i < 32; ++i) raw[i] = static_cast<uint8_t>(i);
  Result<MasterKey> from_raw = MasterKey::FromKeyFile(raw, 0100600);
  ASSERT_TRUE(from_raw.ok()) << from_raw.status().ToString();
  EXPECT_EQ(from_hex->id(), from_raw->id());
  EXPECT_EQ(from_hex->IdHex().size(), 32u);
  Result<MasterKey> hex_file = MasterKey::FromKeyFile(Bytes(std::string(kHexKey) + "\n"), 0100640);
  ASSERT_TRUE(hex_file.ok());
  EXPECT_EQ(hex_file->id(), from_hex->id());
}

TEST(MasterKeyTest, MalformedKeysAreInvalidArgumentWithoutEchoingInput) {
  const std::string secretish = std::string(kHexKey).substr(0, 63) + "z";
  for (const std::string& bad : {std::string(kHexKey).substr(0, 62), secretish, std::string(64, '0'),
                                 std::string(kHexKey) + "00", std::string()}) {
    Result<MasterKey> key = MasterKey::FromHex(bad);
    ASSERT_FALSE(key.ok());
    EXPECT_EQ(key.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(key.status().message().find("0102030405"), std::string_view::npos);
  }
  EXPECT_EQ(MasterKey::FromKeyFile(Bytes("short"), 0100600).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MasterKey::FromKeyFile(std::vector<uint8_t>(32, 0), 0100600).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MasterKeyTest, KeyFileAccessibleToOthersIsRefused) {
  for (uint32_t mode : {0100644u, 0100604u, 0100602u, 0100601u, 0100666u}) {
    EXPECT_EQ(MasterKey::FromKeyFile(Bytes(kHexKey), mode).status().code(),
              StatusCode::kPermissionDenied)
        << std::oct << mode;
  }
  EXPECT_TRUE(MasterKey::FromKeyFile(Bytes(kHexKey), 0100400).ok());
}

TEST(MasterKeyTest, LoadFileChecksTheFileItReads) {
  const std::string path = ::testing::TempDir() + "/kvtier_master_key_test_" +
                           std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, kHexKey, 64), 64);
  ::close(fd);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  Result<MasterKey> key = MasterKey::LoadFile(path);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->id(), MasterKey::FromHex(kHexKey)->id());

  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  Result<MasterKey> exposed = MasterKey::LoadFile(path);
  EXPECT_EQ(exposed.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(exposed.status().message().find(path), std::string_view::npos);
  ASSERT_EQ(::unlink(path.c_str()), 0);

  EXPECT_EQ(MasterKey::LoadFile(path).status().code(), StatusCode::kNotFound);
}

TEST(MasterKeyTest, FromEnvironment) {
  constexpr char kVariable[] = "KVTIER_MASTER_KEY_FOR_MASTER_KEY_TEST";
  ::unsetenv(kVariable);
  EXPECT_EQ(MasterKey::FromEnvironment(kVariable).status().code(), StatusCode::kNotFound);
  ASSERT_EQ(::setenv(kVariable, "not a key", 1), 0);
  Result<MasterKey> bad = MasterKey::FromEnvironment(kVariable);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("not a key"), std::string_view::npos);
  ASSERT_EQ(::setenv(kVariable, kHexKey, 1), 0);
  Result<MasterKey> key = MasterKey::FromEnvironment(kVariable);
  ::unsetenv(kVariable);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->id(), MasterKey::FromHex(kHexKey)->id());
}

TEST(MasterKeyTest, DerivedKeysAreDistinctPerTenantAndVersion) {
  Result<MasterKey> master = MasterKey::FromHex(kHexKey);
  ASSERT_TRUE(master.ok());
  SecretKey a1, a2, b1, again, mac;
  ASSERT_TRUE(master->DeriveKek("a", 1, &a1).ok());
  ASSERT_TRUE(master->DeriveKek("a", 2, &a2).ok());
  ASSERT_TRUE(master->DeriveKek("b", 1, &b1).ok());
  ASSERT_TRUE(master->DeriveKek("a", 1, &again).ok());
  ASSERT_TRUE(master->DeriveKeystoreMacKey(&mac).ok());
  EXPECT_EQ(a1, again);
  EXPECT_FALSE(a1 == a2);
  EXPECT_FALSE(a1 == b1);
  EXPECT_FALSE(a1 == mac);
  EXPECT_EQ(master->DeriveKek("", 1, &a1).code(), StatusCode::kInvalidArgument);
  Result<MasterKey> other = MasterKey::FromHex(std::string(64, 'f'));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->id(), master->id());
}

}  // namespace
}  // namespace kvtier::encryption
