#include "src/tier/sharedfs/shared_fs_fsck.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "src/tier/shared/object_format.h"
#include "src/tier/sharedfs/shared_fs_test_util.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace kvtier {
namespace {

using testing_g4::MakePut;
using testing_g4::ScratchDir;
using testing_g4::TestKey;
using testing_g4::TestValue;

constexpr uint64_t kHour = 3600ull * 1000 * 1000;

class SharedFsFsckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SharedFsTierOptions o;
    o.root = dir_.path();
    o.node_id = "node-a";
    Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(o);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::move(*tier);
    values_.reserve(10);
    std::vector<SharedPut> puts;
    for (uint32_t i = 0; i < 10; ++i) {
      values_.push_back(TestValue(5000 + i, i));
      puts.push_back(MakePut(TestKey(i), values_.back(), i < 4 ? 7 : 0));
    }
    for (const Status& s : tier_->PutMany("acme", puts)) ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(tier_->PutMany("other-tenant", {&puts[0], 1})[0].ok());
  }
  std::string Path(std::string_view tenant, uint32_t i) const {
    return dir_.path() + "/" + g4::ObjectName(tenant, TestKey(i));
  }
  // Ages a file past the check's staleness bound.
  static void Age(const std::string& path) {
    std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now() -
                                               std::chrono::hours(2));
  }

  ScratchDir dir_;
  std::unique_ptr<SharedFsTier> tier_;
  std::vector<std::vector<std::byte>> values_;
};

TEST_F(SharedFsFsckTest, AHealthyRootIsCountedPerTenant) {
  Result<SharedCheckReport> r = CheckSharedDirectory(dir_.path(), false, kHour);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->clean()) << (r->problems.empty() ? "" : r->problems[0]);
  EXPECT_EQ(r->objects, 11u);
  EXPECT_EQ(r->tenants["acme"].objects, 10u);
  EXPECT_EQ(r->tenants["other-tenant"].objects, 1u);
  EXPECT_EQ(r->tenants["other-tenant"].value_bytes, 5000u);
  EXPECT_EQ(r->session_markers, 5u);  // Four of acme, one of other-tenant.
  EXPECT_EQ(r->orphan_session_markers, 0u);
  EXPECT_EQ(CheckSharedDirectory(dir_.path() + "/nothing", false, kHour).status().code(),
            StatusCode::kNotFound);
}

TEST_F(SharedFsFsckTest, RepairRemovesCorruptObjectsStaleOrphansAndTempFilesOnly) {
  // A flipped byte in one object's payload; another object copied under a third's name.
  {
    std::fstream f(Path("acme", 5), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x55');
  }
  std::filesystem::copy_file(Path("acme", 6), Path("acme", 9),
                             std::filesystem::copy_options::overwrite_existing);
  // Session 7's block 0 loses its object: its marker becomes an orphan once old enough; block
  // 1's object goes too, but its marker is fresh (a put in flight writes it first) and stays.
  std::filesystem::remove(Path("acme", 0));
  std::filesystem::remove(Path("acme", 1));
  const std::string markers = dir_.path() + "/" + g4::SessionPrefix("acme", 7);
  Age(markers + TestKey(0).ToHex());
  // Temp files: one a dead node left hours ago, one being written now.
  const std::string tmp = dir_.path() + "/kvtier-g4/v1/tmp/";
  std::filesystem::create_directories(tmp);
  std::ofstream(tmp + "node-b.1.1.tmp") << "partial";
  std::ofstream(tmp + "node-b.1.2.tmp") << "in flight";
  Age(tmp + "node-b.1.1.tmp");

  Result<SharedCheckReport> r = CheckSharedDirectory(dir_.path(), false, kHour);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->clean());
  EXPECT_EQ(r->corrupt_objects, 2u);
  EXPECT_EQ(r->orphan_session_markers, 1u);
  EXPECT_EQ(r->temp_files, 2u);
  EXPECT_EQ(r->stale_temp_files, 1u);
  EXPECT_EQ(r->tenants["acme"].objects, 6u);  // 10 - 2 removed - 2 corrupt.
  ASSERT_EQ(r->problems.size(), 4u);

  Result<SharedCheckReport> repaired = CheckSharedDirectory(dir_.path(), true, kHour);
  ASSERT_TRUE(repaired.ok());
  EXPECT_EQ(repaired->removed_objects, 2u);
  EXPECT_EQ(repaired->removed_markers, 1u);
  EXPECT_EQ(repaired->removed_temp_files, 1u);
  EXPECT_TRUE(std::filesystem::exists(tmp + "node-b.1.2.tmp"));
  Result<SharedCheckReport> after = CheckSharedDirectory(dir_.path(), false, kHour);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->clean());
  EXPECT_EQ(after->objects, 7u);
  // The tier still serves every intact block with its bytes, and misses the removed ones.
  std::vector<BlockKey> keys;
  for (uint32_t i = 0; i < 10; ++i) keys.push_back(TestKey(i));
  std::vector<Result<std::vector<std::byte>>> got = tier_->GetMany("acme", keys);
  for (uint32_t i = 0; i < 10; ++i) {
    if (i == 0 || i == 1 || i == 5 || i == 9) {
      EXPECT_FALSE(got[i].ok()) << i;
    } else {
      ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
      EXPECT_EQ(*got[i], values_[i]) << i;
    }
  }
}

}  // namespace
}  // namespace kvtier
