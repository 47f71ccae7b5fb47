// The Store's eviction order as users of conversations and agents see it: depth lanes and the
// learnt chance of return (docs/store.md, "Eviction"), and session hints ("Session hints").

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvtier/store.h"
#include "src/engine/store_test_util.h"

namespace kvtier {
namespace {

using testing_util::Key;
using testing_util::Value;
using StoreTest = testing_util::StoreTest;

class ConversationStoreTest : public StoreTest {
 protected:
  // One turn: matches the chain so far and puts `new_blocks` more after it.
  void Turn(std::vector<uint64_t>* chain, int new_blocks) {
    std::vector<BlockKey> keys;
    for (uint64_t k : *chain) keys.push_back(Key(k));
    if (!keys.empty()) {
      ASSERT_TRUE(store_->LookupPrefix(tenant_, keys).ok());
    }
    for (int i = 0; i < new_blocks; ++i) {
      const std::optional<uint64_t> parent =
          chain->empty() ? std::nullopt : std::optional<uint64_t>(chain->back());
      chain->push_back(next_++);
      ASSERT_TRUE(Put(chain->back(), parent).ok());
    }
  }
  void Advance(uint64_t seconds) { env_.now_us += seconds * 1'000'000; }
  // Takes `blocks` of G2 out of play: pinned blocks are never evicted.
  void PinFiller(int blocks) {
    for (int i = 0; i < blocks; ++i) {
      ASSERT_TRUE(Put(100000 + i).ok());
      ASSERT_TRUE(store_->Pin(tenant_, Key(100000 + i)).ok());
    }
  }

  // 400 conversations, 30 s apart, `conversation(c, &chain)` playing the c-th; then every
  // block deleted, so that only what the Store learnt stays.
  template <typename Conversation>
  void Learn(Conversation conversation) {
    std::vector<uint64_t> all;
    for (int c = 0; c < 400; ++c) {
      std::vector<uint64_t> chain;
      conversation(c, &chain);
      Advance(30);
      all.insert(all.end(), chain.begin(), chain.end());
    }
    for (uint64_t k : all) (void)store_->Delete(tenant_, Key(k));
  }

  // Traffic where a conversation that has come back once always comes back (after 20 s, up to
  // eight turns), and half of the new ones never do.
  void LearnFromConversations() {
    Learn([this](int c, std::vector<uint64_t>* chain) {
      Turn(chain, 1);
      for (int turn = 1; c % 2 == 1 && turn < 8; ++turn) {
        Advance(20);
        Turn(chain, 1);
      }
    });
  }

  // A conversation on its third turn, last used 15 s ago, then a new prompt of `new_blocks`
  // blocks, used 8 s ago; then two puts, one eviction when G2 holds both prompts and one block
  // more.
  void DeepAgainstNew(int new_blocks, std::vector<uint64_t>* deep, std::vector<uint64_t>* fresh) {
    for (int turn = 0; turn < 3; ++turn) {
      if (turn > 0) Advance(20);
      Turn(deep, 1);
    }
    Advance(7);
    Turn(fresh, new_blocks);
    Advance(8);
    ASSERT_TRUE(Put(9000).ok());
    ASSERT_TRUE(Put(9001).ok());
  }

