#include "src/services/encryption/key_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "src/common/checksum.h"
#include "src/env/fault_injection_env.h"
#include "src/env/mem_env.h"

namespace kvtier::encryption {
namespace {

constexpr char kDir[] = "/keys";
constexpr char kPath[] = "/keys/KEYSTORE";

MasterKey Master(char digit) { return *MasterKey::FromHex(std::string(64, digit)); }

std::vector<uint8_t> ReadAll(Env* env, const std::string& path) {
  Result<std::unique_ptr<File>> file = env->OpenFile(path, FileOptions{});
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return {};
  std::vector<uint8_t> bytes(*(*file)->Size());
  size_t got = 0;
  EXPECT_TRUE((*file)->Read(0, std::as_writable_bytes(std::span(bytes)), &got).ok());
  return bytes;
}

void WriteAll(Env* env, const std::string& path, const std::vector<uint8_t>& bytes) {
  FileOptions options;
  options.create = true;
  options.truncate = true;
  Result<std::unique_ptr<File>> file = env->OpenFile(path, options);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Write(0, std::as_bytes(std::span(bytes))).ok());
}

bool Contains(const std::vector<uint8_t>& haystack, std::span<const uint8_t> needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

class KeyManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_->CreateDir(kDir).ok()); }

  Result<std::unique_ptr<KeyManager>> OpenKeys(const MasterKey& master,
                                               KeyManagerOptions options = {}) {
    return KeyManager::Open(env_.get(), kDir, master, options);
  }

  std::unique_ptr<KeyManager> MustOpen(const MasterKey& master, KeyManagerOptions options = {}) {
    Result<std::unique_ptr<KeyManager>> keys = OpenKeys(master, options);
    EXPECT_TRUE(keys.ok()) << keys.status().ToString();
    return keys.ok() ? std::move(*keys) : nullptr;
  }

  KeystoreContents Decode(const MasterKey& master) {
    SecretKey mac;
    EXPECT_TRUE(master.DeriveKeystoreMacKey(&mac).ok());
    Result<KeystoreContents> contents = DecodeKeystore(ReadAll(env_.get(), kPath), master.id(), mac);
    EXPECT_TRUE(contents.ok()) << contents.status().ToString();
    return contents.ok() ? *contents : KeystoreContents{};
  }

  std::unique_ptr<Env> env_ = NewMemEnv(Env::Default());
  MasterKey master_ = Master('1');
};

TEST_F(KeyManagerTest, KeysSurviveReopen) {
  SecretKey sealed, reopened;
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_);
    Result<uint32_t> version = keys->AcquireSealingKey("alice", &sealed);
    ASSERT_TRUE(version.ok());
    EXPECT_EQ(*version, 1u);
    EXPECT_FALSE(sealed == SecretKey());
  }
  std::unique_ptr<KeyManager> keys = MustOpen(master_);
  ASSERT_TRUE(keys->GetKey("alice", 1, &reopened).ok());
  EXPECT_EQ(sealed, reopened);
  EXPECT_EQ(keys->GetKey("alice", 2, &reopened).code(), StatusCode::kNotFound);
  EXPECT_EQ(keys->GetKey("bob", 1, &reopened).code(), StatusCode::kNotFound);
}

