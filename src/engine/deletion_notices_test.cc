// Deletion notices: their encoding, and a follower reading them from a real SharedFsTier as
// the other nodes publish them.

#include "src/engine/deletion_notices.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "src/tier/sharedfs/shared_fs_test_util.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace kvtier {
namespace {

using testing_g4::ScratchDir;
using testing_g4::TestKey;

constexpr uint64_t kSecond = 1'000'000;
constexpr uint64_t kT0 = 1'700'000'000 * kSecond;

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

DeletionNotice SessionNotice(const std::string& node, uint64_t time_us, SessionId session) {
  DeletionNotice n;
  n.scope = DeletionNotice::Scope::kSession;
  n.tenant = "acme";
  n.session = session;
  n.node = node;
  n.time_us = time_us;
  return n;
}

TEST(DeletionNoticesTest, EveryScopeRoundTripsAndGarbageIsRejected) {
  DeletionNotice keys;
  keys.scope = DeletionNotice::Scope::kKeys;
  keys.tenant = "t \"quoted\"";
  keys.keys = {TestKey(1), TestKey(2)};
  keys.node = "node-a";
  keys.time_us = kT0;
  Result<DeletionNotice> back = DecodeNotice(Bytes(EncodeNotice(keys)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->scope, DeletionNotice::Scope::kKeys);
  EXPECT_EQ(back->tenant, keys.tenant);
  EXPECT_EQ(back->keys, keys.keys);
  EXPECT_EQ(back->node, "node-a");
  EXPECT_EQ(back->time_us, kT0);
  back = DecodeNotice(Bytes(EncodeNotice(SessionNotice("b", kT0, 77))));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->scope, DeletionNotice::Scope::kSession);
  EXPECT_EQ(back->session, 77u);
  DeletionNotice tenant;
  tenant.scope = DeletionNotice::Scope::kTenant;
  tenant.tenant = "globex";
  back = DecodeNotice(Bytes(EncodeNotice(tenant)));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->scope, DeletionNotice::Scope::kTenant);
  for (const std::string& bad :
       {std::string(""), std::string("[]"), std::string("{\"v\":2}"),
        std::string(R"({"v":1,"scope":"everything","tenant":"t","node":"a","time_us":1})"),
        std::string(R"({"v":1,"scope":"session","tenant":"t","node":"a","time_us":1,"session":0})"),
        std::string(R"({"v":1,"scope":"keys","tenant":"t","node":"a","time_us":1,"keys":["zz"]})")}) {
    EXPECT_EQ(DecodeNotice(Bytes(bad)).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(NoticeName(kT0, "a", 3), "00001700000000000000-a-00000003");
}

// Node "r" follows the notices of "a" and "b": each is returned once, its own never, one of a
// node whose clock is behind (by less than the margin) still is, one beyond it is not.
TEST(NoticeFollowerTest, EachNoticeOnceOwnSkippedClockSkewWithinTheMargin) {
  ScratchDir dir;
  SharedFsTierOptions o;
  o.root = dir.path();
  o.node_id = "r";
  Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(o);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  SharedTier* g4 = tier->get();
  auto publish = [&](const std::string& node, uint64_t t, SessionId session) {
    ASSERT_TRUE(g4->PublishNotice(NoticeName(t, node, session),
                                  Bytes(EncodeNotice(SessionNotice(node, t, session))))
                    .ok());
  };
  NoticeFollower follower(g4, "r", 60 * kSecond);
  uint64_t skipped = 0;
  auto poll = [&] {
    std::vector<SessionId> sessions;
    Result<std::vector<DeletionNotice>> got = follower.Poll(&skipped);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (got.ok()) {
      for (const DeletionNotice& n : *got) sessions.push_back(n.session);
    }
    return sessions;
  };
  publish("a", kT0, 1);
  publish("r", kT0 + kSecond, 2);  // Its own: already applied where it was made.
  EXPECT_EQ(poll(), (std::vector<SessionId>{1}));
  EXPECT_TRUE(poll().empty());
  publish("a", kT0 + 120 * kSecond, 3);
  EXPECT_EQ(poll(), (std::vector<SessionId>{3}));
  publish("b", kT0 + 90 * kSecond, 4);   // b's clock 30 s behind: sorts before 3, still seen.
  publish("b", kT0 + 30 * kSecond, 5);   // 90 s behind: beyond the margin.
  EXPECT_EQ(poll(), (std::vector<SessionId>{4}));
  ASSERT_TRUE(g4->PublishNotice(NoticeName(kT0 + 121 * kSecond, "a", 6), Bytes("not json")).ok());
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(skipped, 1u);
  EXPECT_TRUE(poll().empty());
}

TEST(NoticeReadStateTest, RoundTripsAndADamagedOrMissingFileIsSaid) {
  ScratchDir dir;
  Env* env = Env::Default();
  EXPECT_EQ(LoadNoticeReadState(env, dir.path()).status().code(), StatusCode::kNotFound);
  NoticeReadState state;
  state.last_read_us = kT0 + 17;
  state.resume_us = kT0 - 5 * kSecond;
  ASSERT_TRUE(SaveNoticeReadState(env, dir.path(), state).ok());
  Result<NoticeReadState> back = LoadNoticeReadState(env, dir.path());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->last_read_us, state.last_read_us);
  EXPECT_EQ(back->resume_us, state.resume_us);
  // A saved state replaces the last one whole.
  state.last_read_us += kSecond;
  ASSERT_TRUE(SaveNoticeReadState(env, dir.path(), state).ok());
  EXPECT_EQ(LoadNoticeReadState(env, dir.path())->last_read_us, state.last_read_us);

  // Any changed digit, and a truncated file, are DataLoss, never a different time.
  const std::string path = dir.path() + "/notice-state";
  std::string text;
  {
    std::ifstream in(path);
    std::getline(in, text);
  }
  text += "\n";
  for (size_t i = 0; i < text.size(); ++i) {
    for (const std::string& damaged : {text.substr(0, i) + (text[i] == '1' ? '2' : '1') +
                                           text.substr(i + 1),
                                       text.substr(0, i)}) {
      std::ofstream(path, std::ios::trunc) << damaged;
      EXPECT_EQ(LoadNoticeReadState(env, dir.path()).status().code(), StatusCode::kDataLoss)
          << "at " << i << ": " << damaged;
    }
  }
}

}  // namespace
}  // namespace kvtier