  uint64_t next_ = 1;
};

TEST_F(ConversationStoreTest, AConversationThatCameBackOutlivesANewOneWhenThatIsLikelier) {
  Open(16);
  LearnFromConversations();
  PinFiller(10);
  // A conversation on its third turn and a new two-block prompt fill G2 but for one block.
  std::vector<uint64_t> deep, fresh;
  DeepAgainstNew(2, &deep, &fresh);
  // LRU would take the deep conversation's tail. Such conversations always came back, new
  // ones half the time: the new prompt's tail goes instead.
  EXPECT_FALSE(Has(fresh.back()));
  for (uint64_t k : deep) EXPECT_TRUE(Has(k)) << k;
}

TEST_F(ConversationStoreTest, WithoutEvidenceEvictionIsLeastRecentlyUsed) {
  Open(16);
  PinFiller(10);
  std::vector<uint64_t> deep, fresh;
  DeepAgainstNew(2, &deep, &fresh);
  EXPECT_FALSE(Has(deep.back()));
  EXPECT_TRUE(Has(fresh.back()));
}

TEST_F(ConversationStoreTest, APromptPutInOneRequestIsOneTurnHoweverLong) {
  Open(16);
  LearnFromConversations();
  PinFiller(8);
  // Four blocks put by one request are no deeper than one: against a conversation on its
  // third turn it still goes first.
  std::vector<uint64_t> deep, long_prompt;
  DeepAgainstNew(4, &deep, &long_prompt);
  EXPECT_FALSE(Has(long_prompt.back()));
  for (uint64_t k : deep) EXPECT_TRUE(Has(k)) << k;
}

TEST_F(ConversationStoreTest, ALongPromptsTailGoesBeforeAShortPromptWhenLongOnesRarelyCameBack) {
  Open(48);
  // New conversations of one block always came back after 20 s; those whose first prompt put
  // twenty blocks (a document pasted in) never did.
  Learn([this](int c, std::vector<uint64_t>* chain) {
    Turn(chain, c % 2 == 0 ? 1 : 20);
    if (c % 2 == 0) {
      Advance(20);
      Turn(chain, 1);
    }
  });
  PinFiller(26);
  std::vector<uint64_t> short_prompt, long_prompt;
  Turn(&short_prompt, 1);
  Advance(7);
  Turn(&long_prompt, 20);
  Advance(8);
  ASSERT_TRUE(Put(9000).ok());
  // G2 is full. LRU would take the short prompt, the older, first. The long prompt's blocks
  // from its sixteenth on go instead, tail first; its first fifteen are classed as a short
  // prompt's.
  for (uint64_t k = 9001; k <= 9005; ++k) ASSERT_TRUE(Put(k).ok());
  EXPECT_TRUE(Has(short_prompt[0]));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Has(long_prompt[i]), i < 15) << i;
}

TEST_F(ConversationStoreTest, AConversationThatComesBackOnlyAfterG2WouldDropItGoesFirst) {
  Open(16);
  // Conversations that came back always did, but after ten minutes; a new prompt came back
  // after 20 s one time in two.
  Learn([this](int c, std::vector<uint64_t>* chain) {
    Turn(chain, 1);
    for (int turn = 1; turn < (c % 2 == 0 ? 8 : c % 4 == 1 ? 2 : 1); ++turn) {
      Advance(c % 2 == 0 ? 600 : 20);
      Turn(chain, 1);
    }
  });
  PinFiller(11);
  // A conversation on its third turn (ten minutes apart), and a new prompt 7 s older than
  // that turn; then G2 is full and a put evicts one block.
  std::vector<uint64_t> deep, fresh;
  Turn(&deep, 1);
  Advance(600);
  Turn(&deep, 1);
  Advance(593);
  Turn(&fresh, 1);
  Advance(7);
  Turn(&deep, 1);
  Advance(8);
  ASSERT_TRUE(Put(9000).ok());
  ASSERT_TRUE(Put(9001).ok());
  // LRU takes the new prompt, the older, and so does the chance of a return ever (the deep
  // conversation's is higher). But G2 keeps a block about 15 s now, and one it spares about as
  // long again: the new prompt may come back within those 30 s, the conversation will not. Its
  // latest turn goes.
  EXPECT_TRUE(Has(fresh[0]));
  EXPECT_FALSE(Has(deep.back()));
}

TEST_F(ConversationStoreTest, OfTenantsWithoutBudgetsAndAsOldTheOneHoldingMoreGivesUpABlock) {
  Open(15, {TenantOptions{"a"}, TenantOptions{"b"}});
  const TenantId b = *store_->FindTenant("b");
  PinFiller(10);
  // Within one second (ages are whole seconds): tenant a puts four blocks, then b one.
  for (uint64_t k = 1; k <= 4; ++k) ASSERT_TRUE(Put(k).ok());
  ASSERT_TRUE(Put(100, std::nullopt, b).ok());
  ASSERT_TRUE(Put(5).ok());  // G2 is full: a, the larger, gives up its least recent block.
  EXPECT_TRUE(Has(100, b));
  EXPECT_FALSE(Has(1));
}

class SessionHintTest : public ConversationStoreTest {
 protected:
  // A prompt of `blocks` blocks put with `session`; returns its keys, head first.
  std::vector<uint64_t> Prompt(SessionId session, int blocks) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < blocks; ++i) {
      PutOptions po;
      po.session = session;
      if (!keys.empty()) po.parent = Key(keys.back());
      keys.push_back(next_++);
      EXPECT_TRUE(store_->Put(tenant_, Key(keys.back()), Value(keys.back()), po).ok());
    }
    return keys;
  }
  // The session comes back: a prefix lookup matches `chain` whole, then it puts `key` after it.
  void ComeBack(SessionId session, const std::vector<uint64_t>& chain, uint64_t key) {
    std::vector<BlockKey> keys;
    for (uint64_t k : chain) keys.push_back(Key(k));
    ASSERT_EQ(store_->LookupPrefix(tenant_, keys)->num_blocks, keys.size());
    PutOptions po;
    po.session = session;
    po.parent = keys.back();
    ASSERT_TRUE(store_->Put(tenant_, Key(key), Value(key), po).ok());
  }
  Store::SessionHint Retain(uint32_t seconds) {
    Store::SessionHint h;
    h.retain_seconds = seconds;
    return h;
  }
  Store::SessionHint Finished() {
    Store::SessionHint h;
    h.finished = true;
    return h;
  }
  Store::SessionHint Priority(Store::SessionPriority p) {
    Store::SessionHint h;
    h.priority = p;
    return h;
  }
};