TEST_F(KeyManagerTest, TenantsGetDistinctKeys) {
  std::unique_ptr<KeyManager> keys = MustOpen(master_);
  SecretKey a, b;
  ASSERT_TRUE(keys->AcquireSealingKey("alice", &a).ok());
  ASSERT_TRUE(keys->AcquireSealingKey("bob", &b).ok());
  EXPECT_FALSE(a == b);
  EXPECT_EQ(keys->AcquireSealingKey("", &a).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(KeyManagerTest, WrongMasterKeyIsAClearError) {
  { ASSERT_NE(MustOpen(master_), nullptr); }
  Result<std::unique_ptr<KeyManager>> keys = OpenKeys(Master('2'));
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(keys.status().message().find("wrong master key"), std::string_view::npos);
}

TEST_F(KeyManagerTest, SecondOpenOfTheSameDirectoryIsRefused) {
  std::unique_ptr<KeyManager> keys = MustOpen(master_);
  EXPECT_EQ(OpenKeys(master_).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(KeyManagerTest, CorruptKeystoreIsDataLoss) {
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_);
    SecretKey key;
    ASSERT_TRUE(keys->AcquireSealingKey("alice", &key).ok());
  }
  const std::vector<uint8_t> good = ReadAll(env_.get(), kPath);
  // A flipped bit anywhere, a truncation, and an edit whose checksum was recomputed (only the
  // MAC can catch that one).
  std::vector<uint8_t> flipped = good;
  flipped[good.size() / 2] ^= 0x04;
  std::vector<uint8_t> truncated(good.begin(), good.end() - 9);
  std::vector<uint8_t> forged = good;
  forged[60] ^= 0x01;
  const uint64_t checksum = Checksum64(std::as_bytes(std::span(forged).first(forged.size() - 8)));
  for (int i = 0; i < 8; ++i) forged[forged.size() - 8 + i] = static_cast<uint8_t>(checksum >> (8 * i));
  for (const auto& [bytes, phrase] : {std::pair{flipped, "checksum"}, std::pair{truncated, "corrupt"},
                                      std::pair{forged, "authentication failed"}}) {
    WriteAll(env_.get(), kPath, bytes);
    Result<std::unique_ptr<KeyManager>> keys = OpenKeys(master_);
    ASSERT_FALSE(keys.ok());
    EXPECT_EQ(keys.status().code(), StatusCode::kDataLoss) << keys.status().ToString();
    EXPECT_NE(keys.status().message().find(phrase), std::string_view::npos)
        << keys.status().ToString();
  }
  WriteAll(env_.get(), kPath, good);
  EXPECT_NE(MustOpen(master_), nullptr);
}

TEST_F(KeyManagerTest, RotationKeepsOldVersionsReadable) {
  SecretKey v1, v2, check;
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_);
    ASSERT_EQ(*keys->AcquireSealingKey("alice", &v1), 1u);
    Result<uint32_t> rotated = keys->RotateTenantKey("alice", "admin");
    ASSERT_TRUE(rotated.ok());
    EXPECT_EQ(*rotated, 2u);
    ASSERT_EQ(*keys->AcquireSealingKey("alice", &v2), 2u);
    EXPECT_FALSE(v1 == v2);
    ASSERT_TRUE(keys->GetKey("alice", 1, &check).ok());
    EXPECT_EQ(check, v1);
  }
  std::unique_ptr<KeyManager> keys = MustOpen(master_);
  ASSERT_TRUE(keys->GetKey("alice", 1, &check).ok());
  EXPECT_EQ(check, v1);
  ASSERT_TRUE(keys->GetKey("alice", 2, &check).ok());
  EXPECT_EQ(check, v2);
  EXPECT_EQ(keys->DescribeTenant("alice")->current_version, 2u);
}

