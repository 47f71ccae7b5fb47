#include "src/server/shm_handler.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "src/protocol/messages.h"
#include "src/protocol/shm_messages.h"

namespace kvtier::server {

using protocol::FrameHeader;
using protocol::Opcode;

uint64_t ShmHandler::Negotiate(uint64_t requested_features, TenantId tenant) {
  granted_ = (requested_features & protocol::kFeatureSharedMemory) != 0 && unix_socket_ &&
             ctx_->store->shared_arena(tenant).has_value();
  return granted_ ? protocol::kFeatureSharedMemory : 0;
}

void ShmHandler::Handle(const FrameHeader& h, std::span<const std::byte> body, TenantId tenant,
                        OutputQueue* out) {
  if (!granted_) {
    Reply(out, h,
          Status::FailedPrecondition(
              unix_socket_ ? "the SHARED_MEMORY feature was not granted: ask for it in HELLO"
                           : "shared memory is offered on kvtierd's Unix socket only"));
    return;
  }
  auto op = static_cast<Opcode>(h.opcode);
  if (op == Opcode::kShmAttach) {
    Attach(h, tenant, out);
    return;
  }
  if (!session_) {
    Reply(out, h, Status::FailedPrecondition("send SHM_ATTACH before other SHM_* requests"));
    return;
  }
  switch (op) {
    case Opcode::kShmGet: Get(h, body, tenant, out); return;
    case Opcode::kShmAlloc: Alloc(h, body, out); return;
    case Opcode::kShmReserve: Reserve(h, body, out); return;
    case Opcode::kShmPut: Put(h, body, out); return;
    default: IdOp(h, body, out); return;
  }
}

void ShmHandler::Send(OutputQueue* out, const FrameHeader& request, uint64_t extra_body_bytes) {
  FrameHeader h;
  h.opcode = request.opcode;
  h.flags = protocol::kFlagResponse;
  h.request_id = request.request_id;
  h.body_length = static_cast<uint32_t>(body_.size() + extra_body_bytes);
  std::byte header[protocol::kHeaderSize];
  protocol::EncodeHeader(h, header);
  out->Append({reinterpret_cast<const char*>(header), sizeof(header)});
  out->Append(body_);
}

void ShmHandler::Reply(OutputQueue* out, const FrameHeader& request, const Status& status) {
  body_.clear();
  protocol::EncodeStatusOnly(status, &body_);
  Send(out, request);
}

void ShmHandler::Attach(const FrameHeader& h, TenantId tenant, OutputQueue* out) {
  std::optional<SharedArena> arena = ctx_->store->shared_arena(tenant);
  if (!arena) {  // Negotiate saw one; a store does not lose its arena. Defensive only.
    Reply(out, h, Status::FailedPrecondition("the store has no shared arena"));
    return;
  }
  if (!session_) {
    ShmSession::Limits limits = limits_;
    limits.staging_bytes = std::max<uint64_t>(limits.staging_bytes,
                                              ctx_->config->store.max_block_bytes);
    Result<std::unique_ptr<ShmSession>> session = ShmSession::Create(
        ctx_->store, tenant, *arena, ctx_->config->store.memory.page_bytes, limits);
    if (!session.ok()) {
      Reply(out, h, session.status());
      return;
    }
    session_ = std::move(session).value();
  }
  protocol::ShmAttachReply reply;
  reply.arena_size = arena->size;
  reply.page_bytes = ctx_->config->store.memory.page_bytes;
  reply.max_leases = limits_.max_leases;
  reply.max_allocations = limits_.max_allocations;
  reply.staging_size = session_->staging_size();
  body_.clear();
  protocol::EncodeShmAttachReply(reply, &body_);
  FrameHeader rh;
  rh.opcode = h.opcode;
  rh.flags = protocol::kFlagResponse;
  rh.request_id = h.request_id;
  rh.body_length = static_cast<uint32_t>(body_.size());
  std::string frame(protocol::kHeaderSize, '\0');
  protocol::EncodeHeader(rh, reinterpret_cast<std::byte*>(frame.data()));
  frame += body_;
  // The region's read-only descriptor and the staging file's travel as SCM_RIGHTS on the
  // reply's first byte; the client receives its own descriptors for the same files.
  out->AppendWithFds(frame, {arena->fd, session_->staging_fd()});
}

void ShmHandler::Get(const FrameHeader& h, std::span<const std::byte> body, TenantId tenant,
                     OutputQueue* out) {
  Result<std::vector<BlockKey>> keys = protocol::DecodeKeyList(body, ctx_->config->max_batch);
  if (!keys.ok()) {
    Reply(out, h, keys.status());
    return;
  }
  std::vector<Result<BlockHandle>> found = ctx_->store->GetMany(tenant, *keys);
  std::vector<protocol::ShmGetItem> items(found.size());
  std::vector<BlockHandle> inline_values;
  // The reply never exceeds max_frame_bytes (as GET_MANY): items whose extents or inline bytes
  // would overflow it are RESOURCE_EXHAUSTED, for the client to ask again. Each item is
  // counted as 128 bytes (a status with its message, which this server keeps short, a lease id,
  // a size, a count) plus its extents or inline bytes.
  constexpr uint64_t kItemBytes = 128;
  const uint64_t limit = ctx_->max_frame_bytes;
  uint64_t reply_bytes = 16 + kItemBytes * uint64_t{found.size()};
  uint64_t inline_bytes = 0;
  const Status too_big =
      Status::ResourceExhausted("reply would exceed max_frame_bytes; request this key again");
  for (size_t i = 0; i < found.size(); ++i) {
    protocol::ShmGetItem& item = items[i];
    if (!found[i].ok()) {
      item.status = found[i].status();
      continue;
    }
    BlockHandle handle = std::move(found[i]).value();
    item.size = handle.size();
    if (session_->ToExtents(handle.extents(), &item.extents)) {
      const uint64_t extent_bytes = 16 * uint64_t{item.extents.size()};
      if (reply_bytes + extent_bytes > limit) {
        item.status = too_big;
        continue;
      }
      Result<uint64_t> lease = session_->AddLease(std::move(handle), &item.extents);
      if (lease.ok()) {
        item.lease = *lease;
        reply_bytes += extent_bytes;
      } else {
        item.status = lease.status();
      }
      continue;
    }
    // Served from below G2 into a buffer of the handle: the fallback sends the bytes inline.
    if (reply_bytes + item.size > limit) {
      item.status = too_big;
      continue;
    }
    item.extents.clear();
    reply_bytes += item.size;
    inline_bytes += item.size;
    inline_values.push_back(std::move(handle));
  }
  body_.clear();
  protocol::EncodeShmGetDirectory(items, &body_);
  Send(out, h, inline_bytes);
  for (BlockHandle& v : inline_values) out->AppendLease(std::move(v));
}

void ShmHandler::Alloc(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
  Result<std::vector<protocol::PutEntry>> entries = protocol::DecodeShmAllocRequest(
      body, ctx_->config->max_batch, ctx_->config->store.max_block_bytes);
  if (!entries.ok()) {
    Reply(out, h, entries.status());
    return;
  }
  std::vector<protocol::ShmAllocItem> items(entries->size());
  for (size_t i = 0; i < items.size(); ++i) {
    Result<uint64_t> id = session_->Allocate((*entries)[i], &items[i].extents);
    if (id.ok()) {
      items[i].allocation = *id;
    } else {
      items[i].status = id.status();
    }
  }
  body_.clear();
  protocol::EncodeShmAllocReply(items, &body_);
  Send(out, h);
}

void ShmHandler::Reserve(const FrameHeader& h, std::span<const std::byte> body,
                         OutputQueue* out) {
  Result<uint64_t> bytes = protocol::DecodeShmReserveRequest(body);
  Result<protocol::ShmReservation> reserved =
      bytes.ok() ? session_->Reserve(*bytes) : Result<protocol::ShmReservation>(bytes.status());
  if (!reserved.ok()) {
    Reply(out, h, reserved.status());
    return;
  }
  body_.clear();
  protocol::EncodeShmReserveReply(*reserved, &body_);
  Send(out, h);
}

void ShmHandler::Put(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
  Result<std::vector<protocol::ShmPutItem>> items = protocol::DecodeShmPutRequest(
      body, ctx_->config->max_batch, ctx_->config->store.max_block_bytes);
  if (!items.ok()) {
    Reply(out, h, items.status());
    return;
  }
  std::vector<Status> statuses = session_->Put(*items);
  body_.clear();
  protocol::EncodeItemStatuses(statuses, &body_);
  Send(out, h);
}

void ShmHandler::IdOp(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
  Result<std::vector<uint64_t>> ids = protocol::DecodeShmIds(body, ctx_->config->max_batch);
  if (!ids.ok()) {
    Reply(out, h, ids.status());
    return;
  }
  std::vector<Status> statuses;
  statuses.reserve(ids->size());
  for (uint64_t id : *ids) {
    switch (static_cast<Opcode>(h.opcode)) {
      case Opcode::kShmRelease: statuses.push_back(session_->Release(id)); break;
      case Opcode::kShmCommit: statuses.push_back(session_->Commit(id)); break;
      default: statuses.push_back(session_->Abort(id)); break;
    }
  }
  body_.clear();
  protocol::EncodeItemStatuses(statuses, &body_);
  Send(out, h);
}

}  // namespace kvtier::server