TEST_F(SessionHintTest, ARetainedSessionIsEvictedAfterEveryOtherBlock) {
  Open(16);
  PinFiller(10);
  // An agent waiting on a tool call put its context first; another session put after it.
  const std::vector<uint64_t> waiting = Prompt(1, 3);
  Advance(5);
  const std::vector<uint64_t> other = Prompt(2, 3);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(60)).ok());
  Advance(5);
  ASSERT_TRUE(Put(9000).ok());
  ASSERT_TRUE(Put(9001).ok());
  // LRU would take the waiting session's tail; the hint sends the other session's instead.
  for (uint64_t k : waiting) EXPECT_TRUE(Has(k)) << k;
  EXPECT_FALSE(Has(other.back()));
}

TEST_F(SessionHintTest, WhileEvictionFollowsLruARetainedSessionStillGoesLast) {
  Open(40);
  // A session hinted to come back within the hour, which never does: it holds a quarter of G2.
  const std::vector<uint64_t> waiting = Prompt(1, 10);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(3600)).ok());
  // A loop over 35 one-block prompts: it fits in an LRU of G2's size, not in the 30 blocks the
  // retention leaves, so LRU serves more and eviction follows it for a trial.
  for (int round = 0; round < 20; ++round) {
    for (uint64_t k = 5000; k < 5035; ++k) {
      const BlockKey key = Key(k);
      Result<PrefixMatch> m = store_->LookupPrefix(tenant_, std::span(&key, 1));
      ASSERT_TRUE(m.ok());
      if (m->num_blocks == 0) {
        ASSERT_TRUE(Put(k).ok());
      }
      Advance(1);
    }
  }
  uint64_t trials = 0;
  for (const TenantStats& t : store_->Stats().tenants) trials += t.lru_trials;
  EXPECT_GE(trials, 1u);
  for (uint64_t k : waiting) EXPECT_TRUE(Has(k)) << k;
}

