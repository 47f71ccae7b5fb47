// KV events in vLLM's wire format, so that KV-aware routers (Dynamo's KV router, llm-d's
// KV-cache manager, vLLM's own tooling) learn which node holds which blocks.
//
// Wire format (vLLM's vllm.distributed.kv_events, ZmqEventPublisher):
// - A ZMQ PUB socket sends one multipart message per batch: the topic (topic_prefix followed
//   by the tenant's name), the batch's sequence number (8 bytes, big-endian; 0, 1, 2, ... over
//   all topics), and the batch, msgpack-encoded as vLLM's KVEventBatch:
//     [ts (float64 seconds since the epoch), [event, ...], data_parallel_rank (nil)]
//   Each event is a map whose "type" names it:
//     {"type": "BlockStored", "block_hashes": [bin32, ...], "parent_block_hash": bin32 | nil,
//      "token_ids": [], "block_size": 0, "lora_id": nil, "medium": "CPU" | "DISK" |
//      "EXTERNAL", "lora_name": nil}
//     {"type": "BlockRemoved", "block_hashes": [bin32, ...], "medium": ...}
//     {"type": "AllBlocksCleared"}
//   A block is named by the engine's own hash when its put carried one (an integer as a msgpack
//   integer, bytes as bin: vLLM's ExternalBlockHash), in every later event of it too while it is
//   among the last max_engine_hashes such blocks; otherwise by its 32-byte kvtier key, the key
//   an engine derives with kvtier.block_keys / opaque_key (docs/block_keys.md). A BlockStored
//   lists a run of blocks of one chain in order, its parent_block_hash the parent of the first.
//   kvtierd does not see token ids; token_ids is empty and block_size 0.
// - A ZMQ ROUTER socket (replay_endpoint) answers a request of one 8-byte big-endian start
//   sequence number (from a REQ socket, or a DEALER sending an empty frame first) with every
//   kept batch from that number on, each as (empty, topic, seq, payload), then the end marker
//   (empty, empty, 0xff x 8, empty). The last buffer_steps batches are kept.
// - What the node holds: a request of the frame "kvtier-snapshot" on the replay socket is
//   answered, per tenant, with batches (empty, topic, seq, payload) whose events are one
//   AllBlocksCleared and then BlockStored of every block held in G2 (CPU) and G3 (DISK), each
//   chain's blocks after their parents, then the end marker. Every batch of a snapshot carries
//   the same seq: the first live batch the snapshot does not include. A router that subscribes,
//   asks for a snapshot, applies it and then the live batches from that seq on has the view of
//   one that was there from the start (a block stored or removed during the snapshot is in it
//   or not, and the live batches after it set it right). G4 is shared by the cluster and is not
//   in a snapshot. At start-up the same listing goes out as live batches (AllBlocksCleared, then
//   what G2 adopted and G3 recovered), so routers learn what a restarted node holds; live
//   events wait until it is out.
//   Listings look at the Store a part at a time (kListSlots index slots per step, one step
//   between sends), so the data path is not held up.
//
// Events are queued by the Store's threads (a bounded queue; beyond max_queue they are
// dropped and counted) and sent by one thread, batch_ms apart at most.

#ifndef KVTIER_SERVER_KV_EVENTS_H_
#define KVTIER_SERVER_KV_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/events.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/common/mutex.h"
#include "src/server/config.h"

namespace kvtier::server {

class KvEventPublisher final : public BlockEventListener {
 public:
  // Binds both sockets and starts the sending thread. `tenant_names[i]` names tenant i.
  // InvalidArgument for an endpoint ZMQ does not accept, Unavailable when it cannot be bound.
  static Result<std::unique_ptr<KvEventPublisher>> Start(const EventsConfig& config,
                                                         std::vector<std::string> tenant_names);
  // Sends what is queued, then closes the sockets.
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void OnStored(uint32_t tenant, const BlockKey& key, const BlockKey* parent,
                BlockMedium medium, const EngineHash* engine_hash) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnRemoved(uint32_t tenant, const BlockKey& key, BlockMedium medium) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnCleared(uint32_t tenant) override ABSL_LOCKS_EXCLUDED(mu_);

  // The Store whose blocks snapshots list (not owned; nullptr: none, and listings under way
  // stop). With `announce`, what it holds goes out now as live events. Call with nullptr
  // before the Store is destroyed.
  void SetStore(const Store* store, bool announce) ABSL_LOCKS_EXCLUDED(store_mu_);