TEST_F(KeyManagerTest, ShredDestroysEveryVersionEverywhere) {
  SecretKey key;
  std::unique_ptr<KeyManager> keys = MustOpen(master_);
  ASSERT_TRUE(keys->AcquireSealingKey("alice", &key).ok());
  ASSERT_TRUE(keys->RotateTenantKey("alice", "admin").ok());
  ASSERT_TRUE(keys->AcquireSealingKey("bob", &key).ok());
  const KeystoreContents before = Decode(master_);
  ASSERT_EQ(before.tenants.size(), 2u);
  ASSERT_EQ(before.tenants[0].name, "alice");
  const std::vector<WrappedDataKey> alice_wrapped = before.tenants[0].versions;
  ASSERT_EQ(alice_wrapped.size(), 2u);
  // A handle on the file as it is now: after the shred its bytes must be gone too.
  Result<std::unique_ptr<File>> old_file = env_->OpenFile(kPath, FileOptions{});
  ASSERT_TRUE(old_file.ok());

  ASSERT_TRUE(keys->ShredTenant("alice", "admin").ok());

  for (uint32_t version : {1u, 2u}) {
    const Status s = keys->GetKey("alice", version, &key);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("tenant keys shredded"), std::string_view::npos);
  }
  EXPECT_TRUE(keys->GetKey("bob", 1, &key).ok());
  // No file of the key directory holds a wrapped copy of alice's keys, nor does the replaced
  // keystore file.
  Result<std::vector<std::string>> names = env_->ListDir(kDir);
  ASSERT_TRUE(names.ok());
  for (const std::string& name : *names) {
    const std::vector<uint8_t> bytes = ReadAll(env_.get(), std::string(kDir) + "/" + name);
    for (const WrappedDataKey& wrapped : alice_wrapped) {
      EXPECT_FALSE(Contains(bytes, wrapped.wrapped_key)) << name;
      EXPECT_FALSE(Contains(bytes, wrapped.tag)) << name;
    }
  }
  std::vector<uint8_t> replaced(*(*old_file)->Size());
  size_t got = 0;
  ASSERT_TRUE((*old_file)->Read(0, std::as_writable_bytes(std::span(replaced)), &got).ok());
  EXPECT_EQ(replaced, std::vector<uint8_t>(replaced.size(), 0));

  // Durable, and a new key for the same name never reuses a shredded version.
  keys.reset();
  keys = MustOpen(master_);
  EXPECT_EQ(keys->GetKey("alice", 1, &key).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(keys->DescribeTenant("alice")->shredded);
  Result<uint32_t> fresh = keys->AcquireSealingKey("alice", &key);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(*fresh, 3u);
  EXPECT_EQ(keys->GetKey("alice", 2, &key).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(keys->ShredTenant("carol", "admin").code(), StatusCode::kNotFound);
}

TEST_F(KeyManagerTest, MasterKeyRotationRewrapsWithoutChangingDataKeys) {
  SecretKey before, after;
  const MasterKey next = Master('2');
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_);
    ASSERT_TRUE(keys->AcquireSealingKey("alice", &before).ok());
    ASSERT_TRUE(keys->RotateMasterKey(next, "admin").ok());
    EXPECT_EQ(keys->master_key_id(), next.IdHex());
  }
  EXPECT_EQ(OpenKeys(master_).status().code(), StatusCode::kFailedPrecondition);
  std::unique_ptr<KeyManager> keys = MustOpen(next);
  ASSERT_TRUE(keys->GetKey("alice", 1, &after).ok());
  EXPECT_EQ(before, after);
}

TEST_F(KeyManagerTest, NonceBudgetRotatesAndSurvivesRestarts) {
  KeyManagerOptions options;
  options.max_seals_per_key = 4;
  options.seal_reservation = 2;
  SecretKey key;
  std::vector<uint32_t> versions;
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_, options);
    for (int i = 0; i < 2; ++i) versions.push_back(*keys->AcquireSealingKey("alice", &key));
  }
  // The reservation made before the restart counts as used: two seals remain for version 1.
  std::unique_ptr<KeyManager> keys = MustOpen(master_, options);
  for (int i = 0; i < 5; ++i) versions.push_back(*keys->AcquireSealingKey("alice", &key));
  EXPECT_EQ(versions, (std::vector<uint32_t>{1, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(Decode(master_).tenants[0].versions[0].seals_reserved, 4u);
}

TEST_F(KeyManagerTest, FailedKeystoreWriteChangesNothing) {
  FaultInjectionEnv faulty(env_.get());
  Result<std::unique_ptr<KeyManager>> opened = KeyManager::Open(&faulty, kDir, master_, {});
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<KeyManager> keys = std::move(*opened);
  SecretKey key;
  ASSERT_TRUE(keys->AcquireSealingKey("alice", &key).ok());
  FaultInjectionEnv::Fault fault;
  fault.op = FaultInjectionEnv::Op::kSync;
  faulty.AddFault(fault);
  EXPECT_FALSE(keys->RotateTenantKey("alice", "admin").ok());
  EXPECT_EQ(keys->DescribeTenant("alice")->current_version, 1u);
  EXPECT_EQ(keys->AcquireSealingKey("bob", &key).status().code(), StatusCode::kUnavailable);
  // A shred that cannot be made durable still takes effect in memory, and says so.
  const Status shred = keys->ShredTenant("alice", "admin");
  EXPECT_FALSE(shred.ok());
  EXPECT_NE(shred.message().find("not yet durably"), std::string_view::npos);
  EXPECT_EQ(keys->GetKey("alice", 1, &key).code(), StatusCode::kFailedPrecondition);
  faulty.ClearFaults();
  ASSERT_TRUE(keys->ShredTenant("alice", "admin").ok());
  keys.reset();
  keys = MustOpen(master_);
  EXPECT_EQ(keys->GetKey("alice", 1, &key).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(keys->DescribeTenant("bob").status().code(), StatusCode::kNotFound);
}

TEST_F(KeyManagerTest, AcknowledgedRotationSurvivesPowerLoss) {
  FaultInjectionEnv faulty(env_.get());
  SecretKey v2;
  {
    Result<std::unique_ptr<KeyManager>> keys = KeyManager::Open(&faulty, kDir, master_, {});
    ASSERT_TRUE(keys.ok());
    ASSERT_TRUE((*keys)->RotateTenantKey("alice", "admin").ok());
    ASSERT_TRUE((*keys)->RotateTenantKey("alice", "admin").ok());
    ASSERT_TRUE((*keys)->GetKey("alice", 2, &v2).ok());
    faulty.SetActive(false);
  }
  ASSERT_TRUE(faulty.DropUnsyncedData().ok());
  Result<std::unique_ptr<KeyManager>> keys = KeyManager::Open(&faulty, kDir, master_, {});
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  SecretKey check;
  ASSERT_TRUE((*keys)->GetKey("alice", 2, &check).ok());
  EXPECT_EQ(check, v2);
}

TEST_F(KeyManagerTest, CrashBetweenRenamesRollsBack) {
  SecretKey key, check;
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_);
    ASSERT_TRUE(keys->AcquireSealingKey("alice", &key).ok());
  }
  // The state after step (2) of a replacement: the old keystore moved aside, the new one still
  // under its temporary name (here: garbage, as if torn).
  ASSERT_TRUE(env_->RenameFile(kPath, std::string(kPath) + ".old").ok());
  WriteAll(env_.get(), std::string(kPath) + ".tmp", {1, 2, 3});
  std::unique_ptr<KeyManager> keys = MustOpen(master_);
  ASSERT_TRUE(keys->GetKey("alice", 1, &check).ok());
  EXPECT_EQ(check, key);
  Result<std::vector<std::string>> names = env_->ListDir(kDir);
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"KEYSTORE", "KEYSTORE.lock"}));
}

