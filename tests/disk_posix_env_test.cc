// The posix Env and the DiskTier on a real file system: O_DIRECT alignment, fallocate,
// io_uring and pread/pwrite queues, the lock file across processes. Integration, not unit:
// these need a real disk (unit tests use the in-memory Env).

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "src/env/aligned_buffer.h"
#include "src/tier/disk/disk_tier.h"

namespace kvtier {
namespace {

class PosixEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier-posix-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<File> Create(const std::string& name, bool direct) {
    FileOptions o;
    o.create = true;
    o.direct_io = direct;
    Result<std::unique_ptr<File>> f = env_->OpenFile(dir_ + "/" + name, o);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  // Writes 32 pages through a queue, reads them back through another, checks the bytes.
  void QueueRoundTrip(bool use_io_uring) {
    std::unique_ptr<File> f = Create(use_io_uring ? "uring" : "sync", true);
    ASSERT_NE(f, nullptr);
    Result<std::unique_ptr<IoQueue>> q = env_->NewIoQueue(8, use_io_uring);
    ASSERT_TRUE(q.ok());
    if (!use_io_uring) {
      EXPECT_FALSE((*q)->is_io_uring());
    }
    constexpr size_t kOps = 32;
    std::vector<AlignedBuffer> bufs;
    for (size_t i = 0; i < kOps; ++i) {
      bufs.emplace_back(kDirectIoAlignment);
      std::memset(bufs[i].data(), static_cast<int>(i + 1), kDirectIoAlignment);
    }
    std::vector<IoCompletion> done;
    for (size_t i = 0; i < kOps; ++i) {
      ASSERT_TRUE((*q)->Submit(IoOp{f.get(), true, i * kDirectIoAlignment, bufs[i].span(), i},
                               &done).ok());
    }
    (*q)->WaitAll(&done);
    ASSERT_EQ(done.size(), kOps);
    for (const IoCompletion& c : done) EXPECT_TRUE(c.status.ok()) << c.status.ToString();
    done.clear();
    for (size_t i = 0; i < kOps; ++i) std::memset(bufs[i].data(), 0, kDirectIoAlignment);
    for (size_t i = 0; i < kOps; ++i) {
      ASSERT_TRUE((*q)->Submit(IoOp{f.get(), false, i * kDirectIoAlignment, bufs[i].span(), i},
                               &done).ok());
    }
    while ((*q)->WaitSome(&done)) {
    }
    ASSERT_EQ(done.size(), kOps);
    for (const IoCompletion& c : done) {
      EXPECT_TRUE(c.status.ok());
      EXPECT_EQ(c.bytes, kDirectIoAlignment);
      EXPECT_EQ(static_cast<int>(bufs[c.tag].data()[100]), static_cast<int>(c.tag + 1));
    }
  }

  Env* env_ = Env::Default();
  std::string dir_;
};

TEST_F(PosixEnvTest, FilesAndDirectories) {
  std::unique_ptr<File> f = Create("a", true);
  ASSERT_NE(f, nullptr);
  std::vector<std::byte> unaligned(100);
  EXPECT_EQ(f->Write(0, unaligned).code(), StatusCode::kInvalidArgument);
  AlignedBuffer page(kDirectIoAlignment);
  std::memset(page.data(), 0x3c, page.size());
  ASSERT_TRUE(f->Write(0, page.span()).ok());
  ASSERT_TRUE(f->Allocate(1 << 20).ok());
  EXPECT_EQ(*f->Size(), 1u << 20);
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->Truncate(kDirectIoAlignment).ok());
  AlignedBuffer back(2 * kDirectIoAlignment);
  size_t got = 0;
  ASSERT_TRUE(f->Read(0, back.span(), &got).ok());
  EXPECT_EQ(got, kDirectIoAlignment);  // Short read at the end of the file.
  EXPECT_EQ(std::memcmp(back.data(), page.data(), kDirectIoAlignment), 0);
  ASSERT_TRUE(env_->RenameFile(dir_ + "/a", dir_ + "/b").ok());
  ASSERT_TRUE(env_->SyncDir(dir_).ok());
  Result<std::vector<std::string>> names = env_->ListDir(dir_);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"b"});
  ASSERT_TRUE(env_->RemoveFile(dir_ + "/b").ok());
  EXPECT_EQ(env_->RemoveFile(dir_ + "/b").code(), StatusCode::kNotFound);
  EXPECT_EQ(env_->OpenFile(dir_ + "/missing", FileOptions{}).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(env_->CreateDir(dir_ + "/sub").ok());
  EXPECT_TRUE(env_->CreateDir(dir_ + "/sub").ok());
}

