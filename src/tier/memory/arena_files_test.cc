// G2 arena files as an operator sees them with `kvtier admin arenas`: an arena in use is
// listed with its process and never removed; a stopped one whose data directory exists is kept
// for its warm restart; one whose data directory is gone is orphaned and removed with all its
// files; other programs' files are never touched.

#include "src/tier/memory/arena_files.h"

#include <sys/mount.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvtier/store.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

class ArenaFilesTest : public ::testing::Test {
 protected:
  ArenaFilesTest() {
    const fs::path base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    dir_ = base / ("kvtier_arena_files_" + std::to_string(getpid()) + "_" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "arenas");
    fs::create_directories(dir_ / "data");
    options_.memory.capacity_bytes = 16 * kMiB;
    options_.max_block_bytes = 1 * kMiB;
    options_.memory.arena_file = (dir_ / "arenas" / "kvtier-g2-00112233445566aa").string();
    options_.memory.arena_data_dir = (dir_ / "data").string();
    options_.tenants = {TenantOptions{"default"}, TenantOptions{"acme"}};
  }
  ~ArenaFilesTest() override {
    store_.reset();
    fs::remove_all(dir_);
  }

  void OpenAndPut() {
    Result<std::unique_ptr<Store>> s = Store::Open(options_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    std::array<uint8_t, kBlockKeySize> key{};
    key[0] = 1;
    std::vector<std::byte> value(256 * kKiB, std::byte{7});
    ASSERT_TRUE(store_->Put(*store_->FindTenant("acme"), BlockKey(key), value).ok());
  }

  std::vector<ArenaFiles> List() {
    Result<std::vector<ArenaFiles>> arenas = ListArenas((dir_ / "arenas").string());
    EXPECT_TRUE(arenas.ok()) << arenas.status().ToString();
    return arenas.ok() ? *arenas : std::vector<ArenaFiles>{};
  }

  std::vector<std::string> Names() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / "arenas")) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
  Options options_;
  std::unique_ptr<Store> store_;
};

TEST_F(ArenaFilesTest, AnArenaInUseIsListedWithItsProcessAndIsNeverRemoved) {
  OpenAndPut();
  std::vector<ArenaFiles> arenas = List();
  ASSERT_EQ(arenas.size(), 1u);
  EXPECT_EQ(arenas[0].path, options_.memory.arena_file);
  EXPECT_EQ(arenas[0].state, ArenaState::kInUse);
  EXPECT_EQ(arenas[0].holder_pid, getpid());
  EXPECT_EQ(arenas[0].data_dir, options_.memory.arena_data_dir);
  EXPECT_GE(arenas[0].bytes, 256 * kKiB) << "the block's memory is counted";
  EXPECT_EQ(arenas[0].files.size(), 3u) << "two tenants' regions and the lock";

  const Status removed = RemoveArena(arenas[0]);
  EXPECT_EQ(removed.code(), StatusCode::kFailedPrecondition) << removed.ToString();
  EXPECT_NE(removed.message().find("in use"), std::string::npos) << removed.ToString();
  EXPECT_EQ(Names().size(), 3u) << "nothing of an arena in use goes";
}

TEST_F(ArenaFilesTest, AStoppedArenaIsKeptForItsRestartUntilItsDataDirectoryGoes) {
  OpenAndPut();
  store_.reset();  // A clean stop: the index is written beside the regions.
  std::vector<ArenaFiles> arenas = List();
  ASSERT_EQ(arenas.size(), 1u);
  EXPECT_EQ(arenas[0].state, ArenaState::kStopped);
  EXPECT_EQ(arenas[0].holder_pid, 0);
  EXPECT_EQ(arenas[0].files.size(), 4u) << "regions, index and lock";
  EXPECT_EQ(arenas[0].files.back(), options_.memory.arena_file + ".lock");

  fs::remove_all(dir_ / "data");  // The operator removes (or moves) the data directory.
  arenas = List();
  ASSERT_EQ(arenas.size(), 1u);
  EXPECT_EQ(arenas[0].state, ArenaState::kOrphaned);
  ASSERT_TRUE(RemoveArena(arenas[0]).ok());
  EXPECT_TRUE(Names().empty()) << "every file of the arena is gone";
  EXPECT_TRUE(List().empty());
}

