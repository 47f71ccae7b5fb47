#include "tools/planning/fleet_replay.h"

#include <gtest/gtest.h>


#include "tools/planning/replay_test_util.h"
#include "tools/planning/trace_gen.h"

namespace kvtier::planning {
namespace {

PrefillModel Model(const char* link) {
  return *PrefillModel::Create(*FindModel("llama-3.1-8b"), *FindGpu("h100"), *FindLink(link), {});
}

FleetOptions Fleet(uint32_t nodes, Router router, bool g4) {
  FleetOptions o;
  o.nodes = nodes;
  o.router = router;
  o.node.model = *FindModel("llama-3.1-8b");
  o.node.g2_capacity_bytes = 64 * kMiB;
  o.node.reload_by_tier = {Model("pcie-gen5"), Model("nvme-gen5"), Model("400gbe")};
  o.node.g4 = g4;
  o.node.g4_write_policy = SharedTierOptions::WritePolicy::kOnPut;
  return o;
}

Trace Generated(Workload workload, uint64_t sessions, uint64_t seed, uint32_t block_tokens) {
  TraceGenOptions gen = DefaultsFor(workload);
  gen.sessions = sessions;
  gen.seed = seed;
  gen.block_tokens = block_tokens;
  Result<Trace> trace = GenerateTrace(gen);
  EXPECT_TRUE(trace.ok()) << trace.status().ToString();
  return trace.ok() ? *trace : Trace{};
}

uint64_t Hits(const FleetReport& r, HitSource source) {
  return r.hit_blocks[static_cast<int>(source)];
}

// Three requests with 4-token blocks, one second apart, round-robin over two nodes:
//   t=0s [1 2 3]    node 0: 3 misses, uploaded by node 0
//   t=1s [1 2 4]    node 1: 1, 2 from G4 (node 0 wrote them); 4 missed, uploaded by node 1
//   t=2s [1 2 5 6]  node 0: 1, 2 from its own G2; 5, 6 missed
const char* kTwoNodeTrace =
    "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
    "{\"timestamp\": 0, \"input_length\": 12, \"hash_ids\": [1, 2, 3]}\n"
    "{\"timestamp\": 1000, \"input_length\": 12, \"hash_ids\": [1, 2, 4]}\n"
    "{\"timestamp\": 2000, \"input_length\": 16, \"hash_ids\": [1, 2, 5, 6]}\n";

TEST(FleetReplayTest, WhatOneNodeStoredAnotherFindsInG4WorkedByHand) {
  const Trace trace = ParseOrDie(kTwoNodeTrace);
  Result<FleetReport> r = FleetReplay(trace, Fleet(2, Router::kRoundRobin, true));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->block_references, 10u);
  EXPECT_EQ(Hits(*r, HitSource::kOwnG2), 2u);
  EXPECT_EQ(Hits(*r, HitSource::kOwnG3), 0u);
  EXPECT_EQ(Hits(*r, HitSource::kG4Own), 0u);
  EXPECT_EQ(Hits(*r, HitSource::kG4Other), 2u);
  EXPECT_DOUBLE_EQ(r->block_hit_rate(), 0.4);
  EXPECT_DOUBLE_EQ(r->token_hit_rate(), 16.0 / 40);
  EXPECT_EQ(r->per_node[0].requests, 2u);
  EXPECT_EQ(r->per_node[1].requests, 1u);
  EXPECT_EQ(r->per_node[0].hit_blocks, 2u);
  EXPECT_EQ(r->per_node[1].hit_blocks, 2u);
  // Six distinct blocks uploaded once each; two read back. Per one-second window the writes
  // are 3, 1 and 2 blocks, the reads 0, 2 and 0.
  EXPECT_EQ(r->g4_bytes_written, 6 * kBlockBytes);
  EXPECT_EQ(r->g4_bytes_read, 2 * kBlockBytes);
  EXPECT_EQ(r->g4_write_bytes_per_second.max, 3.0 * kBlockBytes);
  EXPECT_EQ(r->g4_write_bytes_per_second.p50, 2.0 * kBlockBytes);
  EXPECT_EQ(r->g4_read_bytes_per_second.max, 2.0 * kBlockBytes);
  EXPECT_EQ(r->g4_read_bytes_per_second.p50, 0.0);
  ASSERT_EQ(r->g4_read_series.size(), 3u);
  EXPECT_EQ(r->g4_read_series[1], 2.0 * kBlockBytes);