TEST_F(SessionHintTest, TenantsWithoutBudgetsAreCheckedAgainstOneLruOfAllTheirBlocks) {
  Open(40, {TenantOptions{"a"}, TenantOptions{"b"}, TenantOptions{"c"}});
  const TenantId b = *store_->FindTenant("b"), c = *store_->FindTenant("c");
  // Tenant a's session, hinted to come back within the hour, holds a quarter of G2.
  const std::vector<uint64_t> waiting = Prompt(1, 10);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(3600)).ok());
  // Tenants b and c loop over 35 one-block prompts between them. One LRU of G2's size over all
  // three tenants' blocks serves the whole loop; G2 serves none of it. Neither b nor c alone
  // is behind an LRU of its own blocks: each holds fewer than its half of the loop.
  for (int round = 0; round < 20; ++round) {
    for (uint64_t k = 5000; k < 5035; ++k) {
      const TenantId t = k % 2 == 0 ? b : c;
      const BlockKey key = Key(k);
      Result<PrefixMatch> m = store_->LookupPrefix(t, std::span(&key, 1));
      ASSERT_TRUE(m.ok());
      if (m->num_blocks == 0) {
        ASSERT_TRUE(Put(k, std::nullopt, t).ok());
      }
      Advance(1);
    }
  }
  uint64_t trials = 0;
  for (const TenantStats& t : store_->Stats().tenants) trials += t.lru_trials;
  EXPECT_GE(trials, 1u);
  for (uint64_t k : waiting) EXPECT_TRUE(Has(k)) << k;
}

TEST_F(SessionHintTest, AnOverdueSessionIsKeptUntilItsRetentionEndsAsLongAgainAfterItsTime) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> waiting = Prompt(1, 3);
  Advance(5);
  const std::vector<uint64_t> other = Prompt(2, 3);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(30)).ok());
  // 31 s on, the tool call has overrun its 30 s: still protected, due back any moment.
  Advance(31);
  ASSERT_TRUE(Put(9000).ok());
  for (uint64_t k : waiting) EXPECT_TRUE(Has(k)) << k;
  EXPECT_FALSE(Has(other.back()));
  // 61 s on, the retention has ended: the session has not come back in twice its time, and
  // its blocks go first, tail first, before older ones of no hint.
  Advance(30);
  ASSERT_TRUE(Put(9001).ok());
  EXPECT_FALSE(Has(waiting.back()));
  EXPECT_TRUE(Has(waiting.front()));
  EXPECT_TRUE(Has(other.front()));
  EXPECT_TRUE(Has(9000));
}

TEST_F(SessionHintTest, OfRetainedSessionsTheOneDueBackLastGivesWayFirstWhereverItsBlocksAre) {
  Open(100);
  PinFiller(10);
  // Three agents in tool calls fill G2, each with 30 one-block prompts. The one due back last
  // (a 300 s tool) was read first, so its blocks are the least recent, and the others' are
  // more than a scan of 64 would pass over.
  std::vector<std::vector<uint64_t>> sessions(3);
  for (SessionId s = 1; s <= 3; ++s) {
    for (int i = 0; i < 30; ++i) sessions[s - 1].push_back(Prompt(s, 1)[0]);
  }
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(300)).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Retain(20)).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 3, Retain(60)).ok());
  for (const std::vector<uint64_t>& keys : sessions) {
    for (uint64_t k : keys) {
      const BlockKey key = Key(k);
      ASSERT_EQ(store_->LookupPrefix(tenant_, std::span(&key, 1))->num_blocks, 1u);
    }
  }
  Advance(1);
  ASSERT_TRUE(Put(9000).ok());
  // The eviction takes the 300 s session's block read first.
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(Has(sessions[0][i]), i > 0) << i;
    EXPECT_TRUE(Has(sessions[1][i])) << i;
    EXPECT_TRUE(Has(sessions[2][i])) << i;
  }
}

TEST_F(SessionHintTest, AnOverdueSessionGoesAfterOneDueBackLater) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> overdue = Prompt(1, 3);
  const std::vector<uint64_t> later = Prompt(2, 3);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(10)).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Retain(300)).ok());
  Advance(15);  // Session 1's tool call has overrun: it is due back any moment.
  ASSERT_TRUE(Put(9000).ok());
  for (uint64_t k : overdue) EXPECT_TRUE(Has(k)) << k;
  EXPECT_FALSE(Has(later.back()));
}

