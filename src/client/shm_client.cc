// ShmClient (include/kvtier/shm_client.h): the calls of the shared-memory fast path, on the
// connection of src/client/shm_connection.h.

#include "kvtier/shm_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "src/client/shm_connection.h"
#include "src/common/copy.h"
#include "src/protocol/messages.h"
#include "src/protocol/shm_messages.h"

namespace kvtier {

// ---- ShmBlocks ----

ShmBlocks::ShmBlocks(ShmBlocks&& other) noexcept { *this = std::move(other); }

ShmBlocks& ShmBlocks::operator=(ShmBlocks&& other) noexcept {
  if (this != &other) {
    Release();
    conn_ = std::move(other.conn_);
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
  }
  return *this;
}

ShmBlocks::~ShmBlocks() { Release(); }

void ShmBlocks::Release() {
  std::vector<uint64_t> leases;
  for (Block& b : blocks_) {
    if (b.lease != 0) leases.push_back(std::exchange(b.lease, 0));
    b.pieces.clear();
  }
  if (!leases.empty() && conn_ != nullptr) conn_->SendIds(protocol::Opcode::kShmRelease, leases);
}

Result<size_t> ShmBlocks::CopyTo(size_t i, std::span<std::byte> out) const {
  const Block& b = blocks_[i];
  if (!b.status.ok()) return b.status;
  if (out.size() < b.size) {
    return Status::OutOfRange("buffer of " + std::to_string(out.size()) + " bytes for a block of " +
                              std::to_string(b.size));
  }
  size_t offset = 0;
  for (std::span<const std::byte> piece : b.pieces) {
    CopyBytes(out.data() + offset, piece.data(), piece.size());
    offset += piece.size();
  }
  // kvtierd closes the connection before a successor can reuse the lease's memory: a
  // connection still open after the copy means the copy read the block.
  if (b.lease != 0 && !Valid()) {
    return Status::Unavailable(
        "kvtierd closed the connection that held the lease (a restart or an upgrade): the "
        "copy may hold other bytes than the block's; read it again");
  }
  return b.size;
}

bool ShmBlocks::Valid() const { return conn_ == nullptr || !conn_->Lost(); }

// ---- ShmAllocation ----

ShmAllocation::ShmAllocation(ShmAllocation&& other) noexcept { *this = std::move(other); }

ShmAllocation& ShmAllocation::operator=(ShmAllocation&& other) noexcept {
  if (this != &other) {
    Abort();
    conn_ = std::move(other.conn_);
    id_ = std::exchange(other.id_, 0);
    size_ = std::exchange(other.size_, 0);
    pieces_ = std::move(other.pieces_);
    other.pieces_.clear();
  }
  return *this;
}

ShmAllocation::~ShmAllocation() { Abort(); }

void ShmAllocation::Abort() {
  if (id_ != 0 && conn_ != nullptr) {
    uint64_t id = std::exchange(id_, 0);
    conn_->SendIds(protocol::Opcode::kShmAbort, std::span(&id, 1));
  }
  id_ = 0;
  size_ = 0;
  pieces_.clear();
}

// ---- ShmBuffer ----

ShmBuffer::ShmBuffer(ShmBuffer&& other) noexcept { *this = std::move(other); }

ShmBuffer& ShmBuffer::operator=(ShmBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    conn_ = std::move(other.conn_);
    id_ = std::exchange(other.id_, 0);
    data_ = std::exchange(other.data_, {});
  }
  return *this;
}

ShmBuffer::~ShmBuffer() { Release(); }

bool ShmBuffer::Valid() const { return conn_ != nullptr && id_ != 0 && !conn_->Lost(); }

void ShmBuffer::Release() {
  if (id_ != 0 && conn_ != nullptr) {
    if (!data_.empty()) {
      conn_->RemoveReserved(static_cast<uint64_t>(data_.data() - conn_->staging()));
    }
    uint64_t id = std::exchange(id_, 0);
    conn_->SendIds(protocol::Opcode::kShmRelease, std::span(&id, 1));
  }
  id_ = 0;
  data_ = {};
}