  // Without G4 the second request finds nothing; with one cache for both nodes it finds 1, 2
  // in G2.
  Result<FleetReport> alone = FleetReplay(trace, Fleet(2, Router::kRoundRobin, false));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->total_hit_blocks(), 2u);
  FleetOptions one = Fleet(2, Router::kRoundRobin, false);
  one.one_cache = true;
  Result<FleetReport> shared = FleetReplay(trace, one);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(Hits(*shared, HitSource::kOwnG2), 4u);
  EXPECT_EQ(shared->label, "one cache (no G4)");
}

TEST(FleetReplayTest, OneNodeIsTheSingleNodeReplay) {
  // The same Store, G3 and G4 rules as kvtier replay: equal hits per tier and equal prefill time.
  const Trace trace = Generated(Workload::kChat, 60, 5, 16);
  FleetOptions o = Fleet(1, Router::kKvAware, true);
  o.node.g2_capacity_bytes = 40 * 16 * 131'072;  // 40 blocks.
  o.node.g3_capacity_bytes = 100 * 16 * 131'072;
  o.node.g4_write_policy = SharedTierOptions::WritePolicy::kOnDemotion;
  Result<FleetReport> fleet = FleetReplay(trace, o);
  Result<ReplayReport> single = Replay(trace, o.node);
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  ASSERT_GT(single->tiers[1].hit_blocks, 0u);
  ASSERT_GT(single->tiers[2].hit_blocks, 0u);
  EXPECT_EQ(Hits(*fleet, HitSource::kOwnG2), single->tiers[0].hit_blocks);
  EXPECT_EQ(Hits(*fleet, HitSource::kOwnG3), single->tiers[1].hit_blocks);
  EXPECT_EQ(Hits(*fleet, HitSource::kG4Own), single->tiers[2].hit_blocks);
  EXPECT_EQ(Hits(*fleet, HitSource::kG4Other), 0u);
  EXPECT_NEAR(fleet->prefill_seconds_with_cache, single->prefill_seconds_with_cache, 1e-6);
  EXPECT_NEAR(fleet->gpu_hours_saved(), single->gpu_hours_saved(), 1e-9);
}

TEST(FleetReplayTest, SessionRouterKeepsAConversationOnOneNode) {
  // Two conversations share block 0 (a system prompt); S ends inside it. A's turns stay on
  // node 0, B's on node 2; S starts a conversation of its own and B does not join it.
  const Trace trace = ParseOrDie(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 12, \"hash_ids\": [0, 1, 2]}\n"         // A1
      "{\"timestamp\": 1, \"input_length\": 4, \"hash_ids\": [0]}\n"                // S
      "{\"timestamp\": 2, \"input_length\": 12, \"hash_ids\": [0, 5, 6]}\n"         // B1
      "{\"timestamp\": 3, \"input_length\": 20, \"hash_ids\": [0, 1, 2, 3, 4]}\n"   // A2
      "{\"timestamp\": 4, \"input_length\": 16, \"hash_ids\": [0, 5, 6, 7]}\n"      // B2
      "{\"timestamp\": 5, \"input_length\": 24, \"hash_ids\": [0, 1, 2, 3, 4, 8]}\n");  // A3
  Result<FleetReport> r = FleetReplay(trace, Fleet(3, Router::kSession, false));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->per_node[0].requests, 3u);
  EXPECT_EQ(r->per_node[1].requests, 1u);
  EXPECT_EQ(r->per_node[2].requests, 2u);
  // Every turn after the first finds the previous turn's blocks on its node.
  EXPECT_EQ(r->per_node[0].hit_blocks, 3u + 5u);
  EXPECT_EQ(r->per_node[2].hit_blocks, 3u);
}

// A1 and B1 fill nodes 0 and 1; C1 goes to node 0 (B1 came later, so node 1's load has
// decayed less); A2 comes back while node 0 is the busier one.
const char* kReturnTrace =
    "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
    "{\"timestamp\": 0, \"input_length\": 16, \"hash_ids\": [1, 2, 3, 4]}\n"        // A1
    "{\"timestamp\": 1000, \"input_length\": 16, \"hash_ids\": [7, 8, 9, 10]}\n"    // B1
    "{\"timestamp\": 2000, \"input_length\": 16, \"hash_ids\": [11, 12, 13, 14]}\n"  // C1
    "{\"timestamp\": 3000, \"input_length\": 20, \"hash_ids\": [1, 2, 3, 4, 5]}\n";  // A2

