// Block events: what each tier of a Store gains and loses, for KV-aware routers that need to
// know which node holds which prefix (kvtierd publishes them in vLLM's KV-events format,
// src/server/kv_events.h).
//
// A Store calls its listener (Options::event_listener) when a block becomes readable in a
// tier and when it stops being readable there (evicted, expired, deleted, dropped as
// corrupt), and when a tenant's blocks were all deleted. G2 reports CPU, G3 DISK, and G4
// EXTERNAL for the uploads and deletions this node made. Not reported: what G3 recovers at
// start-up, and G4 objects of a session deletion (whose keys this node does not list).

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

}  // namespace kvtier

#endif  // KVTIER_EVENTS_H_
