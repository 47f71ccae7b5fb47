#include "src/tier/sharedfs/shared_fs_tier.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "src/env/mem_env.h"
#include "src/services/encryption/key_manager.h"
#include "src/services/encryption/master_key.h"
#include "src/tier/shared/object_format.h"
#include "src/tier/sharedfs/shared_fs_test_util.h"

namespace kvtier {
namespace {

using testing_g4::CountFiles;
using testing_g4::FakeClockEnv;
using testing_g4::MakePut;
using testing_g4::SortedKeys;
using testing_g4::ScratchDir;
using testing_g4::TestKey;
using testing_g4::TestKeys;
using testing_g4::TestValue;

constexpr uint64_t kStart = 1'700'000'000'000'000;

class SharedFsTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<SharedFsTier> Node(const std::string& id, BlockCodec* codec = nullptr) {
    SharedFsTierOptions o;
    o.root = dir_.path();
    o.node_id = id;
    o.io_threads = 4;
    o.storage_clock = false;
    o.env = &clock_;
    o.codec = codec;
    Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(o);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(*tier) : nullptr;
  }
  std::string TmpDir() const { return dir_.path() + "/kvtier-g4/v1/tmp"; }
  std::string ObjectsDir() const { return dir_.path() + "/kvtier-g4/v1/objects"; }

