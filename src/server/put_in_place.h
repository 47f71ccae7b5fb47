// A PUT_MANY whose values are received straight into their G2 allocations instead of through
// the connection's input buffer (ProtocolHandler's kReceivePayload): the event loop asks where
// the next value bytes go and reads them there.

#ifndef KVTIER_SERVER_PUT_IN_PLACE_H_
#define KVTIER_SERVER_PUT_IN_PLACE_H_

#include <cstddef>
#include <span>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/protocol/messages.h"

namespace kvtier::server {

// Stores one PUT_MANY's entries as Store::PutMany does, one entry at a time: an entry's space
// is allocated when its first byte is due and the block published once its last byte is in,
// so a batch larger than G2 (or the tenant's budget) is stored as PutMany stores it. A key
// already resident reports OK and its bytes are dropped; an entry G2 refuses reports the
// refusal and its bytes are dropped. An entry allocated and not yet published is given back if
// the put is destroyed first (the connection closed). Not thread-safe.
class InPlacePut {
 public:
  // REQUIRES: `store` has a payload arena; `entries` is not empty, each entry's size is 1 to
  // max_block_bytes, and a state value has a parent (the checks of Store::PutMany's entries).
  InPlacePut(Store* store, TenantId tenant, std::vector<protocol::PutEntry> entries);

  // Where the next value bytes go: a piece of the current entry's allocation, or, for an entry
  // whose bytes are dropped, a span of its size with a null data(). REQUIRES: !done().
  std::span<std::byte> Target();
  // The span Target gave last is filled.
  void Filled();
  bool done() const { return entry_ == entries_.size(); }
  // One status per entry, as Store::PutMany reports them. REQUIRES: done().
  const std::vector<Status>& statuses() const { return statuses_; }

 private:
  Store* const store_;
  const TenantId tenant_;
  const std::vector<protocol::PutEntry> entries_;
  std::vector<Status> statuses_;
  size_t entry_ = 0;           // The entry whose bytes come next.
  bool started_ = false;       // Whether that entry's allocation has been asked for.
  size_t piece_ = 0;           // Its allocation's piece being filled.
  BlockAllocation allocation_;  // Not valid() while the entry's bytes are dropped.
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_PUT_IN_PLACE_H_