TEST(FleetReplayTest, KvAwareRouterSendsAPrefixWhereItsBlockEventsSayItIs) {
  const Trace trace = ParseOrDie(kReturnTrace);
  FleetOptions o = Fleet(2, Router::kKvAware, false);
  o.load_cap = 10;
  Result<FleetReport> kv = FleetReplay(trace, o);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(Hits(*kv, HitSource::kOwnG2), 4u);  // A2 on node 0: 0.8 of its prompt held.
  EXPECT_EQ(kv->per_node[0].requests, 3u);
  // Round-robin sends A2 to node 1, which never saw it.
  Result<FleetReport> rr = FleetReplay(trace, Fleet(2, Router::kRoundRobin, false));
  ASSERT_TRUE(rr.ok());
  EXPECT_EQ(rr->total_hit_blocks(), 0u);
  // A load cap at the mean keeps A2 off node 0, which is above it: locality gives way.
  o.load_cap = 1;
  Result<FleetReport> capped = FleetReplay(trace, o);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->total_hit_blocks(), 0u);
  EXPECT_EQ(capped->per_node[1].requests, 2u);
}

// Node G2s of 4 blocks. A1 on node 0, B1 on node 1, C1 on node 0 (the less loaded by then),
// where it evicts A's blocks 1 and 2, so that both nodes hold only block 0 when A comes back.
const char* kEvictedEverywhereTrace =
    "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
    "{\"timestamp\": 0, \"input_length\": 12, \"hash_ids\": [0, 1, 2]}\n"         // A1
    "{\"timestamp\": 1000, \"input_length\": 12, \"hash_ids\": [0, 5, 6]}\n"      // B1
    "{\"timestamp\": 2000, \"input_length\": 16, \"hash_ids\": [0, 7, 8, 9]}\n"   // C1
    "{\"timestamp\": 3000, \"input_length\": 16, \"hash_ids\": [0, 1, 2, 3]}\n";  // A2

TEST(FleetReplayTest, KvAwareRouterSendsAConversationNoNodeHoldsBackToItsLastHolder) {
  const Trace trace = ParseOrDie(kEvictedEverywhereTrace);
  FleetOptions o = Fleet(2, Router::kKvAware, false);
  o.node.g2_capacity_bytes = 4 * 4 * 128 * kKiB;  // Four blocks of llama-3.1-8b's 128 KiB/token.
  o.load_cap = 10;
  Result<FleetReport> r = FleetReplay(trace, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // A2 finds only block 0, as it would on node 1, but goes to node 0, the busier one: its
  // events said last that it held block 2.
  EXPECT_EQ(r->per_node[0].requests, 3u);
  EXPECT_EQ(r->per_node[1].requests, 1u);
  // Block 0 for C1 and A2, and no more: A's blocks 1 and 2 had left node 0.
  EXPECT_EQ(Hits(*r, HitSource::kOwnG2), 2u);
  // Above the load cap, it is the least loaded node's, as any request.
  o.load_cap = 1;
  Result<FleetReport> capped = FleetReplay(trace, o);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->per_node[1].requests, 2u);
}

TEST(FleetReplayTest, RequestsQueueOnTheirNode) {
  // Two requests of distinct blocks at the same instant on one node: the second waits for the
  // first, so its TTFT is both prefills.
  const Trace trace = ParseOrDie(
      "{\"kvtier_trace\": 1, \"block_tokens\": 4}\n"
      "{\"timestamp\": 0, \"input_length\": 8000, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 0, \"input_length\": 4000, \"hash_ids\": [2]}\n");
  Result<FleetReport> r = FleetReplay(trace, Fleet(1, Router::kLeastLoaded, false));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const PrefillModel m = Model("pcie-gen5");
  const double first = m.RecomputeSeconds(8000);
  const double second = m.RecomputeSeconds(4000);
  EXPECT_NEAR(r->ttft_seconds.max, first + second, 1e-9);
  EXPECT_NEAR(r->ttft_seconds.mean, (first + first + second) / 2, 1e-9);
  EXPECT_NEAR(r->per_node[0].busy_seconds, first + second, 1e-9);
  // On two least-loaded nodes, neither waits.
  Result<FleetReport> two = FleetReplay(trace, Fleet(2, Router::kLeastLoaded, false));
  ASSERT_TRUE(two.ok());
  EXPECT_NEAR(two->ttft_seconds.max, first, 1e-9);
  EXPECT_NEAR(two->imbalance(), 2 * first / (first + second), 1e-9);
}