TEST_F(SessionHintTest, ASessionThatCameBackIsNotItsOwnVictimWhileItPuts) {
  Open(16);
  PinFiller(10);
  // Session 1 (a 300 s tool call) holds a chain and a stale block; session 2 (60 s) a chain.
  const std::vector<uint64_t> back = Prompt(1, 2);
  const std::vector<uint64_t> stale = Prompt(1, 1);
  const std::vector<uint64_t> other = Prompt(2, 2);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(300)).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Retain(60)).ok());
  Advance(5);  // G2 has room for one more block.
  // Session 1 comes back early and extends its chain by two blocks: the first fits, and from
  // then on session 1 is being served, no longer due back last; session 2 gives way.
  PutOptions po;
  po.session = 1;
  po.parent = Key(back.back());
  ASSERT_TRUE(store_->Put(tenant_, Key(9000), Value(9000), po).ok());
  po.parent = Key(9000);
  ASSERT_TRUE(store_->Put(tenant_, Key(9001), Value(9001), po).ok());
  EXPECT_TRUE(Has(stale[0]));
  EXPECT_FALSE(Has(other.back()));
}

TEST_F(SessionHintTest, ASessionThatCameBackKeepsWhatItsReturnUsedAndGivesUpTheRest) {
  Open(16);
  PinFiller(10);
  // Session 1 holds a chain and a stale block, and waits on a tool call.
  const std::vector<uint64_t> back = Prompt(1, 2);
  const std::vector<uint64_t> stale = Prompt(1, 1);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(300)).ok());
  // Session 2 comes back to its prompt and extends it: its new block is on its second turn.
  Advance(3);
  const std::vector<uint64_t> first = Prompt(2, 1);
  Advance(1);
  ASSERT_NO_FATAL_FAILURE(ComeBack(2, first, 8000));
  // Session 1 comes back: it matches its chain and extends it, on its second turn too.
  Advance(6);
  ASSERT_NO_FATAL_FAILURE(ComeBack(1, back, 9000));
  // Its retention ends a second later. The blocks its return used keep their recency: the
  // stale block goes first, then LRU's choice, session 2's older tip.
  Advance(2);
  ASSERT_TRUE(Put(9001).ok());
  ASSERT_TRUE(Put(9002).ok());
  EXPECT_FALSE(Has(stale[0]));
  EXPECT_FALSE(Has(8000));
  for (uint64_t k : back) EXPECT_TRUE(Has(k)) << k;
  EXPECT_TRUE(Has(9000));
}

TEST_F(SessionHintTest, ASessionThatCameBackAndWasLoweredFromHighPriorityGoesFirst) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> back = Prompt(1, 2);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(300)).ok());
  // Session 2 comes back to its prompt and extends it (its second turn, as session 1's below).
  Advance(3);
  const std::vector<uint64_t> first = Prompt(2, 1);
  Advance(1);
  ASSERT_NO_FATAL_FAILURE(ComeBack(2, first, 8000));
  // Session 1 comes back and is raised to high priority; later it is normal again.
  Advance(2);
  ASSERT_NO_FATAL_FAILURE(ComeBack(1, back, 9000));
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Priority(Store::SessionPriority::kHigh)).ok());
  Advance(2);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Priority(Store::SessionPriority::kNormal)).ok());
  // Its blocks went to the cold end of their lane, ahead of session 2's older tip: tail first.
  // (G2 has room for one more block.)
  for (uint64_t k = 9001; k <= 9003; ++k) ASSERT_TRUE(Put(k).ok());
  EXPECT_FALSE(Has(9000));
  EXPECT_FALSE(Has(back[1]));
  EXPECT_TRUE(Has(back[0]));
  EXPECT_TRUE(Has(8000));
}

TEST_F(SessionHintTest, RetainedBlocksStillGiveWaySoThatPutsNeverFail) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> waiting = Prompt(1, 6);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(3600)).ok());
  // G2 holds nothing but the retained session: puts still find room, tail first.
  for (uint64_t k = 9000; k < 9003; ++k) ASSERT_TRUE(Put(k).ok());
  EXPECT_TRUE(Has(waiting.front()));
  EXPECT_FALSE(Has(waiting.back()));
}

