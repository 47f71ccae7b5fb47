// Block events: what each tier of a Store gains and loses, for KV-aware routers that need to
// know which node holds which prefix (kvtierd publishes them in vLLM's KV-events format,
// src/server/kv_events.h).
//
// A Store calls its listener (Options::event_listener) when a block becomes readable in a
// tier and when it stops being readable there (evicted, expired, deleted, dropped as
// corrupt), and when a tenant's blocks were all deleted. G2 reports CPU, G3 DISK, and G4
// EXTERNAL for the uploads and deletions this node made (a session's or tenant's deletion
// with the keys G4 removed). What G2 adopts and G3 recovers at open is not reported here:
// Store::ListHeld lists it (kvtierd announces it, src/server/kv_events.h).

#ifndef KVTIER_EVENTS_H_
#define KVTIER_EVENTS_H_

#include <cstdint>

#include "kvtier/block_key.h"

namespace kvtier {

enum class BlockMedium : uint8_t { kCpu, kDisk, kExternal };

// "CPU", "DISK" or "EXTERNAL": the medium names of vLLM's KV events.
const char* BlockMediumName(BlockMedium medium);

// Thread safety: called concurrently from the Store's threads, possibly while a tier holds its
// lock. An implementation must return at once (queue the event) and must not call the Store.
class BlockEventListener {
 public:
  virtual ~BlockEventListener() = default;
  // `tenant` is the tenant's index in Options::tenants (TenantId::value). `parent`, when the put
  // named one, is the previous block of the chain; `engine_hash` the engine's own hash when the
  // put carried one (G2 only; later events of the block name it by key); nullptr otherwise.
  virtual void OnStored(uint32_t tenant, const BlockKey& key, const BlockKey* parent,
                        BlockMedium medium, const EngineHash* engine_hash) = 0;
  virtual void OnRemoved(uint32_t tenant, const BlockKey& key, BlockMedium medium) = 0;
  // Every block of the tenant was deleted, on every tier of this node.
  virtual void OnCleared(uint32_t tenant) = 0;
};

// What G2 evicts, for simulations (trace replay): a payload-free Store with an observer
// (Options::eviction_observer) decides G3 admission (Options::disk_admission) for every block
// G2 evicts, exactly as a Store with G3 would, and reports the decision at once instead of
// demoting. Expired blocks are not reported.
//
// Thread safety: called with G2's lock held; an implementation must not call the Store.
class EvictionObserver {
 public:
  virtual ~EvictionObserver() = default;
  // `tenant` as in BlockEventListener; `admitted`: whether G3 admission took the block.
  virtual void OnEvicted(uint32_t tenant, const BlockKey& key, bool admitted) = 0;
};

}  // namespace kvtier

#endif  // KVTIER_EVENTS_H_
