#include "src/protocol/shm_messages.h"

#include <string>

namespace kvtier::protocol {
namespace {

// Wire sizes, used to bound counts before allocating.
constexpr size_t kStatusMinBytes = 3;   // code u8, message length u16.
constexpr size_t kExtentBytes = 16;     // offset u64, length u64.

void WriteExtents(BodyWriter* w, std::span<const ShmExtent> extents) {
  w->U32(static_cast<uint32_t>(extents.size()));
  for (const ShmExtent& e : extents) {
    w->U64(e.offset);
    w->U64(e.length);
  }
}

// Reads u32 n, then n extents. False on a short body or a count over kMaxShmExtents.
bool ReadExtents(BodyReader* r, std::vector<ShmExtent>* out) {
  uint32_t n = r->U32();
  if (!r->ok() || n > kMaxShmExtents || r->remaining() / kExtentBytes < n) return false;
  out->resize(n);
  for (ShmExtent& e : *out) {
    e.offset = r->U64();
    e.length = r->U64();
  }
  return r->ok();
}

}  // namespace

bool IsShmOpcode(uint8_t opcode) {
  return opcode >= static_cast<uint8_t>(Opcode::kShmAttach) &&
         opcode <= static_cast<uint8_t>(Opcode::kShmPut);
}

Status CheckExtents(std::span<const ShmExtent> extents, uint64_t block_size, uint64_t arena_size) {
  uint64_t total = 0;
  for (const ShmExtent& e : extents) {
    if (e.length == 0 || e.offset > arena_size || e.length > arena_size - e.offset) {
      return Status::InvalidArgument("extent [" + std::to_string(e.offset) + ", +" +
                                     std::to_string(e.length) + ") is empty or outside the " +
                                     std::to_string(arena_size) + "-byte arena");
    }
    total += e.length;  // Cannot overflow: each length is at most arena_size.
    if (total > block_size) break;
  }
  if (total != block_size) {
    return Status::InvalidArgument("extents cover " + std::to_string(total) +
                                   " bytes for a block of " + std::to_string(block_size));
  }
  return Status::OK();
}

void EncodeShmAttachReply(const ShmAttachReply& m, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U64(m.arena_size);
  w.U32(m.page_bytes);
  w.U32(m.max_leases);
  w.U32(m.max_allocations);
  w.U64(m.staging_size);
}

Result<ShmAttachReply> DecodeShmAttachReply(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  ShmAttachReply m;
  m.arena_size = r.U64();
  m.page_bytes = r.U32();
  m.max_leases = r.U32();
  m.max_allocations = r.U32();
  m.staging_size = r.U64();
  if (!r.done()) return Malformed("SHM_ATTACH response");
  return m;
}

void EncodeShmGetDirectory(std::span<const ShmGetItem> items, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(items.size()));
  for (const ShmGetItem& item : items) {
    w.StatusValue(item.status);
    if (!item.status.ok()) continue;
    w.U64(item.lease);
    w.U64(item.size);
    WriteExtents(&w, item.lease == 0 ? std::span<const ShmExtent>() : item.extents);
  }
}

Result<ShmGetReply> DecodeShmGetReply(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  uint32_t count = r.U32();
  if (!r.ok() || r.remaining() / kStatusMinBytes < count) return Malformed("SHM_GET response");
  ShmGetReply reply;
  reply.items.resize(count);
  uint64_t inline_bytes = 0;
  for (ShmGetItem& item : reply.items) {
    item.status = r.StatusValue();
    if (!r.ok()) return Malformed("SHM_GET response");
    if (!item.status.ok()) continue;
    item.lease = r.U64();
    item.size = r.U64();
    if (!ReadExtents(&r, &item.extents) || item.size == 0) return Malformed("SHM_GET response");
    if ((item.lease == 0) != item.extents.empty()) {
      return Status::InvalidArgument("SHM_GET item with a lease needs extents, an inline one none");
    }
    if (item.lease == 0) {
      if (item.size > r.remaining()) return Malformed("SHM_GET response");
      inline_bytes += item.size;
    }
  }
  if (inline_bytes != r.remaining()) {
    return Status::InvalidArgument("SHM_GET inline sizes (" + std::to_string(inline_bytes) +
                                   " bytes) do not match the " + std::to_string(r.remaining()) +
                                   " bytes after the list");
  }
  reply.inline_values.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (reply.items[i].is_inline()) reply.inline_values[i] = r.Bytes(reply.items[i].size);
  }
  return reply;
}