namespace {

// Sends `body` as `opcode` on `conn` and decodes its reply: one item status for each of `count`
// items (InvalidArgument for another number; `name` names the request in it).
Result<std::vector<Status>> CallForStatuses(const std::shared_ptr<shm_internal::Connection>& conn,
                                            protocol::Opcode opcode, const std::string& body,
                                            size_t count, const char* name) {
  Result<std::vector<std::byte>> raw = conn->Call(opcode, body);
  if (!raw.ok()) return raw.status();
  Result<std::vector<Status>> statuses = protocol::DecodeItemStatuses(*raw);
  if (statuses.ok() && statuses->size() != count) {
    return Status::InvalidArgument(std::string(name) + " reply has the wrong number of items");
  }
  return statuses;
}

// One batch's SHM_PUT of values inside staging buffers, at `offsets`, on `conn`.
std::vector<Status> PutFromBuffers(const std::shared_ptr<shm_internal::Connection>& conn,
                                   std::span<const protocol::PutEntry> entries,
                                   std::span<const uint64_t> offsets) {
  std::string body;
  protocol::EncodeShmPutRequest(entries, offsets, &body);
  Result<std::vector<Status>> statuses =
      CallForStatuses(conn, protocol::Opcode::kShmPut, body, entries.size(), "SHM_PUT");
  if (!statuses.ok()) return std::vector<Status>(entries.size(), statuses.status());
  return std::move(statuses).value();
}

// One batch's put on `conn`: SHM_PUT when every value lies inside a staging buffer; else
// SHM_ALLOC, copies into the staging file and SHM_COMMIT.
std::vector<Status> PutOn(const std::shared_ptr<shm_internal::Connection>& conn,
                          std::span<const BlockWrite> batch) {
  std::vector<Status> out(batch.size());
  std::vector<protocol::PutEntry> entries;
  std::vector<uint64_t> offsets;
  entries.reserve(batch.size());
  offsets.reserve(batch.size());
  bool from_buffers = !batch.empty();
  for (const BlockWrite& w : batch) {
    entries.push_back({w.key, w.parent, w.value.size(), w.session, w.dtype});
    if (!from_buffers) continue;
    std::optional<uint64_t> offset = conn->ReservedOffset(w.value);
    from_buffers = offset.has_value();
    if (from_buffers) offsets.push_back(*offset);
  }
  if (from_buffers) return PutFromBuffers(conn, entries, offsets);
  std::string body;
  protocol::EncodePutDirectory(entries, &body);
  Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmAlloc, body);
  Result<std::vector<protocol::ShmAllocItem>> items =
      raw.ok() ? protocol::DecodeShmAllocReply(*raw)
               : Result<std::vector<protocol::ShmAllocItem>>(raw.status());
  if (items.ok() && items->size() != batch.size()) {
    items = Status::InvalidArgument("SHM_ALLOC reply has the wrong number of items");
  }
  if (!items.ok()) {
    std::fill(out.begin(), out.end(), items.status());
    return out;
  }
  std::vector<uint64_t> commit, abort;
  std::vector<size_t> commit_index;
  for (size_t i = 0; i < batch.size(); ++i) {
    const protocol::ShmAllocItem& item = (*items)[i];
    if (item.status.code() == StatusCode::kAlreadyExists) continue;  // Present: OK.
    if (!item.status.ok()) {
      out[i] = item.status;
      continue;
    }
    Status valid = protocol::CheckExtents(item.extents, batch[i].value.size(), conn->staging_size());
    if (!valid.ok()) {
      out[i] = Status::Internal("kvtierd sent a bad extent: " + std::string(valid.message()));
      abort.push_back(item.allocation);
      continue;
    }
    size_t offset = 0;
    for (const protocol::ShmExtent& e : item.extents) {
      std::memcpy(conn->staging() + e.offset, batch[i].value.data() + offset, e.length);
      offset += e.length;
    }
    commit.push_back(item.allocation);
    commit_index.push_back(i);
  }
  if (!abort.empty()) {
    body.clear();
    protocol::EncodeShmIds(abort, &body);
    // Best effort: the allocations end with the connection otherwise.
    Result<std::vector<std::byte>> ignored = conn->Call(protocol::Opcode::kShmAbort, body);
    (void)ignored;
  }
  if (commit.empty()) return out;
  body.clear();
  protocol::EncodeShmIds(commit, &body);
  Result<std::vector<Status>> statuses =
      CallForStatuses(conn, protocol::Opcode::kShmCommit, body, commit.size(), "SHM_COMMIT");
  for (size_t k = 0; k < commit.size(); ++k) {
    out[commit_index[k]] = statuses.ok() ? (*statuses)[k] : statuses.status();
  }
  return out;
}

}  // namespace