TEST(FleetReplayTest, NodesTheTraceCannotFillAreReportedIdle) {
  const Trace trace = ParseOrDie(kTwoNodeTrace);
  Result<FleetReport> r = FleetReplay(trace, Fleet(5, Router::kRoundRobin, true));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->idle_nodes, 2u);
  EXPECT_EQ(r->per_node.size(), 5u);
}

TEST(FleetReplayTest, ABoundedG4DropsObjects) {
  const Trace trace = ParseOrDie(kTwoNodeTrace);
  FleetOptions o = Fleet(2, Router::kRoundRobin, true);
  o.g4_capacity_bytes = 4 * kBlockBytes;
  Result<FleetReport> r = FleetReplay(trace, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->g4_bytes_written, 6 * kBlockBytes);
  EXPECT_EQ(r->g4_evictions, 2u);
}

TEST(FleetReplayTest, BadOptionsAreClearErrors) {
  const Trace trace = ParseOrDie(kTwoNodeTrace);
  FleetOptions o = Fleet(0, Router::kKvAware, true);
  EXPECT_EQ(FleetReplay(trace, o).status().code(), StatusCode::kInvalidArgument);
  o = Fleet(2, Router::kKvAware, false);
  o.g4_capacity_bytes = kGiB;
  EXPECT_EQ(FleetReplay(trace, o).status().code(), StatusCode::kInvalidArgument);
  o = Fleet(2, Router::kKvAware, true);
  o.g4_capacity_bytes = kBlockBytes - 1;
  EXPECT_EQ(FleetReplay(trace, o).status().code(), StatusCode::kInvalidArgument);
  o = Fleet(2, Router::kKvAware, true);
  o.node.reload_by_tier[0].reset();
  EXPECT_EQ(FleetReplay(trace, o).status().code(), StatusCode::kInvalidArgument);
  o = Fleet(2, Router::kKvAware, true);
  o.load_cap = 0.5;
  EXPECT_EQ(FleetReplay(trace, o).status().code(), StatusCode::kInvalidArgument);
  o = Fleet(2, Router::kKvAware, false);
  o.node.state_bytes = 1 * kMiB;  // A hybrid model.
  EXPECT_EQ(FleetReplay(trace, o).status().code(), StatusCode::kInvalidArgument);

  Result<Router> router = ParseRouter("kv_aware");
  ASSERT_FALSE(router.ok());
  EXPECT_NE(router.status().message().find("round-robin, least-loaded, session, kv-aware"),
            std::string_view::npos);
  for (Router r : kRouters) EXPECT_EQ(*ParseRouter(RouterName(r)), r);
}

TEST(FleetReplayTest, WithG4WrittenOnPutEveryRouterFindsWhatTheInfiniteCacheDoes) {
  const Trace trace = Generated(Workload::kChat, 60, 11, 64);
  FleetOptions o = Fleet(4, Router::kKvAware, false);
  o.node.g2_capacity_bytes = 200 * 64 * 131'072;  // 200 blocks.
  Result<FleetComparison> c = CompareFleet(trace, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->runs.size(), 10u);
  EXPECT_GT(c->infinite_block_hit_rate, 0.2);
  for (const FleetReport& r : c->runs) {
    SCOPED_TRACE(r.label);
    if (r.g4) {
      EXPECT_DOUBLE_EQ(r.block_hit_rate(), c->infinite_block_hit_rate);
    } else {
      EXPECT_LT(r.block_hit_rate(), c->infinite_block_hit_rate);
    }
  }
  EXPECT_EQ(c->runs[3].label, "kv-aware");
  EXPECT_EQ(c->runs[7].label, "kv-aware (no G4)");
  EXPECT_EQ(c->runs[8].label, "one cache");
  // Locality: the KV-aware router's own hits beat round-robin's.
  EXPECT_GT(c->runs[3].local_hit_rate(), c->runs[0].local_hit_rate());
}

}  // namespace
}  // namespace kvtier::planning
