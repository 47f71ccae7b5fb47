// State beside KV through a real kvtierd (docs/state.md): atomic puts of a boundary's KV and
// state values, the resume lookup, bad input, and state that outlives a kill -9 through G3.

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "kvtier/state.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

using protocol::Opcode;

constexpr uint32_t kBlocks = 6;
constexpr size_t kKvBytes = 256 * kKiB;
constexpr size_t kStateBytes = 96 * kKiB;

BlockWrite Write(const BlockKey& key, std::span<const std::byte> value,
                 std::optional<BlockKey> parent, BlockRole role) {
  BlockWrite w;
  w.key = key;
  w.value = value;
  w.parent = parent;
  w.role = role;
  return w;
}

// A hybrid prompt: kBlocks KV blocks, a recurrent state after the last one ("mamba") and a
// sliding window of two blocks ("swa") at every block.
struct HybridPrompt {
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> kv, swa;
  std::vector<std::byte> mamba;

  HybridPrompt() {
    for (uint32_t i = 0; i < kBlocks; ++i) {
      keys.push_back(TestKey(700, i));
      kv.push_back(RandomValue(700 + i, kKvBytes));
      swa.push_back(RandomValue(800 + i, kStateBytes / 2));
    }
    mamba = RandomValue(900, kStateBytes);
  }

  BlockKey Mamba() const { return *StateKey(keys.back(), "mamba"); }
  BlockKey Swa(uint32_t i) const { return *StateKey(keys[i], "swa"); }

  // The KV of every block but the last, with PutMany; then the last block with its state values
  // in one atomic put.
  void Store(Client* c) const {
    std::vector<BlockWrite> first;
    for (uint32_t i = 0; i + 1 < kBlocks; ++i) {
      first.push_back(Write(keys[i], kv[i], i > 0 ? std::optional(keys[i - 1]) : std::nullopt,
                            BlockRole::kKvNeedsState));
      first.push_back(Write(Swa(i), swa[i], keys[i], BlockRole::kState));
    }
    for (const Status& s : c->PutMany(first)) ASSERT_TRUE(s.ok()) << s.ToString();
    const uint32_t last = kBlocks - 1;
    std::vector<BlockWrite> tip = {
        Write(keys[last], kv[last], keys[last - 1], BlockRole::kKvNeedsState),
        Write(Swa(last), swa[last], keys[last], BlockRole::kState),
        Write(Mamba(), mamba, keys[last], BlockRole::kState)};
    Status s = c->PutAtomic(tip);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  ResumeQuery Query() const { return {1, {{"mamba", 1}, {"swa", 2}}, true}; }

  // Reads the KV and state values a resume after block `n - 1` needs, and checks every byte.
  void ExpectResumable(Client* c, size_t n) const {
    std::vector<BlockKey> want(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(n));
    want.push_back(Swa(static_cast<uint32_t>(n - 2)));
    want.push_back(Swa(static_cast<uint32_t>(n - 1)));
    want.push_back(Mamba());
    BlockValues got = c->GetMany(want);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(got.values[i].ok()) << "block " << i;
      EXPECT_TRUE(std::equal(got.values[i]->begin(), got.values[i]->end(), kv[i].begin(),
                             kv[i].end()));
    }
    ASSERT_TRUE(got.values[n].ok() && got.values[n + 1].ok() && got.values[n + 2].ok());
    EXPECT_TRUE(std::ranges::equal(*got.values[n], swa[n - 2]));
    EXPECT_TRUE(std::ranges::equal(*got.values[n + 1], swa[n - 1]));
    EXPECT_TRUE(std::ranges::equal(*got.values[n + 2], mamba));
  }
};

std::unique_ptr<Client> Connect(const std::string& endpoint) {
  ClientOptions o;
  o.endpoint = endpoint;
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(DaemonStateTest, AHybridPromptResumesExactlyWhereItsStateIs) {
  Daemon d;
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  HybridPrompt p;
  p.Store(c.get());
  Result<ResumeMatch> m = c->LookupResume(p.keys, p.Query());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->kv_blocks, kBlocks);
  EXPECT_EQ(m->resume_blocks, kBlocks);
  EXPECT_EQ(m->resumable, std::vector<uint32_t>{kBlocks});  // "mamba" exists at the tip only.
  EXPECT_EQ(m->group_blocks, (std::vector<uint32_t>{kBlocks, kBlocks}));
  p.ExpectResumable(c.get(), kBlocks);

  // A lost state: the resume point goes with it, and no shorter one exists.
  ASSERT_TRUE(c->Delete(p.Mamba()).ok());
  m = c->LookupResume(p.keys, p.Query());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kv_blocks, kBlocks);
  EXPECT_EQ(m->resume_blocks, 0u);
  EXPECT_TRUE(m->resumable.empty());
}