// ---- ShmClient ----

struct ShmClient::State {
  std::string tenant;  // As kvtierd named it at the first connection.
  Mutex mu;
  std::shared_ptr<shm_internal::Connection> conn ABSL_GUARDED_BY(mu);

  // A new connection in place of `lost`, trying for up to retry_timeout_ms while kvtierd
  // cannot be reached; the current one when another thread replaced `lost` already.
  Result<std::shared_ptr<shm_internal::Connection>> Reconnect(
      const ShmClientOptions& options, const std::shared_ptr<shm_internal::Connection>& lost)
      ABSL_LOCKS_EXCLUDED(mu) {
    MutexLock lock(&mu);
    if (conn != lost) return conn;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options.retry_timeout_ms);
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      Result<std::shared_ptr<shm_internal::Connection>> fresh =
          shm_internal::Connection::Open(options);
      if (fresh.ok()) {
        conn = *fresh;
        return conn;
      }
      // Only a kvtierd that is not (yet) there is worth waiting for.
      if (fresh.status().code() != StatusCode::kUnavailable ||
          std::chrono::steady_clock::now() + pause > deadline) {
        return fresh.status();
      }
      std::this_thread::sleep_for(pause);  // Backing off while kvtierd restarts.
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
  }
};

ShmClient::ShmClient(const ShmClientOptions& options,
                     std::shared_ptr<shm_internal::Connection> conn)
    : options_(options), state_(std::make_unique<State>()) {
  state_->tenant = conn->hello().tenant;
  MutexLock lock(&state_->mu);
  state_->conn = std::move(conn);
}

std::shared_ptr<shm_internal::Connection> ShmClient::Current() const {
  MutexLock lock(&state_->mu);
  return state_->conn;
}

template <typename Call>
auto ShmClient::WithReconnect(const Call& call) -> decltype(call(Current())) {
  std::shared_ptr<shm_internal::Connection> conn = Current();
  auto result = call(conn);
  if (options_.retry_timeout_ms == 0 || !conn->Broken()) return result;
  Result<std::shared_ptr<shm_internal::Connection>> fresh = state_->Reconnect(options_, conn);
  if (!fresh.ok()) return result;
  return call(*fresh);
}

Result<std::unique_ptr<ShmClient>> ShmClient::Connect(const ShmClientOptions& options) {
  Result<std::shared_ptr<shm_internal::Connection>> conn =
      shm_internal::Connection::Open(options);
  if (!conn.ok()) return conn.status();
  return std::unique_ptr<ShmClient>(new ShmClient(options, std::move(conn).value()));
}

ShmClient::~ShmClient() = default;

uint64_t ShmClient::arena_size() const { return Current()->arena_size(); }
uint32_t ShmClient::max_leases() const { return Current()->attach().max_leases; }
uint32_t ShmClient::max_allocations() const { return Current()->attach().max_allocations; }
uint64_t ShmClient::staging_size() const { return Current()->staging_size(); }
const std::string& ShmClient::tenant() const { return state_->tenant; }

Status ShmClient::Flush() {
  std::shared_ptr<shm_internal::Connection> conn = Current();
  Status s = conn->Flush();
  if (options_.retry_timeout_ms == 0 || !conn->Broken()) return s;
  // The kvtierd that had them dropped every lease and allocation with the connection.
  Result<std::shared_ptr<shm_internal::Connection>> fresh = state_->Reconnect(options_, conn);
  return fresh.ok() ? Status::OK() : fresh.status();
}