  // Index slots a listing looks at per step; events in one snapshot batch.
  static constexpr size_t kListSlots = 4096;
  static constexpr size_t kSnapshotBatch = 1024;
  // The replay socket's request for a snapshot.
  static constexpr std::string_view kSnapshotRequest = "kvtier-snapshot";

  // The endpoints as bound (a "tcp://host:*" endpoint shows its port).
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

  uint64_t events() const { return events_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t messages() const { return messages_.load(std::memory_order_relaxed); }
  uint64_t replays() const { return replays_.load(std::memory_order_relaxed); }
  uint64_t snapshots() const { return snapshots_.load(std::memory_order_relaxed); }

  enum class Kind : uint8_t { kStored, kRemoved, kCleared };
  struct Event {
    Kind kind;
    BlockMedium medium;
    bool has_parent;
    uint32_t tenant;
    BlockKey key;
    BlockKey parent;
    std::optional<EngineHash> engine_hash;  // The put's, on a G2 store that carried one.
  };
  // How a block is named in the events: the engine's hash, when known, else nullptr (its key).
  using Namer = std::function<const EngineHash*(uint32_t tenant, const BlockKey& key)>;
  // One KVEventBatch of one tenant's events, in order, with runs merged as described above.
  static std::string EncodeBatch(double ts, const std::vector<const Event*>& events,
                                 const Namer& name);

 private:
  KvEventPublisher(const EventsConfig& config, std::vector<std::string> tenant_names);
  void Enqueue(const Event& e) ABSL_LOCKS_EXCLUDED(mu_);
  void Run();
  // Sends the queued events, one message per tenant present.
  void Publish(std::vector<Event> events);
  // The topic of `tenant`'s messages: topic_prefix and its name.
  std::string Topic(uint32_t tenant) const;
  // Sends one batch on the PUB socket with the next seq, and keeps it for replay.
  void Send(uint32_t tenant, std::string payload);
  void ServeReplay();
  // One step of the listing at the front of listings_; a finished tenant's blocks are sent.
  void StepListing() ABSL_LOCKS_EXCLUDED(store_mu_);
  // Sends what waits in replay_outbox_ until the socket takes no more.
  void FlushReplayOutbox();
  const EngineHash* NameOf(uint32_t tenant, const BlockKey& key) const;

  const EventsConfig config_;
  const std::vector<std::string> tenant_names_;
  std::string endpoint_;
  std::string replay_endpoint_;
  void* context_ = nullptr;
  void* pub_ = nullptr;     // Used by the sending thread only, once started.
  void* replay_ = nullptr;  // Likewise; null without replay.

  Mutex mu_;
  std::vector<Event> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool announce_ ABSL_GUARDED_BY(mu_) = false;  // SetStore asked for an announcement.

  // Held while a listing step reads the Store, so SetStore(nullptr) waits for it.
  Mutex store_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  const Store* store_ ABSL_GUARDED_BY(store_mu_) = nullptr;

  // Listings under way, oldest first (sending thread only).
  struct Listing {
    std::optional<std::string> requester;  // Replay socket identity; nullopt = announcement.
    uint64_t seq = 0;                      // A snapshot's: the first live batch not in it.
    uint32_t tenant = 0;
    uint64_t cursor = 0;
    std::vector<HeldBlock> held;  // The current tenant's, so far.
  };
  std::deque<Listing> listings_;
  // Snapshot messages the replay socket did not take yet (its queue was full).
  std::deque<std::vector<std::string>> replay_outbox_;

  struct Sent {
    uint64_t seq;
    std::string topic;
    std::string payload;
  };
  std::vector<Sent> kept_;  // Ring of the last buffer_steps messages (sending thread only).
  // The engine hashes of the last max_engine_hashes blocks stored with one (sending thread
  // only), oldest first in `named_order_`.
  struct TenantKey {
    uint32_t tenant;
    BlockKey key;
    friend bool operator==(const TenantKey&, const TenantKey&) = default;
  };
  struct TenantKeyHasher {
    size_t operator()(const TenantKey& k) const { return k.key.Hash64() ^ k.tenant; }
  };
  std::unordered_map<TenantKey, EngineHash, TenantKeyHasher> named_;
  std::deque<TenantKey> named_order_;
  size_t kept_next_ = 0;
  uint64_t next_seq_ = 0;

  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> messages_{0};
  std::atomic<uint64_t> replays_{0};
  std::atomic<uint64_t> snapshots_{0};
  std::thread thread_;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_KV_EVENTS_H_
