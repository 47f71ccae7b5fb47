// SharedTier: the G4 tier, storage that every node of the cluster shares (a POSIX shared file
// system: SharedFsTier, or an S3 service: S3Tier). docs/shared_tier.md is the specification of
// the layout and the object format.
//
// Contract (the Store relies on it; both implementations keep it):
//   - Blocks are content-addressed and immutable: two nodes putting the same (tenant, key)
//     put the same bytes. A put publishes atomically (a reader on any node sees the whole
//     object or nothing); when the object already exists the put is a no-op and returns OK.
//   - Tenants are identified by NAME (tenant ids are local to a node). Names are mapped to
//     path/URL-safe components by the tier; another tenant's objects are never visible.
//   - Every read is verified (header checksum, payload checksum, then the data services'
//     AES-GCM tag when encrypted). A block that fails is never returned: it is counted
//     (Stats().corrupt) and reported as DataLoss, which callers treat as a miss. It is
//     removed when its stored bytes are wrong (structure, length, checksum); an intact object
//     whose tag fails is left alone (a node with a misconfigured keystore must not delete
//     everybody's blocks).
//     A block sealed under a shredded tenant key is FailedPrecondition (also a miss).
//   - Objects written by a newer format version are FailedPrecondition, never decoded.
//   - No call throws, none waits without bound: storage that is slow, full, read-only or gone
//     yields Unavailable / DeadlineExceeded / ResourceExhausted / PermissionDenied.
//   - Batch calls run their I/O in parallel and return one entry per input, in input order.
//
// Housekeeping (capacity, per-tenant quotas, TTL since last access, abandoned temp files) is
// done by a janitor that runs only on the node that holds the janitor lease object; see
// RunJanitorOnce().
//
// Thread safety: implementations are thread-safe.

#ifndef KVTIER_SRC_TIER_SHARED_SHARED_TIER_H_
#define KVTIER_SRC_TIER_SHARED_SHARED_TIER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "kvtier/env.h"
#include "src/services/block_codec.h"
#include "src/services/encryption/record_store.h"
#include "src/tier/shared/object_format.h"

namespace kvtier {

// One block to publish.
struct SharedPut {
  BlockKey key;
  std::span<const std::byte> value;  // Must stay valid for the duration of the call.
  SessionId session = 0;             // 0 = no session (DeleteSession will not find it).
  uint64_t created_us = 0;           // When the block was first stored; 0 = now.
  std::optional<KvDtype> dtype;      // For the KV codec; nullopt = opaque bytes.
};

// What ExistsMany reports about a present object.
struct SharedObjectInfo {
  uint64_t value_bytes = 0;    // The block's length as the user sees it.
  uint64_t stored_bytes = 0;   // The object's length in G4 (header + encoded payload).
  SessionId session = 0;       // Of the put that published the object.
  uint64_t created_us = 0;
  std::optional<KvDtype> dtype;
};

// A deletion notice as G4 holds it.
struct SharedNotice {
  std::string name;
  uint64_t stored_us = 0;  // When the storage wrote it, on the storage's clock.
  std::vector<std::byte> body;
};

// Housekeeping settings, shared by both tiers.
struct SharedJanitorOptions {
  // Total bytes of objects allowed in G4 under this root/bucket; 0 = unlimited. Over it, the
  // janitor deletes least recently used objects (by recorded access time) until under.
  uint64_t capacity_bytes = 0;
  // Per-tenant limit in bytes; 0 = unlimited. Over it, only that tenant's least recently used
  // objects are deleted.
  uint64_t tenant_quota_bytes = 0;
  // Objects not accessed for this long are deleted; 0 = never. Access times are recorded at
  // most once per `touch_interval_us` per object and node, so TTL precision is that interval.
  uint64_t ttl_us = 0;
  // A read refreshes an object's access time when the recorded one is older than this. Bigger
  // = fewer metadata writes, coarser LRU/TTL.
  uint64_t touch_interval_us = 10ull * 60 * 1000 * 1000;
  // Temp files (of writers killed mid-write) older than this are removed. Must exceed the
  // longest plausible write of one block.
  uint64_t temp_grace_us = 15ull * 60 * 1000 * 1000;
  // How long a janitor lease lasts without renewal. Its holder works only while less than
  // lease_us - clock_margin_us has passed since it renewed; another node takes over only
  // after lease_us + clock_margin_us of storage time has passed since the last renewal.
  uint64_t lease_us = 60ull * 1000 * 1000;
  // Allowance for clock differences between nodes and storage, and for slow renewals.
  uint64_t clock_margin_us = 10ull * 1000 * 1000;
  // Deletion notices older than this are removed. A node that was away for longer than this
  // cannot learn what was deleted meanwhile (docs/shared_tier.md, "Deletion notices").
  uint64_t notice_retention_us = 7ull * 24 * 3600 * 1000 * 1000;
  // Background janitor: when > 0, a thread tries to take or renew the lease and runs one
  // janitor pass every this many microseconds. 0 = only RunJanitorOnce() (tests, tools).
  uint64_t janitor_interval_us = 0;
};

// What both G4 tiers (SharedFsTierOptions, S3TierOptions) take.
struct SharedTierBaseOptions {
  // This node's name, unique in the cluster: 1 to 64 of [A-Za-z0-9_-]. It names temp files
  // and the janitor lease holder. Empty = "<hostname>-<pid>" (sanitized; g4::DefaultNodeId).
  std::string node_id;
  // Time base for leases and ages. true: the storage's clock (a file's mtime, S3's Date and
  // Last-Modified headers), so nodes whose clocks differ still agree. false: `env`'s clock,
  // written where the tier records times (tests with simulated time).
  bool storage_clock = true;
  SharedJanitorOptions janitor;
  // Data services (compression, encryption); not owned; nullptr = stored as is.
  BlockCodec* codec = nullptr;
  // Clock (NowMicros) and operator log; not owned; nullptr = Env::Default().
  Env* env = nullptr;

  // Fills in the defaults (node_id, env); InvalidArgument naming `tier` for a bad node id or
  // janitor lease.
  Status Sanitize(std::string_view tier);
};

struct SharedTierStats {
  uint64_t puts = 0;            // Objects published by this node.
  uint64_t put_existing = 0;    // Puts that found the object already present (no-op).
  uint64_t put_bytes = 0;       // Bytes written to G4 (objects, headers included).
  uint64_t hits = 0;
  uint64_t misses = 0;          // NotFound, plus every corrupt or unreadable object.
  uint64_t corrupt = 0;         // Objects that failed verification (never served).
  uint64_t get_bytes = 0;       // Value bytes returned.
  uint64_t errors = 0;          // Storage errors (I/O, network, server) of any call.
  uint64_t touches = 0;         // Access-time refreshes written.
  uint64_t deletes = 0;         // Objects deleted by Delete*/the janitor.
  uint64_t janitor_runs = 0;    // Janitor passes run while holding the lease.
  uint64_t janitor_evicted = 0; // Objects removed by capacity, quota or TTL.
  uint64_t janitor_temp_removed = 0;
  bool lease_held = false;      // Whether this node held the janitor lease at its last try.
};

// What one janitor pass did.
struct JanitorReport {
  bool lease_held = false;       // False: another node holds the lease; nothing was done.
  uint64_t objects_seen = 0;
  uint64_t bytes_seen = 0;
  uint64_t expired = 0;          // Removed by TTL.
  uint64_t evicted_quota = 0;    // Removed to bring a tenant under its quota.
  uint64_t evicted_capacity = 0; // Removed to bring the total under capacity.
  uint64_t temp_removed = 0;
  uint64_t markers_removed = 0;  // Session markers whose object is gone.
  uint64_t notices_removed = 0;  // Deletion notices past their retention.
};

// The counters behind SharedTierStats, updated without locks by either tier.
struct SharedTierCounters {
  std::atomic<uint64_t> puts{0}, put_existing{0}, put_bytes{0}, hits{0}, misses{0}, corrupt{0},
      get_bytes{0}, errors{0}, touches{0}, deletes{0}, janitor_runs{0}, janitor_evicted{0},
      janitor_temp_removed{0};
  std::atomic<bool> lease_held{false};

  // Counts `s` as a storage error unless it is OK or NotFound (a miss, not an error).
  void CountError(const Status& s) {
    if (!s.ok() && s.code() != StatusCode::kNotFound) errors++;
  }