TEST_F(KeyManagerTest, CrashBeforeScrubIsFinishedOnOpen) {
  SecretKey key;
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_);
    ASSERT_TRUE(keys->AcquireSealingKey("alice", &key).ok());
  }
  const std::vector<uint8_t> with_alice = ReadAll(env_.get(), kPath);
  {
    std::unique_ptr<KeyManager> keys = MustOpen(master_);
    ASSERT_TRUE(keys->ShredTenant("alice", "admin").ok());
  }
  // The state after step (3): the new keystore in place, the replaced one not yet scrubbed.
  WriteAll(env_.get(), std::string(kPath) + ".old", with_alice);
  Result<std::unique_ptr<File>> leftover = env_->OpenFile(std::string(kPath) + ".old", {});
  ASSERT_TRUE(leftover.ok());
  std::unique_ptr<KeyManager> keys = MustOpen(master_);
  EXPECT_EQ(keys->GetKey("alice", 1, &key).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(env_->OpenFile(std::string(kPath) + ".old", {}).status().code(),
            StatusCode::kNotFound);
  std::vector<uint8_t> scrubbed(with_alice.size());
  size_t got = 0;
  ASSERT_TRUE((*leftover)->Read(0, std::as_writable_bytes(std::span(scrubbed)), &got).ok());
  EXPECT_EQ(scrubbed, std::vector<uint8_t>(scrubbed.size(), 0));
}

TEST_F(KeyManagerTest, AdministrativeActsAreAudited) {
  Result<std::unique_ptr<audit::AuditLog>> log =
      audit::AuditLog::Open(env_.get(), "/keys/audit.log", {});
  ASSERT_TRUE(log.ok());
  KeyManagerOptions options;
  options.audit = log->get();
  std::unique_ptr<KeyManager> keys = MustOpen(master_, options);
  SecretKey key;
  ASSERT_TRUE(keys->AcquireSealingKey("alice", &key).ok());
  ASSERT_TRUE(keys->RotateTenantKey("alice", "ops").ok());
  ASSERT_TRUE(keys->ShredTenant("alice", "ops").ok());
  ASSERT_TRUE(keys->RotateMasterKey(Master('3'), "ops").ok());
  const std::vector<uint8_t> bytes = ReadAll(env_.get(), "/keys/audit.log");
  const std::string text(bytes.begin(), bytes.end());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  for (const char* op : {"create_tenant_key", "rotate_tenant_key", "shred_tenant",
                         "rotate_master_key"}) {
    EXPECT_NE(text.find(op), std::string::npos) << op;
  }
}

}  // namespace
}  // namespace kvtier::encryption