TEST_F(SessionHintTest, AFinishedSessionIsEvictedFirst) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> older = Prompt(1, 3);
  Advance(5);
  const std::vector<uint64_t> done = Prompt(2, 3);
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Finished()).ok());
  ASSERT_TRUE(Put(9000).ok());
  ASSERT_TRUE(Put(9001).ok());
  ASSERT_TRUE(Put(9002).ok());
  // Three evictions: all of the finished session, tail first; none of the older one.
  for (uint64_t k : older) EXPECT_TRUE(Has(k)) << k;
  for (uint64_t k : done) EXPECT_FALSE(Has(k)) << k;
}

TEST_F(SessionHintTest, ALowPrioritySessionGoesFirstAndSoDoesWhatItPutsLater) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> older = Prompt(1, 3);
  Advance(5);
  std::vector<uint64_t> low = Prompt(2, 2);
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Priority(Store::SessionPriority::kLow)).ok());
  Advance(5);
  low.push_back(Prompt(2, 1)[0]);  // Put after the hint: it holds for this block too.
  // A low-priority block still serves hits, and a hit does not lift it.
  EXPECT_TRUE(store_->Get(tenant_, Key(low[2])).ok());
  for (uint64_t k = 9000; k < 9003; ++k) ASSERT_TRUE(Put(k).ok());
  for (uint64_t k : older) EXPECT_TRUE(Has(k)) << k;
  for (uint64_t k : low) EXPECT_FALSE(Has(k)) << k;
}

// A block that comes back into the queues another way than a put or a read (an unpin here)
// takes a low-priority session's place too, not the back of the queue.
TEST_F(SessionHintTest, ALowPrioritySessionsBlockUnpinnedGoesFirstToo) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> older = Prompt(1, 5);  // G2 full with the next block.
  Advance(5);
  const std::vector<uint64_t> low = Prompt(2, 1);
  ASSERT_TRUE(store_->Pin(tenant_, Key(low[0])).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Priority(Store::SessionPriority::kLow)).ok());
  Advance(5);
  ASSERT_TRUE(store_->Unpin(tenant_, Key(low[0])).ok());  // The newest to enter a queue.
  ASSERT_TRUE(Put(9000).ok());
  EXPECT_FALSE(Has(low[0]));
  for (uint64_t k : older) EXPECT_TRUE(Has(k)) << k;
}

TEST_F(SessionHintTest, AHighPrioritySessionIsKeptOverOthersAndGivesWayBeforeARetainedOne) {
  Open(16);
  PinFiller(10);
  const std::vector<uint64_t> retained = Prompt(1, 3);
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(60)).ok());
  Advance(5);
  const std::vector<uint64_t> high = Prompt(2, 3);
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Priority(Store::SessionPriority::kHigh)).ok());
  Advance(5);
  // Only hinted blocks are resident: the high one, due back at no known time, gives way first.
  ASSERT_TRUE(Put(9000).ok());
  EXPECT_FALSE(Has(high.back()));
  for (uint64_t k : retained) EXPECT_TRUE(Has(k)) << k;
  // A block with no hint goes before either, however recent.
  Advance(5);
  ASSERT_TRUE(Put(9001).ok());
  EXPECT_FALSE(Has(9000));
  // Back to normal: the session's blocks are ordered by recency again (9001 is newer).
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Priority(Store::SessionPriority::kNormal)).ok());
  ASSERT_TRUE(Put(9002).ok());
  EXPECT_FALSE(Has(high[1]));
  EXPECT_TRUE(Has(high[0]));
  EXPECT_TRUE(Has(9001));
}

