#include "kvtier/client.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "src/client/client_connection.h"
#include "src/client/get_into.h"
#include "src/protocol/messages.h"

namespace kvtier {
namespace {

using client::ClientConnection;
using client::Reply;
using protocol::Opcode;

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

template <typename T>
std::future<T> Ready(T value) {
  std::promise<T> p;
  p.set_value(std::move(value));
  return p.get_future();
}

std::vector<Status> Repeat(const Status& s, size_t n) { return std::vector<Status>(n, s); }

BlockValues FailedValues(const Status& s, size_t n) {
  BlockValues v;
  for (size_t i = 0; i < n; ++i) v.values.emplace_back(s);
  return v;
}

Status StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}

bool Unavailable(const Status& s) { return s.code() == StatusCode::kUnavailable; }

// Decides whether a call that failed with Unavailable is made again: within the retry time, after
// a backoff that doubles up to 1 s.
class Retrier {
 public:
  explicit Retrier(const ClientOptions& options)
      : enabled_(options.retry_timeout_ms > 0),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(options.retry_timeout_ms)),
        backoff_(std::max<uint32_t>(1, options.retry_backoff_ms)) {}

  // True, after the backoff, when another attempt is due.
  bool Again() {
    auto now = std::chrono::steady_clock::now();
    if (!enabled_ || now >= deadline_) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(backoff_, deadline_ - now));
    backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(1000));
    return true;
  }

 private:
  const bool enabled_;
  const std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds backoff_;
};

// Values per PUT_MANY request. The server receives a request into one buffer: one of 64 MiB
// (max_frame_bytes) would be a fresh mapping, page-faulted in, for every request, while one
// of a few MiB is reused from the heap. Pipelined requests keep the link busy all the same.
constexpr uint64_t kMaxPutRequestBytes = 8 << 20;

