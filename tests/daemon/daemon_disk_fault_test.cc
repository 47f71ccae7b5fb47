// Disk faults under a live kvtierd: its G3 directory on a real file system that fills up
// while it serves (a small tmpfs mounted by the test; the test skips, saying so, where
// mounting is not allowed). G3 stops taking writes and still serves reads, G2 goes on,
// /healthz and /metrics say what happened, and G3 takes writes again once there is room.
// I/O errors and a read-only file system are injected through the fault-injection Env, in
// src/tier/disk/disk_fault_test.cc (Linux refuses to remount read-only a file system that a
// process has files open for writing on, so a live daemon cannot be shown one).

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

constexpr size_t kValueBytes = 256 * 1024;

// A tmpfs of `size` at a fresh directory, unmounted on destruction (declare it before the
// daemon that uses it, so that the daemon stops first).
class SmallFilesystem {
 public:
  explicit SmallFilesystem(const std::string& size) {
    path_ = std::filesystem::temp_directory_path() / ("kvtier_g3_fs_" + std::to_string(getpid()));
    std::filesystem::create_directories(path_);
    const std::string options = "size=" + size + ",mode=0700";
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!mounted_) error_ = std::string("cannot mount a tmpfs here: ") + std::strerror(errno);
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    std::filesystem::remove_all(path_);
  }
  // Remounts with other options ("size=64m").
  bool Remount(const std::string& options) {
    return ::mount(nullptr, path_.c_str(), nullptr, MS_REMOUNT, options.c_str()) == 0;
  }
  bool ok() const { return mounted_; }
  const std::string& error() const { return error_; }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
  bool mounted_ = false;
  std::string error_;
};

std::string Healthz(const Daemon& d) {
  const std::string r = Http(d.http_port(), "GET /healthz HTTP/1.0\r\n\r\n");
  const size_t body = r.find("\r\n\r\n");
  EXPECT_NE(r.find("200"), std::string::npos) << r;
  return body == std::string::npos ? r : r.substr(body + 4);
}

std::string DiskConfig(const SmallFilesystem& fs) {
  return "[disk]\ndir = \"" + fs.path() + "\"\ncapacity = \"64MiB\"\nsegment_bytes = \"1MiB\"\n";
}

void PutAll(Client* c, uint32_t first, uint32_t n) {
  for (uint32_t i = first; i < first + n; ++i) {
    ASSERT_TRUE(c->Put(TestKey(i), RandomValue(i, kValueBytes)).ok()) << i;
  }
}

void ExpectAll(Client* c, uint32_t first, uint32_t n) {
  for (uint32_t i = first; i < first + n; ++i) {
    Result<std::vector<std::byte>> v = c->Get(TestKey(i));
    ASSERT_TRUE(v.ok()) << "block " << i << ": " << v.status().ToString();
    EXPECT_EQ(*v, RandomValue(i, kValueBytes)) << "block " << i;
  }
}

TEST(DaemonDiskFaultTest, AFullG3StopsTakingWritesServesOnAndComesBackWhenThereIsRoom) {
  SmallFilesystem fs("3m");
  if (!fs.ok()) GTEST_SKIP() << "skipped: " << fs.error();
  Daemon d(DiskConfig(fs));
  ASSERT_TRUE(d.running());
  auto c = ConnectUnix(d);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Healthz(d), "ok\n");
  EXPECT_EQ(Metric(d, "kvtier_tier_writable{tier=\"g3\"}"), 1);
  // 24 blocks of 256 KiB do not fit in 3 MiB: the flush fills G3 and fails.
  PutAll(c.get(), 0, 24);
  Result<uint64_t> flushed = c->Flush();
  ASSERT_FALSE(flushed.ok());
  EXPECT_EQ(flushed.status().code(), StatusCode::kResourceExhausted) << flushed.status().ToString();
  const std::string health = Healthz(d);
  EXPECT_EQ(health.rfind("degraded\nG3 not writable", 0), 0u) << health;
  EXPECT_EQ(Metric(d, "kvtier_tier_writable{tier=\"g3\"}"), 0);
  EXPECT_GT(Metric(d, "kvtier_disk_write_errors_total"), 0);
  // Serving goes on: every block is read back, and new puts are taken (by G2).
  ExpectAll(c.get(), 0, 24);
  PutAll(c.get(), 100, 4);
  ExpectAll(c.get(), 100, 4);

  // Room again: the next flush writes everything, and G3 is writable.
  ASSERT_TRUE(fs.Remount("size=64m"));
  flushed = c->Flush();
  ASSERT_TRUE(flushed.ok()) << flushed.status().ToString();
  EXPECT_GT(*flushed, 0u);
  EXPECT_EQ(Healthz(d), "ok\n");
  EXPECT_EQ(Metric(d, "kvtier_tier_writable{tier=\"g3\"}"), 1);
  // And it was real: after kill -9, G3 alone brings every block back.
  c.reset();
  d.Kill();
  d.Start();
  c = ConnectUnix(d);
  ASSERT_NE(c, nullptr);
  ExpectAll(c.get(), 0, 24);
  ExpectAll(c.get(), 100, 4);
}

}  // namespace
}  // namespace kvtier::daemon_test