TEST_F(ArenaFilesTest, AnArenaWhoseProcessIsGoneIsNotInUseUntilItStartsAgain) {
  // Killed: the lock goes with the process, the files and no index stay. Closing the store
  // without an index models it (the lock is released, as the kernel does for kill -9).
  OpenAndPut();
  store_.reset();
  fs::remove(options_.memory.arena_file + ".index");
  std::vector<ArenaFiles> arenas = List();
  ASSERT_EQ(arenas.size(), 1u);
  EXPECT_EQ(arenas[0].state, ArenaState::kStopped);
  // It starts again on the same files: they are its again, and in use.
  OpenAndPut();
  arenas = List();
  ASSERT_EQ(arenas.size(), 1u);
  EXPECT_EQ(arenas[0].state, ArenaState::kInUse);
}

TEST_F(ArenaFilesTest, ArenasOfUnknownOwnerAndOtherProgramsFiles) {
  const fs::path arenas_dir = dir_ / "arenas";
  // An arena an older kvtierd left: an empty lock file, a region, no data directory named.
  std::ofstream(arenas_dir / "kvtier-g2-0123456789abcdef.lock");
  std::ofstream(arenas_dir / "kvtier-g2-0123456789abcdef.44ad98655d8858e1") << "bytes";
  // Other programs' files, one of them shaped like a region.
  std::ofstream(arenas_dir / "postgres.0123456789abcdef") << "theirs";
  std::ofstream(arenas_dir / "kvtier-g2-notours.lock") << "theirs";
  std::ofstream(arenas_dir / "pulse-shm-1234") << "theirs";
  // A renamed arena (memory.arena_file) is known by its lock file's contents.
  options_.memory.arena_file = (arenas_dir / "custom").string();
  OpenAndPut();
  store_.reset();

  std::vector<ArenaFiles> arenas = List();
  ASSERT_EQ(arenas.size(), 2u);
  EXPECT_EQ(arenas[0].path, (arenas_dir / "custom").string());
  EXPECT_EQ(arenas[0].state, ArenaState::kStopped);
  EXPECT_EQ(arenas[1].path, (arenas_dir / "kvtier-g2-0123456789abcdef").string());
  EXPECT_EQ(arenas[1].state, ArenaState::kUnknownOwner);
  EXPECT_EQ(arenas[1].files.size(), 2u);
  ASSERT_TRUE(RemoveArena(arenas[1]).ok());
  ASSERT_TRUE(RemoveArena(arenas[0]).ok());
  EXPECT_EQ(Names(), (std::vector<std::string>{"kvtier-g2-notours.lock", "postgres.0123456789abcdef",
                                               "pulse-shm-1234"}));
}

// A G2 larger than its file system has room for runs in anonymous memory, without warm
// restarts (containers give /dev/shm 64 MiB): it leaves no file behind, not even its lock.
TEST_F(ArenaFilesTest, AnArenaThatDoesNotFitItsFileSystemLeavesNothingBehind) {
  // A file system of 8 MiB for a G2 of 16 MiB.
  const fs::path small = dir_ / "small";
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs: " << std::strerror(errno) << " (needs root)";
  }
  options_.memory.arena_file = (small / "g2").string();
  OpenAndPut();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(small)) left.push_back(e.path().string());
  EXPECT_TRUE(left.empty()) << "left behind: " << left.front();
  store_.reset();
  EXPECT_EQ(::umount(small.c_str()), 0);
}

TEST_F(ArenaFilesTest, AMissingDirectoryIsNotFound) {
  Result<std::vector<ArenaFiles>> arenas = ListArenas((dir_ / "nowhere").string());
  EXPECT_EQ(arenas.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvtier
