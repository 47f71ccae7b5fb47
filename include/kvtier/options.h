// Options for opening a Store. Every field has a default that works; Store::Open checks the
// combination and rejects nonsense with InvalidArgument.

#ifndef KVTIER_OPTIONS_H_
#define KVTIER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier {

class Env;
class BlockEventListener;
class EvictionObserver;

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// One tenant: an isolated key space with its own budgets and retention.
struct TenantOptions {
  // Unique, 1 to 128 bytes. Requests name their tenant; blocks of different tenants never
  // match, even when their keys are equal.
  std::string name;

  // Most bytes of G2 (host DRAM) this tenant may hold, counted in allocation pages.
  // 0 = no per-tenant limit (the whole tier). A tenant at its budget evicts its own blocks
  // and never another tenant's.
  uint64_t memory_budget_bytes = 0;

  // Most bytes of G3 (local SSD) this tenant may hold. 0 = no per-tenant limit.
  uint64_t disk_budget_bytes = 0;

  // A block not read or written for this many seconds is expired on every tier: a miss, then
  // removed. 0 = blocks never expire.
  uint64_t ttl_seconds = 0;

  // A block older than this many seconds since it was first stored is expired on every tier,
  // however often it is read. 0 = no maximum age.
  uint64_t max_age_seconds = 0;
};

// The G2 tier: host DRAM in a shared-memory arena, one sparse region per tenant.
struct MemoryTierOptions {
  // Size of G2, shared by every tenant. Never exceeded: puts evict or fail instead. Must hold
  // at least one block of max_block_bytes.
  uint64_t capacity_bytes = 1 * kGiB;

  // Allocation granule, a power of two from 4 KiB to 2 MiB. Blocks are stored as runs of whole
  // pages, so a block wastes less than one page; smaller pages waste less but make the
  // allocator's free map larger when memory is fragmented.
  uint32_t page_bytes = 4 * kKiB;

  // Take G2's memory at open (fallocate and map, the tenants' regions in configuration order,
  // each up to its budget), and later a block's pages when it is allocated if they hold none,
  // rather than at the first write into them: puts then pay no page allocation. Always so
  // with arena_file.
  bool prefault = false;

  // Eviction keeps blocks read again in a reused queue, the rest on probation (docs/store.md).
  // The reused queue's share of a tenant's G2 bytes starts at initial_reused_share and adapts
  // to the workload, up to max_reused_share: what is left on probation is what absorbs
  // one-time scans. 0 <= initial_reused_share <= max_reused_share < 1.
  double initial_reused_share = 0.0;
  double max_reused_share = 0.9;
  // Longest retention a session hint may ask for (SessionHint::retain_seconds): a tool call
  // seldom runs longer, and a hint is a preference, not a pin.
  uint32_t max_hint_retain_seconds = 3600;

  // Warm restart. When set, the regions are files named after this one instead of anonymous
  // memfds (arena_file + "." + a hash of the tenant's name): on tmpfs (/dev/shm) or
  // hugetlbfs, which outlive the process. Closing the store writes the index of G2 beside them
  // (arena_file + ".index"), each block with its checksum; the next open with the same
  // arena_file adopts the blocks in place, serving again every block whose checksum still
  // matches (docs/operations.md). A crash leaves no index, and the next open starts empty. One
  // process at a time (arena_file + ".lock"). Empty = G2 is gone with the process.
  std::string arena_file;

  // The data directory the arena belongs to (kvtierd's data_dir, absolute), recorded in its
  // lock file: `kvtier admin arenas` and kvtierd's start-up log call an arena whose directory
  // is gone orphaned, and can remove it. "" = none recorded.
  std::string arena_data_dir;
};

// The G3 tier: the node's local NVMe, as log-structured segment files in one directory.
struct DiskTierOptions {
  // Directory holding the segments and the lock file; created if absent. Only one process may
  // open it at a time (the second gets FailedPrecondition). Empty = no G3 tier.
  std::string dir;

  // Most bytes of segment files, including records not yet reclaimed. Never exceeded. Must
  // hold at least two segments.
  uint64_t capacity_bytes = 64 * kGiB;

  // Size of one segment file, a multiple of 4 KiB from 64 KiB to 4 GiB. Larger segments mean
  // fewer files and cheaper sequential writes; smaller ones let reclamation free space in
  // finer steps.
  uint64_t segment_bytes = 256 * kMiB;

  // When a put is acknowledged. kWritten: the record has reached the device with O_DIRECT (it
  // survives kill -9, not power loss until the next sync). kSynced: fdatasync has returned
  // (it survives power loss). See docs/disk_format.md, "Durability".
  enum class Durability { kWritten, kSynced };
  Durability durability = Durability::kWritten;

  // Use io_uring when the kernel offers it; otherwise (or when false) pread/pwrite.
  bool use_io_uring = true;

  // I/Os in flight per batch, 1 to 4096.
  uint32_t io_depth = 16;
};

// Which blocks evicted from G2 are written to G3. Every write costs SSD endurance, so blocks
// unlikely to be read again are skipped.
struct AdmissionOptions {
  // Blocks of prompts shorter than this many blocks are not written: recomputing a short
  // prefix is cheap. A block qualifies once a chain at least this long passes through it
  // (chains are linked by PutOptions::parent). 0 or 1 = no minimum.
  uint32_t min_prefix_blocks = 0;

  // Admit only blocks accessed (put, read or matched by a prefix lookup) at least
  // min_accesses times recently, counted in a decaying count-min sketch (TinyLFU style).
  bool frequency_gate = true;
  uint32_t min_accesses = 2;
};

// Data services on one persistent tier (G3, G4): how its records are transformed on the way
// to the device. G2 always holds plain bytes, because the shared-memory fast path hands its
// arena to clients as they are.
struct TierDataOptions {
  // Lossless KV compression: byte planes by the block's dtype (PutOptions::dtype), then zstd;
  // kept raw where that does not pay. Costs CPU on demotion and promotion; saves capacity and
  // device bandwidth.
  bool compress = true;
  // AES-256-GCM under the tenant's data key (SecurityOptions must name a master key). A block
  // is then readable only while its tenant's key exists (Store::ShredTenant).
  bool encrypt = false;
};

// Keys and the audit trail (docs/security.md).
struct SecurityOptions {
  // Where the master key comes from: "file:<path>" (32 raw bytes or 64 hex digits, no access
  // for other users) or "env:<VARIABLE>" (64 hex digits). Empty = no encryption; then no tier
  // may set encrypt.
  std::string master_key;
  // Directory of the keystore holding the wrapped per-tenant data keys. Empty = disk.dir.
  std::string keystore_dir;
  // Append-only JSON-lines log of deletions, shreds, key rotations and expirations. Empty = no
  // audit log.
  std::string audit_log_path;
};

// G4: storage the whole cluster already runs, shared by every node's store. Blocks are
// content-addressed and immutable, so many nodes keep one copy (docs/shared_tier.md).
struct SharedTierOptions {
  // Where G4 lives. Empty = no G4. An absolute path (or "file:<path>"): a directory on a
  // shared file system (NFS, Lustre, CephFS, 3FS, ...), which must exist. "s3://<bucket>": an
  // S3 bucket at s3_endpoint.
  std::string location;

  // S3 service, e.g. "http://127.0.0.1:4568" or "https://s3.eu-west-1.amazonaws.com".
  std::string s3_endpoint;
  // Empty = $AWS_REGION, else $AWS_DEFAULT_REGION, else "us-east-1".
  std::string s3_region;
  // true: http://host/bucket/key (MinIO, Ceph RGW, s3rver). false: virtual-host style.
  bool s3_path_style = true;
  // Services without conditional create (If-None-Match, probed at open): true = HEAD each
  // block before its PUT and skip the upload when it exists; false = PUT (a repeated PUT
  // replaces the object with the same bytes).
  bool s3_check_before_put = false;
  // Bounds on each S3 request: a slow, lossy or cut link makes G4 calls fail (a miss, an
  // upload not done) within about connect or request timeout times (retries + 1) plus the
  // backoff, never hang.
  uint32_t s3_connect_timeout_ms = 3000;
  uint32_t s3_request_timeout_ms = 30000;
  uint32_t s3_max_retries = 3;
  // Objects larger than this are uploaded in parts of s3_multipart_part_bytes (at least
  // 5 MiB, S3's smallest part), in parallel; the object appears only once all are in.
  uint64_t s3_multipart_threshold_bytes = 32 * kMiB;
  uint64_t s3_multipart_part_bytes = 8 * kMiB;
  // Empty = $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN.
  std::string s3_access_key;
  std::string s3_secret_key;

  // This node's name in the cluster (temp files, the janitor lease): 1 to 64 of
  // [A-Za-z0-9_-]. Empty = "<hostname>-<pid>".
  std::string node_id;

  // When blocks are written to G4. kOnPut: every put is uploaded in the background right
  // away, so other nodes find it at once (a full upload queue drops uploads, counted).
  // kOnDemotion: blocks leaving G2 for G3 (or, without G3, evicted from G2 and admitted by
  // disk_admission) are written to G4 as well.
  enum class WritePolicy { kOnPut, kOnDemotion };
  WritePolicy write_policy = WritePolicy::kOnDemotion;
  // With kOnDemotion, the copies of blocks that left G2 and wait for their upload, at most
  // (memory beside G2's capacity). G2's room never waits for G4: past this, uploads are
  // dropped and counted. Larger rides out slower or stalled S3 service without dropping.
  uint64_t upload_buffer_bytes = 256 * kMiB;

  // A G4 hit is copied into G2, so the next read is served from DRAM.
  bool promote_on_hit = true;

  // A G4 existence check that found a block is reused this long by this node's lookups and
  // reads of it (0 = G4 is asked every time): a burst of lookups of one prompt, or an engine
  // asking again at each scheduling step, costs one check per block. A deletion on this node,
  // or another node's applied from its notice, forgets them at once; a block G4 lost in the
  // meantime (the janitor, another node's deletion) is found missing by the read, a miss.
  uint64_t exists_cache_ms = 1000;

  // Housekeeping, run by whichever node holds the janitor lease: total bytes (0 = no limit),
  // bytes per tenant (0 = no limit), seconds since last access (0 = never expires), and how
  // often the janitor runs (0 = never on this node).
  uint64_t capacity_bytes = 0;
  uint64_t tenant_quota_bytes = 0;
  uint64_t ttl_seconds = 0;
  uint64_t janitor_interval_seconds = 60;
  // How long the janitor lease lasts without renewal; another node takes over a lease left
  // this long (plus a sixth for clock differences) after its holder stopped renewing.
  uint64_t janitor_lease_seconds = 60;

  // fsync objects before publishing them (shared file systems). Off only for scratch space.
  bool sync = true;

  // Deletions reach the other nodes' G2 and G3 through deletion notices in G4
  // (docs/shared_tier.md, "Deletion notices"). This node reads the others' notices every
  // notice_poll_ms (0 = only when Store::ApplyDeletionNotices() is called), each time from
  // notice_margin_seconds before the newest it applied (node clocks must agree that closely).
  // The janitor removes notices older than notice_retention_seconds: a node that read none
  // for longer (down, or cut off from G4) cannot learn what was deleted meanwhile, and empties
  // its G2 and G3 itself (it keeps its reading state in <disk.dir>/notice-state).
  uint64_t notice_poll_ms = 2000;
  uint64_t notice_margin_seconds = 300;
  uint64_t notice_retention_seconds = 7 * 24 * 3600;

  // Every report_ms this node writes its G4 counters to G4 (a cluster record), so that any
  // node can show the whole fleet's G4 traffic (Store::Fleet, the dashboard's G4 panel);
  // 0 = it reports nothing and Fleet() is FailedPrecondition.
  uint64_t report_ms = 10000;
};

struct Options {
  MemoryTierOptions memory;

  // G3. Disabled while disk.dir is empty.
  DiskTierOptions disk;

  // Which G2 evictions are demoted to G3 (asynchronously, by a background thread).
  AdmissionOptions disk_admission;

  // Compression and encryption of G3 records.
  TierDataOptions disk_data;

  // G4, shared by the cluster; disabled while shared.location is empty.
  SharedTierOptions shared;
  // Compression and encryption of G4 objects. Encrypted objects open only where the
  // tenant's keys are: nodes must share the keystore (security.keystore_dir) to read each
  // other's encrypted blocks.
  TierDataOptions shared_data;

  SecurityOptions security;

  // A G3 hit is copied back into G2 (promotion), so the next read is served from DRAM.
  bool promote_on_hit = true;

  // Largest block accepted by Put, at most 1 GiB. Engines' blocks range from 64 KiB to 64 MiB.
  uint64_t max_block_bytes = 64 * kMiB;

  // The tenants this store serves. Requests for any other tenant fail with NotFound.
  std::vector<TenantOptions> tenants = {TenantOptions{"default"}};

  // Simulation mode for trace replay and sizing: the store keeps every piece of metadata and
  // runs every policy exactly as usual, but allocates no arena and never reads or copies block
  // bytes. Put uses only value.size(); Get returns handles with no extents; Read copies
  // nothing. Capacity may then exceed physical memory.
  bool payload_free = false;

  // How often a background thread removes expired blocks (TTL, maximum age) from every tier,
  // so that retention holds for blocks nobody asks for. 0 = never (expiry is then found on
  // access and by Store::PurgeExpired). Payload-free stores never run it.
  uint64_t retention_scan_seconds = 60;

  // Clock source. nullptr = Env::Default(). Not owned; must outlive the Store.
  Env* env = nullptr;

  // Told what each tier gains and loses (kvtier/events.h). nullptr = nobody. Not owned; must
  // outlive the Store.
  BlockEventListener* event_listener = nullptr;

  // Payload-free stores only: told of every G2 eviction with its G3 admission decision
  // (kvtier/events.h), for replaying a trace against simulated G3 and G4. nullptr = nobody.
  // Not owned; must outlive the Store.
  EvictionObserver* eviction_observer = nullptr;
};

}  // namespace kvtier

#endif  // KVTIER_OPTIONS_H_