Result<ShmAllocation> ShmClient::Allocate(const BlockKey& key, size_t size,
                                          const PutOptions& options) {
  return WithReconnect([&](const std::shared_ptr<shm_internal::Connection>& conn)
                           -> Result<ShmAllocation> {
    protocol::PutEntry entry{key, options.parent, size, options.session, options.dtype};
    std::string body;
    protocol::EncodePutDirectory(std::span(&entry, 1), &body);
    Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmAlloc, body);
    if (!raw.ok()) return raw.status();
    Result<std::vector<protocol::ShmAllocItem>> items = protocol::DecodeShmAllocReply(*raw);
    if (!items.ok()) return items.status();
    if (items->size() != 1) {
      return Status::Internal("SHM_ALLOC reply has the wrong number of items");
    }
    const protocol::ShmAllocItem& item = (*items)[0];
    if (!item.status.ok()) return item.status;
    ShmAllocation a;
    a.conn_ = conn;
    a.id_ = item.allocation;  // Aborted by `a` on any error below.
    Status valid = protocol::CheckExtents(item.extents, size, conn->staging_size());
    if (!valid.ok()) {
      return Status::Internal("kvtierd sent a bad extent: " + std::string(valid.message()));
    }
    a.size_ = size;
    for (const protocol::ShmExtent& e : item.extents) {
      a.pieces_.emplace_back(conn->staging() + e.offset, e.length);
    }
    return a;
  });
}

Result<ShmBuffer> ShmClient::StagingBuffer(size_t bytes) {
  return WithReconnect([&](const std::shared_ptr<shm_internal::Connection>& conn)
                           -> Result<ShmBuffer> {
    std::string body;
    protocol::EncodeShmReserveRequest(bytes, &body);
    Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmReserve, body);
    if (!raw.ok()) return raw.status();
    Result<protocol::ShmReservation> reserved = protocol::DecodeShmReserveReply(*raw);
    if (!reserved.ok()) return reserved.status();
    ShmBuffer b;
    b.conn_ = conn;
    b.id_ = reserved->id;  // Released by `b` on any error below.
    const protocol::ShmExtent extent{reserved->offset, bytes};
    Status valid = protocol::CheckExtents(std::span(&extent, 1), bytes, conn->staging_size());
    if (!valid.ok()) {
      return Status::Internal("kvtierd sent a bad extent: " + std::string(valid.message()));
    }
    b.data_ = {conn->staging() + reserved->offset, bytes};
    conn->AddReserved(reserved->offset, bytes);
    return b;
  });
}

Status ShmClient::Commit(ShmAllocation allocation) {
  const std::shared_ptr<shm_internal::Connection> conn = allocation.conn_;
  const Status not_ours = Status::InvalidArgument("not a pending allocation of this client");
  if (!allocation.valid() || conn == nullptr) return not_ours;
  const Status lost = Status::Aborted(
      "kvtierd closed the connection that made the allocation (a restart or an upgrade): "
      "allocate again");
  if (conn != Current()) return conn->Lost() ? lost : not_ours;
  const uint64_t id = std::exchange(allocation.id_, 0);
  allocation.pieces_.clear();
  std::string body;
  protocol::EncodeShmIds(std::span(&id, 1), &body);
  Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmCommit, body);
  if (!raw.ok()) return conn->Broken() ? lost : raw.status();
  Result<std::vector<Status>> statuses = protocol::DecodeItemStatuses(*raw);
  if (!statuses.ok()) return statuses.status();
  if (statuses->size() != 1) {
    return Status::Internal("SHM_COMMIT reply has the wrong number of items");
  }
  return (*statuses)[0];
}