  // The start of a janitor pass: records whether this node got the lease (`held`, from the
  // tier's lease attempt) in the counters and in *report, and counts the pass when it did.
  // Returns the attempt's error, counted; the pass goes on only if report->lease_held.
  Status StartJanitorPass(const Result<bool>& held, JanitorReport* report) {
    if (!held.ok()) {
      lease_held = false;
      CountError(held.status());
      return held.status();
    }
    lease_held = *held;
    report->lease_held = *held;
    if (*held) janitor_runs++;
    return Status::OK();
  }

  SharedTierStats Snapshot() const {
    SharedTierStats s;
    s.puts = puts;
    s.put_existing = put_existing;
    s.put_bytes = put_bytes;
    s.hits = hits;
    s.misses = misses;
    s.corrupt = corrupt;
    s.get_bytes = get_bytes;
    s.errors = errors;
    s.touches = touches;
    s.deletes = deletes;
    s.janitor_runs = janitor_runs;
    s.janitor_evicted = janitor_evicted;
    s.janitor_temp_removed = janitor_temp_removed;
    s.lease_held = lease_held;
    return s;
  }
};

class SharedTier : public encryption::RecordStore {
 public:
  virtual ~SharedTier() = default;

  // Publishes `puts` in parallel; one Status per put. OK when the object already exists.
  // Errors: InvalidArgument (tenant name, size), ResourceExhausted (G4 full), the storage's
  // errors. A failed put leaves no visible object (temp files are removed or, when the node
  // dies, left for the janitor).
  virtual std::vector<Status> PutMany(std::string_view tenant, std::span<const SharedPut> puts) = 0;

  // Which keys are present, in one parallel round (stat/HEAD). nullopt = absent or unreadable
  // (an error is counted in Stats().errors). Does not verify payloads.
  virtual std::vector<std::optional<SharedObjectInfo>> ExistsMany(
      std::string_view tenant, std::span<const BlockKey> keys) = 0;

  // Reads and verifies `keys` in parallel. Per key: the value, or NotFound (absent),
  // DataLoss (failed verification: counted; the object removed when its stored bytes are
  // wrong), FailedPrecondition (tenant keys shredded, or a newer format version), or the
  // storage's error. Returned vectors are owned by the caller.
  virtual std::vector<Result<std::vector<std::byte>>> GetMany(std::string_view tenant,
                                                             std::span<const BlockKey> keys) = 0;

  // Removes one object; OK when it was absent.
  virtual Status Delete(std::string_view tenant, const BlockKey& key) = 0;
  // Removes every object put with `session` (from any node); returns the keys removed.
  virtual Result<std::vector<BlockKey>> DeleteSession(std::string_view tenant,
                                                      SessionId session) = 0;
  // Removes every object of `tenant`; returns the keys removed.
  virtual Result<std::vector<BlockKey>> DeleteTenant(std::string_view tenant) = 0;

  // Deletion notices: small records that a node deleting blocks publishes, so that every
  // other node deletes its own G2/G3 copies. Publishes `body` under `name`
  // (g4::ValidNoticeName, else InvalidArgument), atomically.
  virtual Status PublishNotice(std::string_view name, std::span<const std::byte> body) = 0;
  // The notices whose names sort after `after` ("" = all), in name order, with their bodies
  // except for names `skip` (when not null) returns true for: those are left out.
  using NoticeFilter = std::function<bool(std::string_view name)>;
  virtual Result<std::vector<SharedNotice>> NoticesAfter(std::string_view after,
                                                         const NoticeFilter& skip) = 0;

  // Cluster records (encryption::RecordStore): small named objects beside the blocks that the
  // nodes share, such as the tenants' wrapped data keys (cluster_keys.h). Names are
  // g4::ValidRecordName; the janitor never touches them. A tenant's component is
  // g4::TenantComponent, as in object names.
  Result<std::string> TenantComponent(std::string_view tenant) const override {
    return g4::TenantComponent(tenant);
  }

  // One janitor pass: takes or renews the lease; when held, removes expired, over-quota and
  // over-capacity objects, abandoned temp files, orphan markers and notices past their
  // retention. Errors are storage errors while scanning, or Aborted when the lease ran out
  // during the pass (the rest waits for the next pass). Serialised: concurrent calls run one
  // after the other.
  virtual Result<JanitorReport> RunJanitorOnce() = 0;

  virtual SharedTierStats Stats() const = 0;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_TIER_SHARED_SHARED_TIER_H_