  ScratchDir dir_;
  FakeClockEnv clock_{kStart};
};

TEST_F(SharedFsTierTest, OpenRejectsBadOptions) {
  SharedFsTierOptions o;
  EXPECT_EQ(SharedFsTier::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.root = dir_.path() + "/absent";
  EXPECT_EQ(SharedFsTier::Open(o).status().code(), StatusCode::kNotFound);
  o.root = dir_.path();
  o.node_id = "bad/id";
  EXPECT_EQ(SharedFsTier::Open(o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SharedFsTierTest, PutExistsGetDelete) {
  auto tier = Node("n1");
  const std::vector<std::byte> a = TestValue(3000, 1), b = TestValue(1, 2);
  std::vector<SharedPut> puts = {MakePut(TestKey(1), a, 7, 111, KvDtype::kFp16),
                                 MakePut(TestKey(2), b, 0, 0, std::nullopt)};
  for (const Status& s : tier->PutMany("acme", puts)) ASSERT_TRUE(s.ok()) << s.ToString();

  const std::vector<BlockKey> keys = {TestKey(1), TestKey(2), TestKey(3)};
  auto info = tier->ExistsMany("acme", keys);
  ASSERT_TRUE(info[0].has_value());
  EXPECT_EQ(info[0]->value_bytes, 3000u);
  EXPECT_EQ(info[0]->session, 7u);
  EXPECT_EQ(info[0]->created_us, 111u);
  EXPECT_EQ(info[0]->dtype, KvDtype::kFp16);
  ASSERT_TRUE(info[1].has_value());
  EXPECT_EQ(info[1]->created_us, kStart);  // 0 = now.
  EXPECT_FALSE(info[2].has_value());

  auto got = tier->GetMany("acme", keys);
  ASSERT_TRUE(got[0].ok());
  EXPECT_EQ(*got[0], a);
  ASSERT_TRUE(got[1].ok());
  EXPECT_EQ(*got[1], b);
  EXPECT_EQ(got[2].status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(tier->Delete("acme", TestKey(1)).ok());
  ASSERT_TRUE(tier->Delete("acme", TestKey(1)).ok());  // Absent: OK.
  EXPECT_EQ(tier->GetMany("acme", keys)[0].status().code(), StatusCode::kNotFound);

  SharedTierStats st = tier->Stats();
  EXPECT_EQ(st.puts, 2u);
  EXPECT_EQ(st.hits, 3u);  // 2 + key 2 again after the delete.
  EXPECT_EQ(st.misses, 3u);
  EXPECT_EQ(st.corrupt, 0u);
  EXPECT_EQ(st.deletes, 1u);
  EXPECT_EQ(st.errors, 0u);
  EXPECT_EQ(CountFiles(TmpDir()), 0u);
}

TEST_F(SharedFsTierTest, TenantsAreIsolatedAndNamesMadeSafe) {
  auto tier = Node("n1");
  const std::vector<std::byte> v = TestValue(100, 3);
  const SharedPut put = MakePut(TestKey(1), v);
  ASSERT_TRUE(tier->PutMany("../../etc", {&put, 1})[0].ok());
  const BlockKey key = TestKey(1);
  EXPECT_FALSE(tier->ExistsMany("other", {&key, 1})[0].has_value());
  EXPECT_EQ(tier->GetMany("other", {&key, 1})[0].status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(tier->GetMany("../../etc", {&key, 1})[0].ok());
  // Everything stayed under the root's own prefix.
  EXPECT_EQ(CountFiles(ObjectsDir()), 1u);
  EXPECT_EQ(tier->GetMany("", {&key, 1})[0].status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SharedFsTierTest, SecondPutIsNoOp) {
  auto n1 = Node("n1");
  auto n2 = Node("n2");
  const std::vector<std::byte> v = TestValue(500, 4);
  const SharedPut put = MakePut(TestKey(4), v, 1);
  ASSERT_TRUE(n1->PutMany("t", {&put, 1})[0].ok());
  ASSERT_TRUE(n2->PutMany("t", {&put, 1})[0].ok());
  EXPECT_EQ(n1->Stats().puts, 1u);
  EXPECT_EQ(n2->Stats().puts, 0u);
  EXPECT_EQ(n2->Stats().put_existing, 1u);
  EXPECT_EQ(CountFiles(ObjectsDir()), 1u);
}

TEST_F(SharedFsTierTest, ConcurrentWritersOfOneBlockLeaveOneObject) {
  std::vector<std::unique_ptr<SharedFsTier>> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(Node("n" + std::to_string(i)));
  std::vector<std::vector<std::byte>> values;
  for (uint32_t k = 0; k < 16; ++k) values.push_back(TestValue(4096 + k, k));
  std::vector<SharedPut> puts;
  for (uint32_t k = 0; k < 16; ++k) puts.push_back(MakePut(TestKey(k), values[k], 3));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (const Status& s : nodes[static_cast<size_t>(t) % 4]->PutMany("t", puts)) {
        if (!s.ok()) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(CountFiles(ObjectsDir()), 16u);
  EXPECT_EQ(CountFiles(TmpDir()), 0u);
  uint64_t published = 0;
  for (auto& n : nodes) published += n->Stats().puts;
  EXPECT_EQ(published, 16u);
  std::vector<BlockKey> keys;
  for (uint32_t k = 0; k < 16; ++k) keys.push_back(TestKey(k));
  auto got = nodes[0]->GetMany("t", keys);
  for (uint32_t k = 0; k < 16; ++k) {
    ASSERT_TRUE(got[k].ok());
    EXPECT_EQ(*got[k], values[k]);
  }
}

// Several processes (the multi-node case on one shared root) racing to publish the same blocks.
TEST_F(SharedFsTierTest, ConcurrentProcessesLeaveOneObject) {
  constexpr int kProcesses = 4;
  constexpr uint32_t kBlocks = 32;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      SharedFsTierOptions o;
      o.root = dir_.path();
      o.node_id = "proc" + std::to_string(p);
      o.io_threads = 0;  // No threads in a forked child (sanitizers forbid them there).
      Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(o);
      if (!tier.ok()) ::_exit(2);
      std::vector<std::vector<std::byte>> values;
      std::vector<SharedPut> puts;
      for (uint32_t k = 0; k < kBlocks; ++k) values.push_back(TestValue(8192, k));
      for (uint32_t k = 0; k < kBlocks; ++k) puts.push_back(MakePut(TestKey(k), values[k]));
      int rc = 0;
      for (const Status& s : (*tier)->PutMany("t", puts)) rc |= s.ok() ? 0 : 1;
      tier->reset();
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  EXPECT_EQ(CountFiles(ObjectsDir()), kBlocks);
  EXPECT_EQ(CountFiles(TmpDir()), 0u);
  auto tier = Node("reader");
  for (uint32_t k = 0; k < kBlocks; ++k) {
    const BlockKey key = TestKey(k);
    auto got = tier->GetMany("t", {&key, 1});
    ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
    EXPECT_EQ(*got[0], TestValue(8192, k));
  }
}

// G4 full: a process whose file size limit is below the block (EFBIG, as ENOSPC would be)
// gets ResourceExhausted, publishes nothing and leaves no temp file.
TEST_F(SharedFsTierTest, FullStorageFailsCleanly) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit limit = {64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    SharedFsTierOptions o;
    o.root = dir_.path();
    o.node_id = "full";
    o.io_threads = 0;
    Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(o);
    if (!tier.ok()) ::_exit(2);
    const std::vector<std::byte> big = TestValue(1 << 20, 1), small = TestValue(1000, 2);
    std::vector<SharedPut> puts = {MakePut(TestKey(1), big), MakePut(TestKey(2), small)};
    std::vector<Status> st = (*tier)->PutMany("t", puts);
    const bool ok = st[0].code() == StatusCode::kResourceExhausted && st[1].ok() &&
                    (*tier)->Stats().errors == 1;
    tier->reset();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(CountFiles(TmpDir()), 0u);
  auto tier = Node("reader");
  const std::vector<BlockKey> keys = {TestKey(1), TestKey(2)};
  auto got = tier->GetMany("t", keys);
  EXPECT_EQ(got[0].status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(got[1].ok());
  EXPECT_EQ(*got[1], TestValue(1000, 2));
}

TEST_F(SharedFsTierTest, GarbageAndTruncatedObjectsAreCountedMissesAndRemoved) {
  auto tier = Node("n1");
  const std::vector<std::byte> v1 = TestValue(10000, 5), v2 = TestValue(10000, 6);
  std::vector<SharedPut> puts = {MakePut(TestKey(5), v1), MakePut(TestKey(6), v2)};
  for (const Status& s : tier->PutMany("t", puts)) ASSERT_TRUE(s.ok());
  const std::string garbage_path = *tier->ObjectPath("t", TestKey(5));
  const std::string truncated_path = *tier->ObjectPath("t", TestKey(6));
  {
    const std::vector<std::byte> junk = TestValue(10200, 99);
    std::ofstream f(garbage_path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(junk.data()), static_cast<std::streamsize>(junk.size()));
  }
  std::filesystem::resize_file(truncated_path, 5000);

  const std::vector<BlockKey> keys = {TestKey(5), TestKey(6)};
  EXPECT_FALSE(tier->ExistsMany("t", keys)[0].has_value());
  EXPECT_FALSE(tier->ExistsMany("t", keys)[1].has_value());
  auto got = tier->GetMany("t", keys);
  EXPECT_EQ(got[0].status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(got[1].status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(tier->Stats().corrupt, 2u);
  EXPECT_EQ(tier->Stats().misses, 2u);
  EXPECT_FALSE(std::filesystem::exists(garbage_path));
  EXPECT_FALSE(std::filesystem::exists(truncated_path));
  // Removed, so the next put publishes a good copy again.
  for (const Status& s : tier->PutMany("t", puts)) ASSERT_TRUE(s.ok());
  got = tier->GetMany("t", keys);
  ASSERT_TRUE(got[0].ok());
  EXPECT_EQ(*got[0], v1);
}

TEST_F(SharedFsTierTest, NewerFormatVersionIsAClearMissAndKept) {
  auto tier = Node("n1");
  const std::vector<std::byte> v = TestValue(100, 7);
  const SharedPut put = MakePut(TestKey(7), v);
  ASSERT_TRUE(tier->PutMany("t", {&put, 1})[0].ok());
  const std::string path = *tier->ObjectPath("t", TestKey(7));
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(4);
    const char v2[2] = {2, 0};
    f.write(v2, 2);
  }
  const BlockKey key = TestKey(7);
  auto got = tier->GetMany("t", {&key, 1});
  EXPECT_EQ(got[0].status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(tier->Stats().misses, 1u);
  EXPECT_EQ(tier->Stats().corrupt, 0u);
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST_F(SharedFsTierTest, DeleteSessionAcrossNodes) {
  auto n1 = Node("n1");
  auto n2 = Node("n2");
  const std::vector<std::byte> v = TestValue(64, 8);
  std::vector<SharedPut> p1 = {MakePut(TestKey(1), v, 7), MakePut(TestKey(2), v, 7)};
  std::vector<SharedPut> p2 = {MakePut(TestKey(3), v, 7), MakePut(TestKey(4), v, 8),
                              MakePut(TestKey(5), v, 0)};
  for (const Status& s : n1->PutMany("t", p1)) ASSERT_TRUE(s.ok());
  for (const Status& s : n2->PutMany("t", p2)) ASSERT_TRUE(s.ok());
  // Another tenant's session 7 is not touched.
  for (const Status& s : n2->PutMany("u", p1)) ASSERT_TRUE(s.ok());

  Result<std::vector<BlockKey>> removed = n2->DeleteSession("t", 7);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(SortedKeys(*removed), TestKeys({1, 2, 3}));
  const std::vector<BlockKey> keys = {TestKey(1), TestKey(2), TestKey(3), TestKey(4),
                                     TestKey(5)};
  auto info = n1->ExistsMany("t", keys);
  EXPECT_FALSE(info[0] || info[1] || info[2]);
  EXPECT_TRUE(info[3] && info[4]);
  EXPECT_TRUE(n1->ExistsMany("u", keys)[0].has_value());
  EXPECT_TRUE(n1->DeleteSession("t", 7)->empty());
  EXPECT_EQ(n1->DeleteSession("t", 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SharedFsTierTest, DeleteSessionLeavesTheMarkerOfAPutInFlight) {
  // A put writes its session marker, then publishes its object. A deletion that lists the
  // marker in between must leave it: the object is about to appear, and only the marker lets
  // the session's next deletion find it.
  auto n1 = Node("n1");
  auto n2 = Node("n2");
  const BlockKey key = TestKey(9);
  const std::string marker =
      dir_.path() + "/" + g4::SessionMarkerName(*g4::TenantComponent("t"), 7, key);
  std::filesystem::create_directories(std::filesystem::path(marker).parent_path());
  std::ofstream(marker).close();  // n1's put, between its marker and its object.
  Result<std::vector<BlockKey>> removed = n2->DeleteSession("t", 7);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(std::filesystem::exists(marker));
  const std::vector<std::byte> v = TestValue(64, 3);
  const std::vector<SharedPut> put = {MakePut(key, v, 7)};
  for (const Status& s : n1->PutMany("t", put)) ASSERT_TRUE(s.ok());
  removed = n2->DeleteSession("t", 7);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, std::vector<BlockKey>{key});
  EXPECT_FALSE(n1->ExistsMany("t", {&key, 1})[0].has_value());
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST_F(SharedFsTierTest, DeleteTenant) {
  auto tier = Node("n1");
  const std::vector<std::byte> v = TestValue(64, 9);
  std::vector<SharedPut> puts;
  for (uint32_t k = 0; k < 20; ++k) puts.push_back(MakePut(TestKey(k), v, k % 3));
  for (const Status& s : tier->PutMany("t", puts)) ASSERT_TRUE(s.ok());
  for (const Status& s : tier->PutMany("u", puts)) ASSERT_TRUE(s.ok());
  Result<std::vector<BlockKey>> removed = tier->DeleteTenant("t");
  ASSERT_TRUE(removed.ok());
  std::vector<BlockKey> expected;
  for (uint32_t k = 0; k < 20; ++k) expected.push_back(TestKey(k));
  EXPECT_EQ(SortedKeys(*removed), SortedKeys(expected));
  EXPECT_FALSE(std::filesystem::exists(ObjectsDir() + "/t"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/kvtier-g4/v1/sessions/t"));
  const BlockKey key = TestKey(0);
  EXPECT_TRUE(tier->ExistsMany("u", {&key, 1})[0].has_value());
  EXPECT_TRUE(tier->DeleteTenant("never")->empty());
}

// Deletion notices: published atomically under their name, once; read from any node in name
// order, after a given name, without the ones the reader skips.
TEST_F(SharedFsTierTest, NoticesArePublishedOnceAndReadInNameOrderFromAnyNode) {
  auto a = Node("a");
  auto b = Node("b");
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(b->NoticesAfter("", nullptr)->empty());  // None yet: not an error.
  const std::string one = "first", two = "second";
  ASSERT_TRUE(a->PublishNotice("0002-a-1", std::as_bytes(std::span(two))).ok());
  ASSERT_TRUE(a->PublishNotice("0001-a-1", std::as_bytes(std::span(one))).ok());
  EXPECT_EQ(a->PublishNotice("0001-a-1", std::as_bytes(std::span(two))).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(a->PublishNotice("../escape", {}).code(), StatusCode::kInvalidArgument);
  Result<std::vector<SharedNotice>> all = b->NoticesAfter("", nullptr);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "0001-a-1");
  EXPECT_EQ((*all)[0].body, std::vector<std::byte>(std::as_bytes(std::span(one)).begin(),
                                                   std::as_bytes(std::span(one)).end()));
  EXPECT_EQ((*all)[1].name, "0002-a-1");
  EXPECT_EQ(b->NoticesAfter("0001-a-1", nullptr)->size(), 1u);
  EXPECT_TRUE(b->NoticesAfter("", [](std::string_view) { return true; })->empty());
  EXPECT_EQ(CountFiles(TmpDir()), 0u);
}

TEST_F(SharedFsTierTest, ReadsRefreshAccessTimeAtMostOncePerInterval) {
  auto tier = Node("n1");
  const std::vector<std::byte> v = TestValue(64, 10);
  const SharedPut put = MakePut(TestKey(1), v);
  ASSERT_TRUE(tier->PutMany("t", {&put, 1})[0].ok());
  const BlockKey key = TestKey(1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(tier->GetMany("t", {&key, 1})[0].ok());
  EXPECT_EQ(tier->Stats().touches, 0u);
  clock_.Advance(SharedJanitorOptions{}.touch_interval_us + 1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(tier->GetMany("t", {&key, 1})[0].ok());
  EXPECT_EQ(tier->Stats().touches, 1u);
}

TEST_F(SharedFsTierTest, EncryptedBlocksNeedTheTenantKey) {
  std::unique_ptr<Env> mem = NewMemEnv(Env::Default());
  ASSERT_TRUE(mem->CreateDir("/a").ok());
  ASSERT_TRUE(mem->CreateDir("/b").ok());
  auto keys_a = encryption::KeyManager::Open(
      mem.get(), "/a", *encryption::MasterKey::FromHex(std::string(64, 'a')), {}).value();
  auto keys_b = encryption::KeyManager::Open(
      mem.get(), "/b", *encryption::MasterKey::FromHex(std::string(64, 'b')), {}).value();
  auto codec_a = BlockCodec::Create({true, true}, keys_a.get()).value();
  auto codec_b = BlockCodec::Create({true, true}, keys_b.get()).value();
  auto with_key = Node("n1", codec_a.get());
  auto without_key = Node("n2", codec_b.get());
  const std::vector<std::byte> v = TestValue(4096, 11);
  const SharedPut put = MakePut(TestKey(1), v, 0, 0, KvDtype::kBf16);
  ASSERT_TRUE(with_key->PutMany("acme", {&put, 1})[0].ok());
  const BlockKey key = TestKey(1);
  EXPECT_FALSE(without_key->GetMany("acme", {&key, 1})[0].ok());
  EXPECT_EQ(without_key->Stats().hits, 0u);
  // Not deleted by the node that lacks the key; still served to the node that has it.
  auto got = with_key->GetMany("acme", {&key, 1});
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(*got[0], v);
  // Shredding the tenant's key makes the G4 copy unreadable.
  ASSERT_TRUE(keys_a->ShredTenant("acme", "test").ok());
  EXPECT_TRUE(BlockCodec::IsShredded(with_key->GetMany("acme", {&key, 1})[0].status()));
}

}  // namespace
}  // namespace kvtier