void EncodeShmReserveRequest(uint64_t size, std::string* out) { BodyWriter(out).U64(size); }

Result<uint64_t> DecodeShmReserveRequest(std::span<const std::byte> body) {
  BodyReader r(body);
  const uint64_t size = r.U64();
  if (!r.done()) return Malformed("SHM_RESERVE");
  return size;
}

void EncodeShmReserveReply(const ShmReservation& m, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U64(m.id);
  w.U64(m.offset);
}

Result<ShmReservation> DecodeShmReserveReply(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  ShmReservation m;
  m.id = r.U64();
  m.offset = r.U64();
  if (!r.done() || m.id == 0) return Malformed("SHM_RESERVE response");
  return m;
}

void EncodeShmPutRequest(std::span<const PutEntry> entries, std::span<const uint64_t> offsets,
                         std::string* out) {
  EncodePutDirectory(entries, out);
  BodyWriter w(out);
  for (uint64_t offset : offsets) w.U64(offset);
}

Result<std::vector<ShmPutItem>> DecodeShmPutRequest(std::span<const std::byte> body,
                                                    uint32_t max_batch, uint64_t max_block_bytes) {
  BodyReader r(body);
  Result<std::vector<PutEntry>> entries =
      ReadPutDirectory(&r, "SHM_PUT", kEntryHasParent | kEntryHasSession | kEntryHasDtype,
                       max_batch, max_block_bytes);
  if (!entries.ok()) return entries.status();
  if (r.remaining() != uint64_t{entries->size()} * 8) return Malformed("SHM_PUT");
  std::vector<ShmPutItem> items(entries->size());
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].entry = std::move((*entries)[i]);
    items[i].offset = r.U64();
  }
  return items;
}

Result<std::vector<PutEntry>> DecodeShmAllocRequest(std::span<const std::byte> body,
                                                    uint32_t max_batch, uint64_t max_block_bytes) {
  BodyReader r(body);
  Result<std::vector<PutEntry>> entries =
      ReadPutDirectory(&r, "SHM_ALLOC", kEntryHasParent | kEntryHasSession | kEntryHasDtype,
                       max_batch, max_block_bytes);
  if (entries.ok() && !r.done()) return Malformed("SHM_ALLOC");
  return entries;
}

void EncodeShmAllocReply(std::span<const ShmAllocItem> items, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(items.size()));
  for (const ShmAllocItem& item : items) {
    w.StatusValue(item.status);
    if (!item.status.ok()) continue;
    w.U64(item.allocation);
    WriteExtents(&w, item.extents);
  }
}

Result<std::vector<ShmAllocItem>> DecodeShmAllocReply(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  uint32_t count = r.U32();
  if (!r.ok() || r.remaining() / kStatusMinBytes < count) return Malformed("SHM_ALLOC response");
  std::vector<ShmAllocItem> items(count);
  for (ShmAllocItem& item : items) {
    item.status = r.StatusValue();
    if (!r.ok()) return Malformed("SHM_ALLOC response");
    if (!item.status.ok()) continue;
    item.allocation = r.U64();
    if (!ReadExtents(&r, &item.extents) || item.allocation == 0 || item.extents.empty()) {
      return Malformed("SHM_ALLOC response");
    }
  }
  if (!r.done()) return Malformed("SHM_ALLOC response");
  return items;
}

void EncodeShmIds(std::span<const uint64_t> ids, std::string* out) {
  BodyWriter w(out);
  w.U32(static_cast<uint32_t>(ids.size()));
  for (uint64_t id : ids) w.U64(id);
}

Result<std::vector<uint64_t>> DecodeShmIds(std::span<const std::byte> body, uint32_t max_batch) {
  BodyReader r(body);
  uint32_t count = r.U32();
  if (!r.ok()) return Malformed("id list");
  if (count > max_batch) {
    return Status::InvalidArgument("batch of " + std::to_string(count) +
                                   " ids exceeds max_batch " + std::to_string(max_batch));
  }
  if (r.remaining() != static_cast<uint64_t>(count) * 8) {
    return Status::InvalidArgument("id list count " + std::to_string(count) +
                                   " does not match the body length");
  }
  std::vector<uint64_t> ids(count);
  for (uint64_t& id : ids) id = r.U64();
  return ids;
}

}  // namespace kvtier::protocol