TEST_F(SessionHintTest, TenantsWithoutBudgetsShareG2AsOneCacheHintsIncluded) {
  Open(16, {TenantOptions{"a"}, TenantOptions{"b"}});
  const TenantId b = *store_->FindTenant("b");
  PinFiller(8);
  auto prompt = [&](TenantId t, SessionId session, uint64_t first, int blocks) {
    for (int i = 0; i < blocks; ++i) {
      PutOptions po;
      po.session = session;
      if (i > 0) po.parent = Key(first + i - 1);
      ASSERT_TRUE(store_->Put(t, Key(first + i), Value(first + i), po).ok());
    }
  };
  // Tenant a: an agent in a 300 s tool call, then one finished. Tenant b, later: an agent in a
  // 20 s tool call and a block of no session.
  prompt(tenant_, 1, 100, 2);
  prompt(tenant_, 2, 200, 2);
  Advance(5);
  prompt(b, 1, 300, 2);
  ASSERT_TRUE(Put(400, std::nullopt, b).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(300)).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 2, Finished()).ok());
  ASSERT_TRUE(store_->HintSession(b, 1, Retain(20)).ok());
  Advance(5);
  // Tenant b's session comes back with five more blocks (one fits). Tenant a's finished session
  // goes first, though b's blocks are more recent; then b's block of no hint, though tenant a's
  // retained blocks are older; then a's 300 s session, due back after b's, though older.
  prompt(b, 1, 300, 7);
  EXPECT_FALSE(Has(200));
  EXPECT_FALSE(Has(201));
  EXPECT_FALSE(Has(400, b));
  EXPECT_FALSE(Has(101));
  EXPECT_TRUE(Has(100));
  EXPECT_TRUE(Has(300, b));
  EXPECT_TRUE(Has(301, b));
}

TEST_F(SessionHintTest, AcrossTenantsTheBlockOfTheSessionDueBackLastGoesFirst) {
  Open(16, {TenantOptions{"a"}, TenantOptions{"b"}});
  const TenantId b = *store_->FindTenant("b");
  PinFiller(10);
  auto put = [&](TenantId t, SessionId session, uint64_t k, std::optional<uint64_t> parent) {
    PutOptions po;
    po.session = session;
    if (parent) po.parent = Key(*parent);
    ASSERT_TRUE(store_->Put(t, Key(k), Value(k), po).ok());
  };
  // Tenant a: session 3 (due back in 600 s) put a shared prefix, which session 1 (in 100 s)
  // extends, so session 3 has no block to give. Tenant b: session 1, due back in 300 s.
  put(tenant_, 3, 100, std::nullopt);
  put(tenant_, 1, 101, 100);
  put(tenant_, 1, 102, 101);
  put(b, 1, 200, std::nullopt);
  put(b, 1, 201, 200);
  put(b, 1, 202, 201);
  ASSERT_TRUE(store_->HintSession(tenant_, 3, Retain(600)).ok());
  ASSERT_TRUE(store_->HintSession(tenant_, 1, Retain(100)).ok());
  ASSERT_TRUE(store_->HintSession(b, 1, Retain(300)).ok());
  // Only protected blocks are left: tenant b's session is due back after a's session 1.
  ASSERT_TRUE(Put(9000).ok());
  EXPECT_FALSE(Has(202, b));
  EXPECT_TRUE(Has(102));
}

TEST_F(SessionHintTest, BadHintsAreRefusedWithAReason) {
  Open(16, {TenantOptions{"a"}, TenantOptions{"b"}});
  Prompt(1, 2);
  Store::SessionHint both = Retain(10);
  both.finished = true;
  EXPECT_EQ(store_->HintSession(tenant_, 0, Retain(10)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->HintSession(tenant_, 1, Store::SessionHint{}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->HintSession(tenant_, 1, both).code(), StatusCode::kInvalidArgument);
  Store::SessionHint finished_high = Finished();
  finished_high.priority = Store::SessionPriority::kHigh;
  EXPECT_EQ(store_->HintSession(tenant_, 1, finished_high).code(), StatusCode::kInvalidArgument);
  // A retention of a year is no tool call: the limit is memory.max_hint_retain_seconds.
  const Status year = store_->HintSession(tenant_, 1, Retain(365 * 86400));
  EXPECT_EQ(year.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(year.message().find("max_hint_retain_seconds"), std::string::npos);
  EXPECT_EQ(store_->HintSession(tenant_, 7, Retain(10)).code(), StatusCode::kNotFound);
  // Another tenant's session of the same id is not this tenant's to hint.
  const TenantId b = *store_->FindTenant("b");
  EXPECT_EQ(store_->HintSession(b, 1, Finished()).code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->HintSession(tenant_, 1, Retain(10)).ok());
}

}  // namespace
}  // namespace kvtier
