#include "src/services/encryption/cluster_keys.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/tier/sharedfs/shared_fs_test_util.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace kvtier::encryption {
namespace {

using testing_g4::FakeClockEnv;
using testing_g4::ScratchDir;

MasterKey Master(char digit) { return *MasterKey::FromHex(std::string(64, digit)); }

// Nodes of one cluster: each its own SharedFsTier and ClusterKeyManager on one shared root.
class ClusterKeysTest : public ::testing::Test {
 protected:
  struct Node {
    std::unique_ptr<SharedFsTier> g4;
    std::unique_ptr<ClusterKeyManager> keys;
  };

  Node MakeNode(const std::string& id, const MasterKey& master, KeyManagerOptions options = {}) {
    SharedFsTierOptions o;
    o.root = dir_.path();
    o.node_id = id;
    o.io_threads = 2;
    o.storage_clock = false;
    o.env = &clock_;
    Node n;
    Result<std::unique_ptr<SharedFsTier>> g4 = SharedFsTier::Open(o);
    EXPECT_TRUE(g4.ok()) << g4.status().ToString();
    n.g4 = std::move(g4).value();
    Result<std::unique_ptr<ClusterKeyManager>> keys =
        ClusterKeyManager::Create(&clock_, master, options);
    EXPECT_TRUE(keys.ok());
    n.keys = std::move(keys).value();
    EXPECT_TRUE(n.keys->Attach(n.g4.get()).ok());
    return n;
  }

  std::vector<std::string> Records() {
    std::vector<std::string> names;
    const std::filesystem::path dir = dir_.path() + "/kvtier-g4/v1/records";
    if (!std::filesystem::exists(dir)) return names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

  ScratchDir dir_;
  FakeClockEnv clock_{1'700'000'000'000'000};
};

TEST_F(ClusterKeysTest, NodesCreatingATenantsFirstKeyAtOnceAgreeOnOne) {
  std::vector<Node> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(MakeNode("n" + std::to_string(i), Master('a')));
  std::vector<SecretKey> keys(nodes.size());
  std::vector<uint32_t> versions(nodes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] {
      Result<uint32_t> v = nodes[i].keys->AcquireSealingKey("acme", &keys[i]);
      ASSERT_TRUE(v.ok()) << v.status().ToString();
      versions[i] = *v;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 1; i < nodes.size(); ++i) {
    EXPECT_EQ(versions[i], versions[0]);
    EXPECT_TRUE(std::equal(keys[i].bytes().begin(), keys[i].bytes().end(),
                           keys[0].bytes().begin()))
        << "node " << i << " seals under another key";
  }
  // A node that comes later opens with the same key.
  Node late = MakeNode("late", Master('a'));
  SecretKey got;
  ASSERT_TRUE(late.keys->GetKey("acme", versions[0], &got).ok());
  EXPECT_TRUE(std::equal(got.bytes().begin(), got.bytes().end(), keys[0].bytes().begin()));
}

TEST_F(ClusterKeysTest, AShredOnOneNodeReachesEveryNodeAndLeavesNoKeyInG4) {
  Node a = MakeNode("a", Master('a'));
  Node b = MakeNode("b", Master('a'));
  SecretKey k;
  Result<uint32_t> v = a.keys->AcquireSealingKey("acme", &k);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(b.keys->GetKey("acme", *v, &k).ok());
  ASSERT_TRUE(a.keys->AcquireSealingKey("other", &k).ok());

  ASSERT_TRUE(b.keys->ShredTenant("acme", "admin").ok());
  EXPECT_EQ(b.keys->GetKey("acme", *v, &k).code(), StatusCode::kFailedPrecondition);
  // a still holds the key until it hears of the shred (the tenant's deletion notice).
  EXPECT_TRUE(a.keys->GetKey("acme", *v, &k).ok());
  a.keys->ForgetTenant("acme");
  EXPECT_EQ(a.keys->GetKey("acme", *v, &k).code(), StatusCode::kFailedPrecondition);
  // Nothing left in G4 to load it from: a new node finds the shred, and no record of acme's
  // holds a key.
  Node c = MakeNode("c", Master('a'));
  EXPECT_EQ(c.keys->GetKey("acme", *v, &k).code(), StatusCode::kFailedPrecondition);
  for (const std::string& name : Records()) {
    if (name.starts_with("acme.")) {
      EXPECT_TRUE(name.starts_with("acme.shredded.")) << name << " survived the shred";
    }
  }
  // Another tenant is untouched; acme's next key is a new version.
  EXPECT_TRUE(c.keys->GetKey("other", 1, &k).ok());
  Result<uint32_t> next = a.keys->AcquireSealingKey("acme", &k);
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, *v);
}

TEST_F(ClusterKeysTest, TheNonceBudgetIsCountedAcrossNodes) {
  KeyManagerOptions o;
  o.max_seals_per_key = 8;
  o.seal_reservation = 2;  // Four reservations per version, whoever takes them.
  Node a = MakeNode("a", Master('a'), o);
  Node b = MakeNode("b", Master('a'), o);
  SecretKey k;
  std::vector<uint32_t> seen;
  for (int i = 0; i < 8; ++i) {
    Result<uint32_t> v = (i % 2 == 0 ? a : b).keys->AcquireSealingKey("acme", &k);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    seen.push_back(*v);
  }
  // a and b each took two reservations of version 1: its eight seals are spent.
  for (uint32_t v : seen) EXPECT_EQ(v, 1u);
  Result<uint32_t> after = a.keys->AcquireSealingKey("acme", &k);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, 2u) << "more than max_seals_per_key seals under one version";
  // Version 1 still opens everywhere.
  EXPECT_TRUE(b.keys->GetKey("acme", 1, &k).ok());
}

TEST_F(ClusterKeysTest, AMasterKeyRotationRewrapsWithoutChangingTheDataKeys) {
  Node a = MakeNode("a", Master('a'));
  SecretKey before;
  ASSERT_TRUE(a.keys->AcquireSealingKey("acme", &before).ok());
  ASSERT_TRUE(a.keys->RotateMasterKey(Master('b'), "admin").ok());
  EXPECT_EQ(a.keys->master_key_id(), Master('b').IdHex());
  // A node with the new master key opens the same data key.
  Node b = MakeNode("b", Master('b'));
  SecretKey after;
  ASSERT_TRUE(b.keys->GetKey("acme", 1, &after).ok());
  EXPECT_TRUE(std::equal(after.bytes().begin(), after.bytes().end(), before.bytes().begin()));
  // One still on the old key finds no key it can unwrap, and refuses to make its own.
  Node old = MakeNode("old", Master('a'));
  SecretKey k;
  const Status refused = old.keys->GetKey("acme", 1, &k);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("wrong master key"), std::string_view::npos);
  EXPECT_EQ(old.keys->AcquireSealingKey("acme", &k).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(ClusterKeysTest, AnAlteredKeyRecordIsRefusedNotUsed) {
  Node a = MakeNode("a", Master('a'));
  SecretKey k;
  ASSERT_TRUE(a.keys->AcquireSealingKey("acme", &k).ok());
  for (const std::string& name : Records()) {
    if (name.find(".k0000000001." + Master('a').IdHex()) == std::string::npos) continue;
    const std::string path = dir_.path() + "/kvtier-g4/v1/records/" + name;
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[bytes.size() - 20] ^= 1;  // Inside the wrapped key.
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  Node b = MakeNode("b", Master('a'));
  EXPECT_EQ(b.keys->GetKey("acme", 1, &k).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvtier::encryption
