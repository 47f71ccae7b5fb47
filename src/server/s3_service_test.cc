#include "src/server/s3_service.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

TenantConfig Tenant(const std::string& name) {
  TenantConfig t;
  t.options.name = name;
  return t;
}

// A G2-only Store of one tenant.
std::unique_ptr<Store> OpenStore(const std::string& tenant) {
  Options o;
  o.memory.capacity_bytes = 1 << 20;
  o.max_block_bytes = 64 << 10;
  o.tenants = {TenantOptions{tenant}};
  Result<std::unique_ptr<Store>> s = Store::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

class S3ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier-s3-service-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_.data_dir = dir_.string();
    config_.tenants = {Tenant("acme")};
    store_ = OpenStore("acme");
    ASSERT_NE(store_, nullptr);
    tenant_ = *store_->FindTenant("acme");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<S3Service> Open() {
    Result<std::unique_ptr<S3Service>> s = S3Service::Open(config_, *store_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static S3ObjectHeader Header(uint64_t size) {
    S3ObjectHeader h;
    h.size = size;
    h.modified_us = 1000 + size;
    h.digest[0] = static_cast<uint8_t>(size);
    h.content_type = "application/octet-stream";
    return h;
  }

  std::filesystem::path dir_;
  ServerConfig config_;
  std::unique_ptr<Store> store_;
  TenantId tenant_;
};

TEST_F(S3ServiceTest, NamesOutliveARestartAndTheJournalStaysNearTheirSize) {
  auto s3 = Open();
  ASSERT_TRUE(s3->CreateBucket(tenant_, "bkt", 1).ok());
  // 20,000 puts of two names and a delete: two names live, the journal rewritten as it grows.
  for (uint64_t i = 1; i <= 10000; ++i) {
    s3->NameStored(tenant_, "bkt", "hot", Header(i));
    s3->NameStored(tenant_, "bkt", "gone", Header(i));
  }
  s3->NameStored(tenant_, "bkt", "kept", Header(7));
  s3->NameRemoved(tenant_, "bkt", "gone");
  const uintmax_t bytes = std::filesystem::file_size(dir_ / "s3_names.log");
  // At most 2 x live + 4096 records of ~90 bytes each, never the 20,000 written.
  EXPECT_LT(bytes, 4200u * 100);
  s3.reset();

  s3 = Open();
  auto names = s3->ListNames(tenant_, "bkt", "", "", 10);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].first, "hot");
  EXPECT_EQ(names[0].second.size, 10000u);
  EXPECT_EQ(names[0].second.ETag(), Header(10000).ETag());
  EXPECT_EQ(names[0].second.content_type, "application/octet-stream");
  EXPECT_EQ(names[1].first, "kept");
  EXPECT_EQ(names[1].second.modified_us, Header(7).modified_us);
  // Reopened, the journal holds the live names only.
  EXPECT_LT(std::filesystem::file_size(dir_ / "s3_names.log"), 300u);
}

TEST_F(S3ServiceTest, ADamagedRecordEndsTheReplayAndEarlierNamesAreKept) {
  auto s3 = Open();
  ASSERT_TRUE(s3->CreateBucket(tenant_, "bkt", 1).ok());
  s3->NameStored(tenant_, "bkt", "first", Header(1));
  s3->NameStored(tenant_, "bkt", "second", Header(2));
  s3.reset();
  // Flip a byte of the last record: its checksum no longer matches.
  const auto path = dir_ / "s3_names.log";
  const uintmax_t size = std::filesystem::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 3));
    f.put('\x7f');
  }
  s3 = Open();
  auto names = s3->ListNames(tenant_, "bkt", "", "", 10);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].first, "first");
  // Names of a bucket that is gone, and of a tenant no longer configured, are dropped.
  s3->NameStored(tenant_, "bkt", "third", Header(3));
  s3.reset();
  config_.tenants = {Tenant("other")};
  store_ = OpenStore("other");
  s3 = Open();
  EXPECT_TRUE(s3->ListNames(tenant_, "bkt", "", "", 10).empty());
}

}  // namespace
}  // namespace kvtier::server