TEST_F(PosixEnvTest, IoUringQueueRoundTrip) { QueueRoundTrip(true); }
TEST_F(PosixEnvTest, PreadPwriteQueueRoundTrip) { QueueRoundTrip(false); }

TEST_F(PosixEnvTest, LockFileIsExclusive) {
  Result<std::unique_ptr<FileLock>> a = env_->LockFile(dir_ + "/LOCK");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(env_->LockFile(dir_ + "/LOCK").status().code(), StatusCode::kFailedPrecondition);
}

DiskTierOptions TierOptions(const std::string& dir, bool use_io_uring) {
  DiskTierOptions o;
  o.dir = dir + "/tier";
  o.segment_bytes = 1 * kMiB;
  o.capacity_bytes = 16 * kMiB;
  o.use_io_uring = use_io_uring;
  return o;
}

TEST_F(PosixEnvTest, DiskTierRoundTripsWithAndWithoutIoUring) {
  for (bool uring : {true, false}) {
    std::filesystem::remove_all(dir_ + "/tier");
    std::vector<std::byte> value(300 * 1024);
    for (size_t i = 0; i < value.size(); ++i) value[i] = std::byte(static_cast<uint8_t>(i * 13));
    {
      Result<std::unique_ptr<DiskTier>> t =
          DiskTier::Open(TierOptions(dir_, uring), {DiskTenantConfig{"t"}}, nullptr);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      for (uint8_t k = 0; k < 20; ++k) {
        std::array<uint8_t, kBlockKeySize> kb{};
        kb[0] = k;
        DiskTier::PutRequest req{BlockKey(kb), value};
        ASSERT_TRUE((*t)->PutMany(0, {&req, 1})[0].ok());
      }
      EXPECT_EQ((*t)->Stats().io_uring, uring);
      ASSERT_TRUE((*t)->Sync().ok());
    }
    Result<std::unique_ptr<DiskTier>> t =
        DiskTier::Open(TierOptions(dir_, uring), {DiskTenantConfig{"t"}}, nullptr);
    ASSERT_TRUE(t.ok());
    std::vector<std::byte> out(value.size());
    for (uint8_t k = 0; k < 20; ++k) {
      std::array<uint8_t, kBlockKeySize> kb{};
      kb[0] = k;
      BlockKey key(kb);
      std::span<std::byte> span(out);
      Result<size_t> r = (*t)->ReadMany(0, {&key, 1}, {&span, 1})[0];
      ASSERT_TRUE(r.ok()) << "block " << int{k} << ": " << r.status().ToString();
      EXPECT_EQ(out, value);
    }
    EXPECT_LE((*t)->Stats().used_bytes, 16 * kMiB);
  }
}

TEST_F(PosixEnvTest, SecondProcessOpeningTheDirectoryIsRefused) {
  Result<std::unique_ptr<DiskTier>> t =
      DiskTier::Open(TierOptions(dir_, true), {DiskTenantConfig{"t"}}, nullptr);
  ASSERT_TRUE(t.ok());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Result<std::unique_ptr<DiskTier>> second =
        DiskTier::Open(TierOptions(dir_, true), {DiskTenantConfig{"t"}}, nullptr);
    std::_Exit(second.status().code() == StatusCode::kFailedPrecondition ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace kvtier
