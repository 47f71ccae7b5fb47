// Bodies of the shared-memory fast path's requests and responses (docs/protocol.md,
// "Shared-memory fast path"). Shared by kvtierd and ShmClient so that both encode the same bytes.
//
// Decoders take untrusted bytes: every count is checked against the body and the given limits
// before anything is allocated, and a body with bytes left over is malformed (InvalidArgument
// naming the message). Decoders do not check extents against an arena: the receiver does, with
// CheckExtents, because only it knows the mapping. Thread-safe (pure functions).

#ifndef KVTIER_PROTOCOL_SHM_MESSAGES_H_
#define KVTIER_PROTOCOL_SHM_MESSAGES_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "src/protocol/messages.h"
#include "src/protocol/wire.h"

namespace kvtier::protocol {

// True for SHM_ATTACH .. SHM_PUT.
bool IsShmOpcode(uint8_t opcode);

// At most this many extents describe one block (an arena block is usually one extent; the
// allocator splits a block only when the arena is fragmented).
inline constexpr uint32_t kMaxShmExtents = 4096;

// A run of bytes in the shared arena: `length` bytes at `offset` from the start of the memfd.
struct ShmExtent {
  uint64_t offset = 0;
  uint64_t length = 0;
  friend bool operator==(const ShmExtent&, const ShmExtent&) = default;
};

// InvalidArgument unless every extent is non-empty, lies inside [0, arena_size) (no overflow)
// and the lengths add up to `block_size`.
Status CheckExtents(std::span<const ShmExtent> extents, uint64_t block_size, uint64_t arena_size);

// SHM_ATTACH reply, sent with two descriptors as SCM_RIGHTS on its first byte: the tenant's G2
// region (read-only; SHM_GET extents are offsets into it) and the connection's staging file
// (read-write; SHM_ALLOC extents are offsets into it).
struct ShmAttachReply {
  uint64_t arena_size = 0;       // Bytes of the region to map.
  uint32_t page_bytes = 0;       // The arena's allocation unit.
  uint32_t max_leases = 0;       // Most read leases this connection may hold at once.
  uint32_t max_allocations = 0;  // Most uncommitted allocations it may hold at once.
  uint64_t staging_size = 0;     // Bytes of the staging file to map.
};
void EncodeShmAttachReply(const ShmAttachReply& m, std::string* out);
Result<ShmAttachReply> DecodeShmAttachReply(std::span<const std::byte> body);

// One item of an SHM_GET reply. An arena hit has a lease id (non-zero) and extents; a block
// served from below G2 is not in the arena: lease 0, no extents, and its bytes follow the item
// list ("inline"), in item order, as in GET_MANY.
struct ShmGetItem {
  Status status;
  uint64_t lease = 0;
  uint64_t size = 0;
  std::vector<ShmExtent> extents;
  bool is_inline() const { return status.ok() && lease == 0; }
};
// The item list; the caller appends the inline values after it.
void EncodeShmGetDirectory(std::span<const ShmGetItem> items, std::string* out);
struct ShmGetReply {
  std::vector<ShmGetItem> items;
  // For each item, its inline value (a view into the decoded body); empty for other items.
  std::vector<std::span<const std::byte>> inline_values;
};
// InvalidArgument for a malformed list, a lease with an invalid extent count, or inline sizes
// that do not add up to the bytes after the list.
Result<ShmGetReply> DecodeShmGetReply(std::span<const std::byte> body);

// SHM_ALLOC request: PUT_MANY's entry directory without the values (EncodePutDirectory).
// InvalidArgument as DecodePutMany for a bad entry, or trailing bytes.
Result<std::vector<PutEntry>> DecodeShmAllocRequest(std::span<const std::byte> body,
                                                    uint32_t max_batch, uint64_t max_block_bytes);

// One item of an SHM_ALLOC reply: an allocation id (non-zero) and the extents to fill.
struct ShmAllocItem {
  Status status;
  uint64_t allocation = 0;
  std::vector<ShmExtent> extents;
};
void EncodeShmAllocReply(std::span<const ShmAllocItem> items, std::string* out);
Result<std::vector<ShmAllocItem>> DecodeShmAllocReply(std::span<const std::byte> body);

// SHM_RESERVE request: the buffer's size in bytes. Its reply: the reservation's id (non-zero;
// SHM_RELEASE ends it) and where the buffer starts in the staging file.
struct ShmReservation {
  uint64_t id = 0;
  uint64_t offset = 0;
};
void EncodeShmReserveRequest(uint64_t size, std::string* out);
Result<uint64_t> DecodeShmReserveRequest(std::span<const std::byte> body);
void EncodeShmReserveReply(const ShmReservation& m, std::string* out);
Result<ShmReservation> DecodeShmReserveReply(std::span<const std::byte> body);

// SHM_PUT request: PUT_MANY's entry directory without the values, then for each entry the
// offset in the staging file where its `size` bytes are (inside a reserved buffer). Its reply
// is item statuses (EncodeItemStatuses).
struct ShmPutItem {
  PutEntry entry;
  uint64_t offset = 0;
};
void EncodeShmPutRequest(std::span<const PutEntry> entries, std::span<const uint64_t> offsets,
                         std::string* out);
// InvalidArgument as DecodePutMany for a bad entry, a missing offset, or trailing bytes.
Result<std::vector<ShmPutItem>> DecodeShmPutRequest(std::span<const std::byte> body,
                                                    uint32_t max_batch, uint64_t max_block_bytes);

// SHM_RELEASE, SHM_COMMIT and SHM_ABORT requests: u32 count, u64 ids. Their replies are item
// statuses (EncodeItemStatuses). InvalidArgument for more than max_batch ids or a body that is
// not exactly count ids.
void EncodeShmIds(std::span<const uint64_t> ids, std::string* out);
Result<std::vector<uint64_t>> DecodeShmIds(std::span<const std::byte> body, uint32_t max_batch);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_SHM_MESSAGES_H_