TEST(DaemonStateTest, BadStateInputGetsClearErrorsAndStoresNothing) {
  Daemon d;
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  HybridPrompt p;
  // A state value with no block, and one whose block was never stored.
  std::vector<BlockWrite> bad = {Write(p.Mamba(), p.mamba, std::nullopt, BlockRole::kState)};
  EXPECT_EQ(c->PutAtomic(bad).code(), StatusCode::kInvalidArgument);
  bad[0].parent = p.keys.back();
  EXPECT_EQ(c->PutAtomic(bad).code(), StatusCode::kFailedPrecondition);
  // A half-bad atomic put: a value over max_block_bytes (checked by the client: the request
  // cannot be sent) and an empty one (checked by kvtierd).
  std::vector<std::byte> huge(5 * kMiB), empty;
  std::vector<BlockWrite> half = {Write(p.keys[0], p.kv[0], std::nullopt, BlockRole::kKv),
                                  Write(p.keys[1], empty, p.keys[0], BlockRole::kKv)};
  EXPECT_EQ(c->PutAtomic(half).code(), StatusCode::kInvalidArgument);
  half[1].value = huge;
  EXPECT_EQ(c->PutAtomic(half).code(), StatusCode::kInvalidArgument);
  const std::vector<BlockKey> probe = {p.keys[0], p.Mamba()};
  Result<std::vector<std::optional<TierLevel>>> there = c->Exists(probe);
  ASSERT_TRUE(there.ok());
  EXPECT_FALSE((*there)[0].has_value()) << "a failed atomic put stored a block";
  EXPECT_FALSE((*there)[1].has_value());

  // Raw frames: an unknown LOOKUP_RESUME flag and a group name with a space; the connection
  // carries on.
  int fd = ConnectTcp(d.native_port());
  SendAll(fd, HelloFrame(1));
  ASSERT_TRUE(ReadReply(fd).status.ok());
  protocol::ResumeRequest req{{1, {{"mamba", 1}}, false}, {p.keys[0]}};
  std::string body;
  protocol::EncodeResumeRequest(req, &body);
  std::string flagged = body;
  flagged[4] = '\x80';
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kLookupResume), 2, flagged));
  EXPECT_EQ(ReadReply(fd).status.code(), StatusCode::kInvalidArgument);
  req.query.groups[0].name = "mam ba";
  body.clear();
  protocol::EncodeResumeRequest(req, &body);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kLookupResume), 3, body));
  RawReply named = ReadReply(fd);
  EXPECT_EQ(named.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(named.status.message().find("state group name"), std::string::npos);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kPing), 4, ""));
  EXPECT_TRUE(ReadReply(fd).status.ok());
  close(fd);
}

TEST(DaemonStateTest, DeletingASessionTakesItsStateWithItsKv) {
  Daemon d;
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  HybridPrompt p;
  std::vector<BlockWrite> writes = {
      Write(p.keys[0], p.kv[0], std::nullopt, BlockRole::kKvNeedsState),
      Write(*StateKey(p.keys[0], "mamba"), p.mamba, p.keys[0], BlockRole::kState)};
  for (BlockWrite& w : writes) w.session = 77;
  ASSERT_TRUE(c->PutAtomic(writes).ok());
  Result<DeletionReport> report = c->DeleteSession(77);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->memory_blocks, 2u);
  const std::vector<BlockKey> both = {writes[0].key, writes[1].key};
  Result<std::vector<std::optional<TierLevel>>> there = c->Exists(both);
  ASSERT_TRUE(there.ok());
  EXPECT_FALSE((*there)[0] || (*there)[1]);
}

TEST(DaemonStateTest, APromptLongerThanMaxBatchIsLookedUpInOneRequest) {
  Daemon d;
  auto c = Connect(d.unix_endpoint());
  ASSERT_NE(c, nullptr);
  const uint32_t blocks = c->server_info().max_batch + 904;
  std::vector<BlockKey> keys;
  std::vector<BlockWrite> writes;
  const std::vector<std::byte> value = RandomValue(5, 512);
  for (uint32_t i = 0; i < blocks; ++i) {
    keys.push_back(TestKey(900, i));
    writes.push_back(Write(keys[i], value, i > 0 ? std::optional(keys[i - 1]) : std::nullopt,
                           BlockRole::kKvNeedsState));
  }
  for (const Status& s : c->PutMany(writes)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<BlockWrite> state = {
      Write(*StateKey(keys.back(), "mamba"), value, keys.back(), BlockRole::kState)};
  ASSERT_TRUE(c->PutAtomic(state).ok());
  Result<ResumeMatch> m = c->LookupResume(keys, {1, {{"mamba", 1}}, false});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->kv_blocks, blocks);
  EXPECT_EQ(m->resume_blocks, blocks);
}

TEST(DaemonStateTest, StateOutlivesAKill9ThroughG3) {
  Daemon d;
  HybridPrompt p;
  {
    auto c = Connect(d.unix_endpoint());
    ASSERT_NE(c, nullptr);
    p.Store(c.get());
    Result<uint64_t> flushed = c->Flush();
    ASSERT_TRUE(flushed.ok()) << flushed.status().ToString();
  }
  d.Kill();
  d.Start();
  auto c = Connect(d.unix_endpoint());
  ASSERT_NE(c, nullptr);
  Result<ResumeMatch> m = c->LookupResume(p.keys, p.Query());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->resume_blocks, kBlocks);
  for (TierLevel t : m->tiers) EXPECT_EQ(t, TierLevel::kG3);
  p.ExpectResumable(c.get(), kBlocks);
}

}  // namespace
}  // namespace kvtier::daemon_test