// Splits [0, n) into runs of at most `limit`.
std::vector<std::pair<size_t, size_t>> Chunks(size_t n, size_t limit) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < n; i += limit) out.emplace_back(i, std::min(n, i + limit));
  return out;
}

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(ClientOptions options) : options_(std::move(options)) {}

  Status Init() {
    MutexLock lock(&mu_);
    size_t n = std::max<uint32_t>(1, options_.connections);
    for (size_t i = 0; i < n; ++i) {
      Result<std::unique_ptr<ClientConnection>> c = ClientConnection::Open(options_);
      if (!c.ok()) return c.status();
      conns_.push_back(std::shared_ptr<ClientConnection>(std::move(c).value()));
    }
    info_ = conns_[0]->info();
    return Status::OK();
  }

  const ServerInfo& server_info() const override { return info_; }

  Status Ping() override {
    return Retrying([&] { return PingOnce(); });
  }

  Status PingOnce() {
    auto promise = std::make_shared<std::promise<Status>>();
    std::future<Status> f = promise->get_future();
    Send(Opcode::kPing, {}, [promise](Reply r) {
      promise->set_value(r.status.ok() ? protocol::DecodeResponseStatus(r.bytes()) : r.status);
    });
    return f.get();
  }

  Status Put(const BlockKey& key, std::span<const std::byte> value,
             const PutOptions& options) override {
    BlockWrite w{key,           value,           options.parent, options.session,
                 options.dtype, options.engine_hash, options.role};
    return PutMany(std::span(&w, 1))[0];
  }

  std::vector<Status> PutMany(std::span<const BlockWrite> writes) override {
    return RetryingItems<Status>(writes.size(), [&](std::span<const size_t> todo) {
      std::vector<BlockWrite> subset;
      subset.reserve(todo.size());
      for (size_t i : todo) subset.push_back(writes[i]);
      return PutManyOnce(subset);
    });
  }

  std::vector<Status> PutManyOnce(std::span<const BlockWrite> writes) {
    // Requests fill up to max_batch entries and kMaxPutRequestBytes (or max_frame_bytes, if
    // lower; a larger value goes alone), and are all sent before the first reply is awaited.
    const uint64_t limit = std::min<uint64_t>(info_.max_frame_bytes, kMaxPutRequestBytes);
    std::vector<std::future<std::vector<Status>>> futures;
    size_t begin = 0;
    while (begin < writes.size()) {
      size_t end = begin;
      uint64_t bytes = 4;
      while (end < writes.size() && end - begin < info_.max_batch &&
             (end == begin ||
              bytes + protocol::kMaxPutEntryBytes + writes[end].value.size() <= limit)) {
        bytes += protocol::kMaxPutEntryBytes + writes[end].value.size();
        ++end;
      }
      futures.push_back(PutManyAsync(writes.subspan(begin, end - begin)));
      begin = end;
    }
    std::vector<Status> out;
    out.reserve(writes.size());
    for (auto& f : futures) {
      for (Status& s : f.get()) out.push_back(std::move(s));
    }
    return out;
  }

  std::future<std::vector<Status>> PutManyAsync(std::span<const BlockWrite> writes) override {
    if (writes.size() > info_.max_batch) {
      return Ready(Repeat(Status::InvalidArgument("batch exceeds the server's max_batch"), writes.size()));
    }
    std::string dir;
    std::vector<std::span<const std::byte>> pieces = PutPieces(writes, &dir);
    size_t n = writes.size();
    auto promise = std::make_shared<std::promise<std::vector<Status>>>();
    std::future<std::vector<Status>> f = promise->get_future();
    Send(Opcode::kPutMany, pieces, [promise, n](Reply r) {
      promise->set_value(ItemStatuses(r, n));
    });
    return f;
  }

  Status PutAtomic(std::span<const BlockWrite> writes) override {
    if (writes.size() > info_.max_batch) {
      return Status::InvalidArgument("an atomic put of " + std::to_string(writes.size()) +
                                     " blocks exceeds the server's max_batch (" +
                                     std::to_string(info_.max_batch) + ")");
    }
    std::string dir;
    std::vector<std::span<const std::byte>> pieces = PutPieces(writes, &dir);
    uint64_t bytes = 0;
    for (std::span<const std::byte> p : pieces) bytes += p.size();
    if (bytes > info_.max_frame_bytes) {
      return Status::InvalidArgument("an atomic put of " + std::to_string(bytes) +
                                     " bytes exceeds the server's max_frame_bytes (" +
                                     std::to_string(info_.max_frame_bytes) + ")");
    }
    return Retrying([&] { return StatusReply(Wait(Opcode::kPutAtomic, pieces)); });
  }

  Result<ResumeMatch> LookupResume(std::span<const BlockKey> keys,
                                   const ResumeQuery& query) override {
    protocol::ResumeRequest req{query, {keys.begin(), keys.end()}};
    std::string body;
    protocol::EncodeResumeRequest(req, &body);
    std::span<const std::byte> piece = AsBytes(body);
    return Retrying([&]() -> Result<ResumeMatch> {
      Reply r = Wait(Opcode::kLookupResume, std::span(&piece, 1));
      if (!r.status.ok()) return r.status;
      return protocol::DecodeResumeMatch(r.bytes());
    });
  }

  Result<std::vector<std::byte>> Get(const BlockKey& key) override {
    BlockValues v = GetMany(std::span(&key, 1));
    if (!v.values[0].ok()) return v.values[0].status();
    std::span<const std::byte> bytes = *v.values[0];
    return std::vector<std::byte>(bytes.begin(), bytes.end());
  }

  BlockValues GetMany(std::span<const BlockKey> keys) override {
    BlockValues out;
    out.values = RetryingItems<Result<std::span<const std::byte>>>(keys.size(), [&](std::span<const size_t> todo) {
      std::vector<BlockKey> subset;
      subset.reserve(todo.size());
      for (size_t i : todo) subset.push_back(keys[i]);
      BlockValues part = GetManyOnce(subset);
      for (auto& b : part.buffers) out.buffers.push_back(std::move(b));
      return std::move(part.values);
    });
    return out;
  }

  std::vector<Result<size_t>> GetManyInto(std::span<const BlockKey> keys,
                                          std::span<const std::span<std::byte>> outs) override {
    if (outs.size() != keys.size()) {
      return std::vector<Result<size_t>>(keys.size(), Status::InvalidArgument("one buffer per key is needed"));
    }
    return RetryingItems<Result<size_t>>(keys.size(), [&](std::span<const size_t> todo) {
      std::vector<BlockKey> k;
      std::vector<std::span<std::byte>> o;
      for (size_t i : todo) {
        k.push_back(keys[i]);
        o.push_back(outs[i]);
      }
      return GetManyIntoOnce(k, o);
    });
  }

  BlockValues GetManyOnce(std::span<const BlockKey> keys) {
    std::vector<std::future<BlockValues>> futures;
    for (auto [b, e] : Chunks(keys.size(), info_.max_batch)) {
      futures.push_back(GetManyAsync(keys.subspan(b, e - b)));
    }
    BlockValues out;
    for (auto& f : futures) Append(f.get(), &out);
    // Values that did not fit in a reply come back ResourceExhausted: ask for them again until
    // a round brings none of them (a value larger than any reply can hold is then reported).
    for (;;) {
      std::vector<size_t> retry;
      for (size_t i = 0; i < out.values.size() && retry.size() < info_.max_batch; ++i) {
        if (!out.values[i].ok() && out.values[i].status().code() == StatusCode::kResourceExhausted) {
          retry.push_back(i);
        }
      }
      if (retry.empty()) break;
      std::vector<BlockKey> again;
      for (size_t i : retry) again.push_back(keys[i]);
      BlockValues more = GetManyAsync(again).get();
      bool progress = false;
      for (size_t j = 0; j < more.values.size(); ++j) {
        progress |= more.values[j].ok() ||
                    more.values[j].status().code() != StatusCode::kResourceExhausted;
        out.values[retry[j]] = std::move(more.values[j]);
      }
      for (auto& b : more.buffers) out.buffers.push_back(std::move(b));
      if (!progress) break;
    }
    return out;
  }

  std::vector<Result<size_t>> GetManyIntoOnce(std::span<const BlockKey> keys,
                                              std::span<const std::span<std::byte>> outs) {
    // Requests are cut so that the buffers of one fit in a reply, and are all sent before the
    // first reply is awaited.
    constexpr uint64_t kMaxItemBytes = 3 + 8;
    std::vector<std::future<std::vector<Result<size_t>>>> futures;
    size_t begin = 0;
    while (begin < keys.size()) {
      size_t end = begin;
      uint64_t bytes = 64;
      while (end < keys.size() && end - begin < info_.max_batch &&
             (end == begin || bytes + kMaxItemBytes + outs[end].size() <= info_.max_frame_bytes)) {
        bytes += kMaxItemBytes + outs[end].size();
        ++end;
      }
      futures.push_back(GetManyIntoAsync(keys.subspan(begin, end - begin), outs.subspan(begin, end - begin)));
      begin = end;
    }
    std::vector<Result<size_t>> out;
    out.reserve(keys.size());
    for (auto& f : futures) {
      for (Result<size_t>& r : f.get()) out.push_back(std::move(r));
    }
    // A value that did not fit in its reply (the buffers under-estimated it) is asked for
    // again on its own, once.
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].ok() && out[i].status().code() == StatusCode::kResourceExhausted) {
        out[i] = std::move(GetManyIntoAsync(keys.subspan(i, 1), outs.subspan(i, 1)).get()[0]);
      }
    }
    return out;
  }

  std::future<std::vector<Result<size_t>>> GetManyIntoAsync(std::span<const BlockKey> keys,
                                                           std::span<const std::span<std::byte>> outs) {
    struct Call {
      std::vector<std::span<std::byte>> outs;
      std::vector<Result<size_t>> results;
      std::promise<std::vector<Result<size_t>>> promise;
    };
    auto call = std::make_shared<Call>();
    call->outs.assign(outs.begin(), outs.end());
    std::future<std::vector<Result<size_t>>> f = call->promise.get_future();
    std::string body;
    protocol::EncodeKeyList(keys, &body);
    std::span<const std::byte> piece = AsBytes(body);
    size_t n = keys.size();
    Send(
        Opcode::kGetMany, std::span(&piece, 1),
        [call, n](Reply r) {
          if (!r.status.ok()) call->results.assign(n, Result<size_t>(r.status));
          call->promise.set_value(std::move(call->results));
        },
        [call](size_t length, const client::BodyRead& read) {
          return client::ReadGetManyInto(length, read, call->outs, &call->results);
        });
    return f;
  }

  std::future<BlockValues> GetManyAsync(std::span<const BlockKey> keys) override {
    if (keys.size() > info_.max_batch) {
      return Ready(FailedValues(Status::InvalidArgument("batch exceeds the server's max_batch"), keys.size()));
    }
    std::string body;
    protocol::EncodeKeyList(keys, &body);
    size_t n = keys.size();
    auto promise = std::make_shared<std::promise<BlockValues>>();
    std::future<BlockValues> f = promise->get_future();
    std::span<const std::byte> piece = AsBytes(body);
    Send(Opcode::kGetMany, std::span(&piece, 1), [promise, n](Reply r) {
      Status s = r.status.ok() ? protocol::DecodeResponseStatus(r.bytes()) : r.status;
      if (!s.ok()) {
        promise->set_value(FailedValues(s, n));
        return;
      }
      auto items = protocol::DecodeGetMany(r.bytes());
      if (!items.ok() || items->size() != n) {
        promise->set_value(FailedValues(
            items.ok() ? Status::Internal("GET_MANY reply has the wrong item count") : items.status(), n));
        return;
      }
      BlockValues v;
      v.values = std::move(items).value();
      v.buffers.push_back(std::move(r.body));
      promise->set_value(std::move(v));
    });
    return f;
  }

  Result<PrefixMatch> LookupPrefix(std::span<const BlockKey> keys) override {
    return Retrying([&] { return LookupPrefixOnce(keys); });
  }

  Result<PrefixMatch> LookupPrefixOnce(std::span<const BlockKey> keys) {
    PrefixMatch total;
    for (auto [b, e] : Chunks(keys.size(), info_.max_batch)) {
      Result<PrefixMatch> m = LookupPrefixAsync(keys.subspan(b, e - b)).get();
      if (!m.ok()) return m.status();
      total.num_blocks += m->num_blocks;
      total.tiers.insert(total.tiers.end(), m->tiers.begin(), m->tiers.end());
      if (m->num_blocks < e - b) break;
    }
    return total;
  }

  std::future<Result<PrefixMatch>> LookupPrefixAsync(std::span<const BlockKey> keys) override {
    if (keys.size() > info_.max_batch) {
      return Ready(Result<PrefixMatch>(Status::InvalidArgument("batch exceeds the server's max_batch")));
    }
    std::string body;
    protocol::EncodeKeyList(keys, &body);
    auto promise = std::make_shared<std::promise<Result<PrefixMatch>>>();
    std::future<Result<PrefixMatch>> f = promise->get_future();
    std::span<const std::byte> piece = AsBytes(body);
    Send(Opcode::kLookupPrefix, std::span(&piece, 1), [promise](Reply r) {
      if (!r.status.ok()) {
        promise->set_value(Result<PrefixMatch>(r.status));
        return;
      }
      promise->set_value(protocol::DecodePrefixMatch(r.bytes()));
    });
    return f;
  }

  Result<std::vector<std::optional<TierLevel>>> Exists(std::span<const BlockKey> keys) override {
    return Retrying([&] { return ExistsOnce(keys); });
  }

  Result<std::vector<std::optional<TierLevel>>> ExistsOnce(std::span<const BlockKey> keys) {
    std::vector<std::optional<TierLevel>> out;
    for (auto [b, e] : Chunks(keys.size(), info_.max_batch)) {
      Result<Reply> r = Call(Opcode::kExists, keys.subspan(b, e - b));
      if (!r.ok()) return r.status();
      Result<std::vector<uint8_t>> tiers = protocol::DecodeExists(r->bytes());
      if (!tiers.ok()) return tiers.status();
      if (tiers->size() != e - b) return Status::Internal("EXISTS reply has the wrong item count");
      for (uint8_t t : *tiers) {
        out.push_back(t == 0 ? std::nullopt : std::optional<TierLevel>(static_cast<TierLevel>(t)));
      }
    }
    return out;
  }

  Status Delete(const BlockKey& key) override { return DeleteMany(std::span(&key, 1))[0]; }

  std::vector<Status> DeleteMany(std::span<const BlockKey> keys) override {
    return RetryingItems<Status>(keys.size(), [&](std::span<const size_t> todo) {
      std::vector<BlockKey> subset;
      subset.reserve(todo.size());
      for (size_t i : todo) subset.push_back(keys[i]);
      return DeleteManyOnce(subset);
    });
  }

  std::vector<Status> DeleteManyOnce(std::span<const BlockKey> keys) {
    std::vector<Status> out;
    for (auto [b, e] : Chunks(keys.size(), info_.max_batch)) {
      protocol::DeleteRequest req;
      req.keys.assign(keys.begin() + static_cast<ptrdiff_t>(b), keys.begin() + static_cast<ptrdiff_t>(e));
      std::string body;
      protocol::EncodeDelete(req, &body);
      std::span<const std::byte> piece = AsBytes(body);
      std::vector<Status> part = ItemStatuses(Wait(Opcode::kDelete, std::span(&piece, 1)), e - b);
      for (Status& s : part) out.push_back(std::move(s));
    }
    return out;
  }

  Result<DeletionReport> DeleteSession(SessionId session) override {
    std::string body;
    protocol::EncodeDeleteSession(session, &body);
    std::span<const std::byte> piece = AsBytes(body);
    return Retrying([&] { return DeletionReply(Wait(Opcode::kDeleteSession, std::span(&piece, 1))); });
  }

  Status HintSession(SessionId session, const Store::SessionHint& hint) override {
    std::string body;
    protocol::EncodeHintSession({session, hint}, &body);
    std::span<const std::byte> piece = AsBytes(body);
    return Retrying([&] {
      if ((info_.features & protocol::kFeatureHints) == 0) {
        return Status::Unimplemented("the server does not take session hints (kFeatureHints)");
      }
      return StatusReply(Wait(Opcode::kHintSession, std::span(&piece, 1)));
    });
  }

  Result<DeletionReport> DeleteAllBlocks() override {
    return Retrying([&] { return DeletionReply(Wait(Opcode::kDeleteTenant, {})); });
  }

  Result<uint64_t> Flush() override {
    return Retrying([&]() -> Result<uint64_t> {
      Reply r = Wait(Opcode::kFlush, {});
      if (!r.status.ok()) return r.status;
      return protocol::DecodeFlushReply(r.bytes());
    });
  }

  std::vector<Status> PinMany(std::span<const BlockKey> keys) override {
    return KeyStatuses(Opcode::kPin, keys);
  }
  std::vector<Status> UnpinMany(std::span<const BlockKey> keys) override {
    return KeyStatuses(Opcode::kUnpin, keys);
  }

  Status Prefetch(std::span<const BlockKey> keys) override {
    return Retrying([&] { return PrefetchOnce(keys); });
  }

  Status PrefetchOnce(std::span<const BlockKey> keys) {
    for (auto [b, e] : Chunks(keys.size(), info_.max_batch)) {
      Result<Reply> r = Call(Opcode::kPrefetch, keys.subspan(b, e - b));
      if (!r.ok()) return r.status();
    }
    return Status::OK();
  }

  Result<TenantStats> Stats() override {
    return Retrying([&] { return StatsOnce(); });
  }

  Result<TenantStats> StatsOnce() {
    Reply r = Wait(Opcode::kStats, {});
    if (!r.status.ok()) return r.status;
    Result<protocol::StatsReply> reply = protocol::DecodeStats(r.bytes());
    if (!reply.ok()) return reply.status();
    TenantStats t;
    t.name = reply->tenant;
    for (const protocol::NamedCounter& c : reply->counters) {
      for (const auto& [name, field] : TenantStats::kCounters) {
        if (c.name == name) t.*field = c.value;
      }
    }
    return t;
  }

 private:
  // Calls `once` again while it fails with Unavailable, within the retry time.
  template <typename F>
  std::invoke_result_t<F> Retrying(F once) {
    Retrier retrier(options_);
    for (;;) {
      auto result = once();
      if (!Unavailable(StatusOf(result)) || !retrier.Again()) return result;
    }
  }

  // For batches: `once(todo)` returns one result per index of `todo`; the items that failed
  // with Unavailable are tried again, within the retry time.
  template <typename R, typename F>
  std::vector<R> RetryingItems(size_t n, F once) {
    std::vector<R> out(n, R(Status::Internal("not attempted")));
    std::vector<size_t> todo(n);
    for (size_t i = 0; i < n; ++i) todo[i] = i;
    Retrier retrier(options_);
    while (!todo.empty()) {
      std::vector<R> results = once(std::span<const size_t>(todo));
      std::vector<size_t> again;
      for (size_t j = 0; j < todo.size(); ++j) {
        if (Unavailable(StatusOf(results[j]))) again.push_back(todo[j]);
        out[todo[j]] = std::move(results[j]);
      }
      if (again.empty() || !retrier.Again()) break;
      todo = std::move(again);
    }
    return out;
  }

  static std::vector<Status> ItemStatuses(const Reply& r, size_t n) {
    if (!r.status.ok()) return Repeat(r.status, n);
    Result<std::vector<Status>> statuses = protocol::DecodeItemStatuses(r.bytes());
    if (!statuses.ok()) return Repeat(statuses.status(), n);
    if (statuses->size() != n) return Repeat(Status::Internal("reply has the wrong item count"), n);
    return std::move(statuses).value();
  }

  static Status StatusReply(const Reply& r) {
    return r.status.ok() ? protocol::DecodeResponseStatus(r.bytes()) : r.status;
  }

  // A PUT_MANY / PUT_ATOMIC body: the directory, encoded into *dir, then the values.
  static std::vector<std::span<const std::byte>> PutPieces(std::span<const BlockWrite> writes,
                                                           std::string* dir) {
    std::vector<protocol::PutEntry> entries;
    entries.reserve(writes.size());
    for (const BlockWrite& w : writes) {
      entries.push_back(
          {w.key, w.parent, w.value.size(), w.session, w.dtype, w.engine_hash, w.role});
    }
    protocol::EncodePutDirectory(entries, dir);
    std::vector<std::span<const std::byte>> pieces;
    pieces.reserve(writes.size() + 1);
    pieces.push_back(AsBytes(*dir));
    for (const BlockWrite& w : writes) pieces.push_back(w.value);
    return pieces;
  }

  static Result<DeletionReport> DeletionReply(const Reply& r) {
    if (!r.status.ok()) return r.status;
    return protocol::DecodeDeletionReport(r.bytes());
  }

  static void Append(BlockValues part, BlockValues* out) {
    for (auto& v : part.values) out->values.push_back(std::move(v));
    for (auto& b : part.buffers) out->buffers.push_back(std::move(b));
  }

  std::vector<Status> KeyStatuses(Opcode op, std::span<const BlockKey> keys) {
    std::vector<Status> out;
    for (auto [b, e] : Chunks(keys.size(), info_.max_batch)) {
      std::string body;
      protocol::EncodeKeyList(keys.subspan(b, e - b), &body);
      std::span<const std::byte> piece = AsBytes(body);
      for (Status& s : ItemStatuses(Wait(op, std::span(&piece, 1)), e - b)) out.push_back(std::move(s));
    }
    return out;
  }

  // A key-list request whose reply must be OK; returns the reply.
  Result<Reply> Call(Opcode op, std::span<const BlockKey> keys) {
    std::string body;
    protocol::EncodeKeyList(keys, &body);
    std::span<const std::byte> piece = AsBytes(body);
    Reply r = Wait(op, std::span(&piece, 1));
    if (!r.status.ok()) return r.status;
    Status s = protocol::DecodeResponseStatus(r.bytes());
    if (!s.ok()) return s;
    return r;
  }

  Reply Wait(Opcode op, std::span<const std::span<const std::byte>> pieces) {
    auto promise = std::make_shared<std::promise<Reply>>();
    std::future<Reply> f = promise->get_future();
    Send(op, pieces, [promise](Reply r) { promise->set_value(std::move(r)); });
    return f.get();
  }

  // Sends on the next connection, replacing it first if it broke.
  void Send(Opcode op, std::span<const std::span<const std::byte>> pieces,
            ClientConnection::ReplyHandler on_reply, ClientConnection::BodySink sink = nullptr) {
    std::shared_ptr<ClientConnection> conn;
    Status reconnect;
    {
      MutexLock lock(&mu_);
      size_t i = next_++ % conns_.size();
      if (conns_[i]->broken()) {
        Result<std::unique_ptr<ClientConnection>> fresh = ClientConnection::Open(options_);
        if (fresh.ok()) {
          conns_[i] = std::shared_ptr<ClientConnection>(std::move(fresh).value());
        } else {
          reconnect = fresh.status();
        }
      }
      conn = conns_[i];
    }
    if (!reconnect.ok()) {
      on_reply({reconnect, nullptr, 0});
      return;
    }
    conn->Send(op, pieces, std::move(on_reply), std::move(sink));
  }

  const ClientOptions options_;
  ServerInfo info_;
  Mutex mu_;
  std::vector<std::shared_ptr<ClientConnection>> conns_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto client = std::make_unique<ClientImpl>(options);
  KVTIER_RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<Client>(std::move(client));
}

}  // namespace kvtier
