// Deletion notices: how a deletion on one node reaches the G2 and G3 copies of every other
// node (docs/shared_tier.md, "Deletion notices").
//
// The node that deletes (by keys, session or tenant) removes its own copies and G4's, then
// publishes a notice to G4. Every node reads the notices published since its last look and
// deletes what they name from its own G2 and G3. Notices are named
// "<publication time in microseconds, 20 digits>-<node>-<sequence>", so that names sort by
// time; a reader re-reads a margin of time before the newest notice it applied, so a notice
// published by a node whose clock is behind (by less than the margin) is still seen.
// Applying a notice is idempotent.

#ifndef KVTIER_SRC_ENGINE_DELETION_NOTICES_H_
#define KVTIER_SRC_ENGINE_DELETION_NOTICES_H_

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "src/tier/shared/shared_tier.h"

namespace kvtier {

struct DeletionNotice {
  enum class Scope { kKeys, kSession, kTenant };
  Scope scope = Scope::kKeys;
  std::string tenant;          // By name: tenant ids are local to a node.
  SessionId session = 0;       // kSession.
  std::vector<BlockKey> keys;  // kKeys.
  bool shred = false;          // kTenant: the tenant's keys were destroyed too.
  std::string node;            // The node that deleted.
  uint64_t time_us = 0;        // When, on that node's clock.
};

// The notice as JSON, and back (InvalidArgument for anything else).
std::string EncodeNotice(const DeletionNotice& notice);
Result<DeletionNotice> DecodeNotice(std::span<const std::byte> body);

// "<time_us, 20 digits>-<node>-<sequence, 8 digits>".
std::string NoticeName(uint64_t time_us, std::string_view node, uint64_t sequence);

// Reads the notices other nodes publish, each once.
class NoticeFollower {
 public:
  // `node`: this node's id (its own notices are skipped); `margin_us`: how far back before
  // the newest notice applied each look starts; `resume_us`: the newest notice time applied
  // before (a restart resumes there, less the margin; 0 reads every notice in G4).
  NoticeFollower(SharedTier* shared, std::string node, uint64_t margin_us,
                 uint64_t resume_us = 0);

  // The notices of other nodes not returned before, oldest first. A notice whose body does
  // not decode is skipped (logged by the caller through *skipped).
  Result<std::vector<DeletionNotice>> Poll(uint64_t* skipped);

  // Publication time of the newest notice returned so far (or resume_us).
  uint64_t newest_us() const { return newest_us_; }

 private:
  SharedTier* const shared_;
  const std::string node_;
  const uint64_t margin_us_;
  uint64_t newest_us_;                          // Publication time of the newest name seen.
  std::set<std::string, std::less<>> seen_;     // Names seen within the margin.
};

// Where a node stands in reading the notices, kept beside its G3 (which outlives restarts,
// unlike its G2) so that a restart knows where to resume, and how long the node was away: a
// node that read no notice for longer than the janitor keeps them may have missed deletions.
struct NoticeReadState {
  uint64_t last_read_us = 0;  // This node's clock at its last successful read of the notices.
  uint64_t resume_us = 0;     // NoticeFollower's resume_us for the next start.
};

// The state file in `dir`: NotFound when there is none, DataLoss when it is damaged.
Result<NoticeReadState> LoadNoticeReadState(Env* env, const std::string& dir);
// Replaces it atomically (temp file, sync, rename, directory sync).
Status SaveNoticeReadState(Env* env, const std::string& dir, const NoticeReadState& state);

}  // namespace kvtier

#endif  // KVTIER_SRC_ENGINE_DELETION_NOTICES_H_
