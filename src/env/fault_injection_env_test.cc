// The in-memory Env and the fault-injection Env that the disk tier's tests stand on.

#include "src/env/fault_injection_env.h"

#include <gtest/gtest.h>

#include "src/env/aligned_buffer.h"
#include "src/env/mem_env.h"

namespace kvtier {
namespace {

class FixedClock final : public Env {
 public:
  uint64_t NowMicros() override { return 42; }
};

class FaultInjectionEnvTest : public ::testing::Test {
 protected:
  FaultInjectionEnvTest() : mem_(NewMemEnv(&clock_)), env_(mem_.get()) {
    EXPECT_TRUE(env_.CreateDir("/d").ok());
  }
  std::unique_ptr<File> Create(const std::string& path) {
    FileOptions o;
    o.create = true;
    Result<std::unique_ptr<File>> f = env_.OpenFile(path, o);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }
  uint64_t SizeOf(const std::string& path) {
    Result<std::unique_ptr<File>> f = mem_->OpenFile(path, FileOptions{});
    return f.ok() ? *(*f)->Size() : UINT64_MAX;
  }

  FixedClock clock_;
  std::unique_ptr<Env> mem_;
  FaultInjectionEnv env_;
  std::vector<std::byte> data_ = std::vector<std::byte>(100, std::byte{7});
};

TEST_F(FaultInjectionEnvTest, MemEnvEnforcesDirectIoAlignment) {
  FileOptions o;
  o.create = true;
  o.direct_io = true;
  std::unique_ptr<File> f = std::move(mem_->OpenFile("/d/x", o)).value();
  EXPECT_EQ(f->Write(0, data_).code(), StatusCode::kInvalidArgument);
  AlignedBuffer buf(kDirectIoAlignment);
  EXPECT_TRUE(f->Write(0, buf.span()).ok());
  EXPECT_EQ(f->Write(100, buf.span()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mem_->OpenFile("/nodir/x", o).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(env_.NowMicros(), 42u);
}

TEST_F(FaultInjectionEnvTest, LockIsExclusiveUntilReleased) {
  Result<std::unique_ptr<FileLock>> a = env_.LockFile("/d/LOCK");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(env_.LockFile("/d/LOCK").status().code(), StatusCode::kFailedPrecondition);
  a->reset();
  EXPECT_TRUE(env_.LockFile("/d/LOCK").ok());
}

TEST_F(FaultInjectionEnvTest, FailsTheChosenOperationsOnly) {
  std::unique_ptr<File> a = Create("/d/a");
  std::unique_ptr<File> b = Create("/d/b");
  FaultInjectionEnv::Fault f;
  f.op = FaultInjectionEnv::Op::kWrite;
  f.skip = 1;
  f.count = 2;
  f.path_filter = [](const std::string& p) { return p == "/d/a"; };
  env_.AddFault(f);
  EXPECT_TRUE(a->Write(0, data_).ok());    // Skipped.
  EXPECT_TRUE(b->Write(0, data_).ok());    // Other path.
  EXPECT_EQ(a->Write(0, data_).code(), StatusCode::kUnavailable);
  EXPECT_EQ(a->Write(0, data_).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(a->Write(0, data_).ok());    // Count used up.
  EXPECT_EQ(env_.injected_failures(), 2u);
  env_.AddFault({FaultInjectionEnv::Op::kSync, Status::Unavailable("EIO"), 0, 1, {}});
  EXPECT_FALSE(a->Sync().ok());
  EXPECT_TRUE(a->Sync().ok());
  env_.AddFault({FaultInjectionEnv::Op::kRead, Status::Unavailable("EIO"), 0, 1, {}});
  std::vector<std::byte> out(10);
  size_t got = 0;
  EXPECT_FALSE(a->Read(0, out, &got).ok());
  EXPECT_TRUE(a->Read(0, out, &got).ok());
  EXPECT_EQ(got, 10u);
}

TEST_F(FaultInjectionEnvTest, FullFilesystemFailsWritesAndCreation) {
  std::unique_ptr<File> a = Create("/d/a");
  env_.SetFilesystemFull(true);
  EXPECT_EQ(a->Write(0, data_).code(), StatusCode::kResourceExhausted);
  FileOptions o;
  o.create = true;
  EXPECT_EQ(env_.OpenFile("/d/new", o).status().code(), StatusCode::kResourceExhausted);
  env_.SetFilesystemFull(false);
  EXPECT_TRUE(a->Write(0, data_).ok());
}

TEST_F(FaultInjectionEnvTest, DropUnsyncedDataKeepsExactlyWhatWasSynced) {
  std::unique_ptr<File> a = Create("/d/a");
  ASSERT_TRUE(a->Write(0, data_).ok());
  ASSERT_TRUE(a->Sync().ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());
  ASSERT_TRUE(a->Write(100, data_).ok());  // Not synced.
  std::unique_ptr<File> b = Create("/d/b");  // Its directory entry is not synced.
  ASSERT_TRUE(b->Write(0, data_).ok());
  ASSERT_TRUE(b->Sync().ok());
  env_.SetActive(false);
  EXPECT_EQ(a->Write(200, data_).code(), StatusCode::kUnavailable);
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(SizeOf("/d/a"), 100u);
  EXPECT_EQ(SizeOf("/d/b"), UINT64_MAX);
  EXPECT_TRUE(a->Write(100, data_).ok());  // Active again.
}

}  // namespace
}  // namespace kvtier