Result<ShmBlocks> ShmClient::Get(std::span<const BlockKey> keys) {
  return WithReconnect([&](const std::shared_ptr<shm_internal::Connection>& conn)
                           -> Result<ShmBlocks> {
    std::string body;
    protocol::EncodeKeyList(keys, &body);
    Result<std::vector<std::byte>> raw = conn->Call(protocol::Opcode::kShmGet, body);
    if (!raw.ok()) return raw.status();
    Result<protocol::ShmGetReply> reply = protocol::DecodeShmGetReply(*raw);
    ShmBlocks out;
    out.conn_ = conn;
    if (reply.ok() && reply->items.size() != keys.size()) {
      reply = Status::InvalidArgument("SHM_GET reply has " + std::to_string(reply->items.size()) +
                                      " items for " + std::to_string(keys.size()) + " keys");
    }
    if (!reply.ok()) return reply.status();
    out.blocks_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const protocol::ShmGetItem& item = reply->items[i];
      ShmBlocks::Block& b = out.blocks_[i];
      b.status = item.status;
      if (!item.status.ok()) continue;
      b.size = item.size;
      if (item.is_inline()) {
        b.owned.assign(reply->inline_values[i].begin(), reply->inline_values[i].end());
        b.pieces.emplace_back(b.owned.data(), b.owned.size());
        continue;
      }
      b.lease = item.lease;  // Released whatever happens next.
      Status valid = protocol::CheckExtents(item.extents, item.size, conn->arena_size());
      if (!valid.ok()) {
        b.status = Status::Internal("kvtierd sent a bad extent: " + std::string(valid.message()));
        continue;
      }
      for (const protocol::ShmExtent& e : item.extents) {
        b.pieces.emplace_back(conn->base() + e.offset, e.length);
        conn->Populate(b.pieces.back());
      }
    }
    return out;
  });
}

Result<size_t> ShmClient::Read(const BlockKey& key, std::span<std::byte> out) {
  return ReadMany(std::span(&key, 1), std::span(&out, 1))[0];
}

std::vector<Result<size_t>> ShmClient::ReadMany(std::span<const BlockKey> keys,
                                                std::span<const std::span<std::byte>> outs) {
  std::vector<Result<size_t>> got(keys.size(), Status::InvalidArgument("no buffer for the key"));
  const std::shared_ptr<shm_internal::Connection> conn = Current();  // One lock for both limits.
  const size_t step = std::max<uint32_t>(
      1, std::min(conn->attach().max_leases, std::max<uint32_t>(conn->hello().max_batch, 1)));
  for (size_t begin = 0; begin < keys.size() && begin < outs.size(); begin += step) {
    const size_t n = std::min({step, keys.size() - begin, outs.size() - begin});
    // Twice when kvtierd closed the connection holding the leases meanwhile: the client
    // reconnects for the second (or fails, with retry_timeout_ms = 0).
    for (int attempt = 0; attempt < 2; ++attempt) {
      Result<ShmBlocks> blocks = Get(keys.subspan(begin, n));
      for (size_t j = 0; j < n; ++j) {
        got[begin + j] = blocks.ok() ? blocks->CopyTo(j, outs[begin + j])
                                     : Result<size_t>(blocks.status());
      }  // The leases end when `blocks` goes.
      if (!blocks.ok() || blocks->Valid()) break;
    }
  }
  return got;
}

Status ShmClient::Put(const BlockKey& key, std::span<const std::byte> value,
                      const PutOptions& options) {
  BlockWrite w{key, value, options.parent, options.session, options.dtype};
  return PutMany(std::span(&w, 1))[0];
}

std::vector<Status> ShmClient::PutMany(std::span<const BlockWrite> writes) {
  std::vector<Status> out(writes.size());
  const std::shared_ptr<shm_internal::Connection> first = Current();
  const size_t chunk = std::max<size_t>(
      1, std::min<size_t>(first->hello().max_batch, first->attach().max_allocations));
  for (size_t start = 0; start < writes.size(); start += chunk) {
    std::span<const BlockWrite> batch =
        writes.subspan(start, std::min(chunk, writes.size() - start));
    std::vector<Status> done = WithReconnect(
        [&](const std::shared_ptr<shm_internal::Connection>& conn) { return PutOn(conn, batch); });
    std::move(done.begin(), done.end(), out.begin() + static_cast<ptrdiff_t>(start));
  }
  return out;
}

}  // namespace kvtier
