// The native protocol on the server side (docs/protocol.md).

#include <optional>
#include <string>
#include <vector>

#include "src/protocol/messages.h"
#include "src/protocol/wire.h"
#include "src/server/handler.h"
#include "src/server/put_in_place.h"
#include "src/server/shm_handler.h"

namespace kvtier::server {
namespace {

using protocol::DecodedFrame;
using protocol::FrameHeader;
using protocol::Opcode;
using Action = ProtocolHandler::Outcome::Action;

constexpr std::string_view kServerName = "kvtierd 0.1.0";
// A PUT_MANY whose values average at least this much is received into G2 in place; smaller
// values cost fewer reads through the input buffer than one read each.
constexpr size_t kInPlaceMinValueBytes = 64 << 10;

Op OpFor(uint8_t opcode) {
  switch (static_cast<Opcode>(opcode)) {
    case Opcode::kHello: return Op::kHello;
    case Opcode::kAuth: return Op::kAuth;
    case Opcode::kPing: return Op::kPing;
    case Opcode::kLookupPrefix:
    case Opcode::kLookupResume: return Op::kLookupPrefix;
    case Opcode::kGetMany: return Op::kGet;
    case Opcode::kPutMany:
    case Opcode::kPutAtomic: return Op::kPut;
    case Opcode::kExists: return Op::kExists;
    case Opcode::kDelete: return Op::kDelete;
    case Opcode::kPin: return Op::kPin;
    case Opcode::kUnpin: return Op::kUnpin;
    case Opcode::kPrefetch: return Op::kPrefetch;
    case Opcode::kStats: return Op::kStats;
    case Opcode::kDeleteSession:
    case Opcode::kDeleteTenant: return Op::kDelete;
    case Opcode::kFlush: return Op::kPut;
    case Opcode::kHintSession: return Op::kAdmin;
    case Opcode::kShmGet: return Op::kGet;
    case Opcode::kShmAlloc:
    case Opcode::kShmCommit:
    case Opcode::kShmPut: return Op::kPut;
    case Opcode::kShmAttach:
    case Opcode::kShmRelease:
    case Opcode::kShmAbort:
    case Opcode::kShmReserve:
    case Opcode::kError: break;
  }
  return Op::kOther;
}

class NativeHandler final : public ProtocolHandler {
 public:
  NativeHandler(const ServerContext* ctx, PeerInfo peer)
      : ctx_(ctx), peer_(std::move(peer)), shm_(ctx, peer_.unix_socket) {}

  Proto proto() const override { return Proto::kNative; }

  Outcome HandleOne(std::span<std::byte> input, OutputQueue* out) override {
    DecodedFrame f = protocol::DecodeFrame(input, ctx_->max_frame_bytes);
    switch (f.state) {
      case DecodedFrame::State::kNeedMore:
        return NeedMore(f, input);
      case DecodedFrame::State::kError:
        ctx_->metrics->ProtocolError(Proto::kNative);
        Reply(out, static_cast<uint8_t>(Opcode::kError), f.header.request_id, f.error);
        return {Action::kClose, 0, 0};
      case DecodedFrame::State::kFrame:
        break;
    }
    whole_frame_ = false;
    bool keep_open = Handle(f.header, f.body, out);
    return {keep_open ? Action::kHandled : Action::kClose, f.frame_size, 0};
  }

  std::span<std::byte> PayloadTarget() override {
    PayloadTime::Scope busy(&put_time_);
    return put_->Target();
  }

  void PayloadFilled(OutputQueue* out) override {
    {
      PayloadTime::Scope busy(&put_time_);
      put_->Filled();
      if (!put_->done()) return;
      scratch_.clear();
      protocol::EncodeItemStatuses(put_->statuses(), &scratch_);
      SendFrame(out, static_cast<uint8_t>(Opcode::kPutMany), put_request_id_, scratch_);
      put_.reset();
    }
    put_time_.Record(ctx_->metrics, Proto::kNative, Op::kPut);
  }

  void OnIdleTimeout(OutputQueue* out) override {
    Reply(out, static_cast<uint8_t>(Opcode::kError), 0,
          Status::DeadlineExceeded("connection idle for longer than idle_timeout_seconds"));
  }

  void OnRequestTimeout(OutputQueue* out) override {
    Reply(out, static_cast<uint8_t>(Opcode::kError), 0,
          Status::DeadlineExceeded("request not received whole within request_timeout_seconds "
                                   "(and a second per min_request_rate bytes)"));
  }

 private:
  // Returns false when the connection must close after the reply.
  bool Handle(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    RequestTimer timer(ctx_->metrics, Proto::kNative, OpFor(h.opcode));
    if (h.flags & protocol::kFlagResponse) {
      ctx_->metrics->ProtocolError(Proto::kNative);
      Reply(out, h.opcode, h.request_id,
            Status::InvalidArgument("clients must not send response frames"));
      return true;
    }
    if (!protocol::IsRequestOpcode(h.opcode)) {
      ctx_->metrics->ProtocolError(Proto::kNative);
      Reply(out, h.opcode, h.request_id,
            Status::Unimplemented("unknown opcode " + std::to_string(h.opcode)));
      return true;
    }
    auto op = static_cast<Opcode>(h.opcode);
    if (!principal_ && op != Opcode::kHello) {
      ctx_->metrics->ProtocolError(Proto::kNative);
      Reply(out, h.opcode, h.request_id,
            Status::FailedPrecondition("the first request on a connection must be HELLO"));
      return false;
    }
    if (protocol::IsShmOpcode(h.opcode)) {
      shm_.Handle(h, body, principal_->tenant, out);
      return true;
    }
    switch (op) {
      case Opcode::kHello: return Hello(h, body, out);
      case Opcode::kAuth: return Auth(h, body, out);
      case Opcode::kPing:
        Reply(out, h.opcode, h.request_id, Status::OK());
        return true;
      case Opcode::kGetMany: GetMany(h, body, out); return true;
      case Opcode::kPutMany: PutMany(h, body, out); return true;
      case Opcode::kPutAtomic: PutAtomic(h, body, out); return true;
      case Opcode::kLookupResume: LookupResume(h, body, out); return true;
      case Opcode::kDelete: Delete(h, body, out); return true;
      case Opcode::kStats: Stats(h, out); return true;
      case Opcode::kDeleteSession:
      case Opcode::kDeleteTenant:
        DeleteScoped(h, body, out);
        return true;
      case Opcode::kFlush: Flush(h, body, out); return true;
      case Opcode::kHintSession: HintSession(h, body, out); return true;
      case Opcode::kLookupPrefix:
      case Opcode::kExists:
      case Opcode::kPin:
      case Opcode::kUnpin:
      case Opcode::kPrefetch:
        KeyListOp(h, body, out);
        return true;
      case Opcode::kShmAttach:
      case Opcode::kShmGet:
      case Opcode::kShmRelease:
      case Opcode::kShmAlloc:
      case Opcode::kShmCommit:
      case Opcode::kShmAbort:
      case Opcode::kShmReserve:
      case Opcode::kShmPut:
      case Opcode::kError: break;
    }
    return true;
  }

  // The front of the input holds an incomplete frame. A PUT_MANY of large values is taken as
  // soon as its directory is in: its values are then received into their G2 allocations
  // (InPlacePut). A directory that does not decode is left to the whole frame, which answers
  // it as before.
  Outcome NeedMore(const DecodedFrame& f, std::span<const std::byte> input) {
    const Outcome wait{Action::kNeedMore, 0, f.frame_size};
    const FrameHeader& h = f.header;
    if (whole_frame_ || f.frame_size == 0 || !principal_ ||
        h.opcode != static_cast<uint8_t>(Opcode::kPutMany) ||
        (h.flags & protocol::kFlagResponse) || h.body_length < kInPlaceMinValueBytes ||
        !ctx_->store->shared_arena(principal_->tenant)) {
      return wait;
    }
    std::span<const std::byte> body = input.subspan(protocol::kHeaderSize);
    if (body.size() < 4) return {Action::kNeedMore, 0, protocol::kHeaderSize + 4};
    const uint64_t count = protocol::BodyReader(body).U32();
    const size_t directory = static_cast<size_t>(
        std::min<uint64_t>(h.body_length, 4 + count * protocol::kMaxPutEntryBytes));
    if (body.size() < directory) return {Action::kNeedMore, 0, protocol::kHeaderSize + directory};
    // From here a refusal holds for the whole frame: it is not decoded again at each read.
    auto refuse = [&] {
      whole_frame_ = true;
      return wait;
    };
    Result<protocol::PutManyHead> head = protocol::DecodePutManyHead(
        body, h.body_length, ctx_->config->max_batch, ctx_->config->store.max_block_bytes);
    if (!head.ok() || head->entries.empty()) return refuse();
    const size_t values = h.body_length - head->directory_bytes;
    if (values / head->entries.size() < kInPlaceMinValueBytes) return refuse();
    for (const protocol::PutEntry& e : head->entries) {
      // Put's error, answered from the whole frame.
      if (e.role == BlockRole::kState && !e.parent) return refuse();
    }
    put_.emplace(ctx_->store, principal_->tenant, std::move(head->entries));
    put_request_id_ = h.request_id;
    put_time_ = {};
    return {Action::kReceivePayload, protocol::kHeaderSize + head->directory_bytes, 0, values};
  }

  void SendFrame(OutputQueue* out, uint8_t opcode, uint64_t id, const std::string& body,
                 uint64_t extra_body_bytes = 0) {
    FrameHeader h;
    h.opcode = opcode;
    h.flags = protocol::kFlagResponse;
    h.request_id = id;
    h.body_length = static_cast<uint32_t>(body.size() + extra_body_bytes);
    std::byte header[protocol::kHeaderSize];
    protocol::EncodeHeader(h, header);
    out->Append({reinterpret_cast<const char*>(header), sizeof(header)});
    out->Append(body);
  }

  void Reply(OutputQueue* out, uint8_t opcode, uint64_t id, const Status& status) {
    scratch_.clear();
    protocol::EncodeStatusOnly(status, &scratch_);
    SendFrame(out, opcode, id, scratch_);
  }

  // Resolves HELLO/AUTH credentials: Unauthenticated when they do not match (counted by the
  // AuthGuard), ResourceExhausted while this peer is locked out after too many failures.
  Result<Authenticator::Principal> Resolve(const std::string& tenant, const std::string& token) {
    if (token.empty()) {
      std::optional<Authenticator::Principal> anon = ctx_->auth->Anonymous(peer_);
      if (anon && (tenant.empty() || tenant == anon->name)) return *anon;
      ctx_->metrics->AuthFailure(Proto::kNative);
      return Status::Unauthenticated(
          tenant.empty() ? "authentication required: send a tenant and its token in HELLO"
                         : "tenant '" + tenant + "' needs its token");
    }
    return ctx_->auth_guard->Authenticate(*ctx_->auth, peer_, Proto::kNative, tenant, token);
  }

  bool Hello(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    if (principal_) {
      Reply(out, h.opcode, h.request_id, Status::FailedPrecondition("HELLO was already sent"));
      return true;
    }
    Result<protocol::HelloRequest> req = protocol::DecodeHelloRequest(body);
    if (!req.ok()) {
      ctx_->metrics->ProtocolError(Proto::kNative);
      Reply(out, h.opcode, h.request_id, req.status());
      return false;
    }
    if (req->max_version < protocol::kVersion) {
      Reply(out, h.opcode, h.request_id,
            Status::FailedPrecondition("client speaks no protocol version the server knows"));
      return false;
    }
    Result<Authenticator::Principal> who = Resolve(req->tenant, req->token);
    if (!who.ok()) {
      Reply(out, h.opcode, h.request_id, who.status());
      return false;
    }
    principal_ = *who;
    protocol::HelloResponse resp;
    resp.features = (req->features & protocol::kServerFeatures) | shm_.Negotiate(req->features, principal_->tenant);
    features_ = resp.features;
    resp.max_frame_bytes = ctx_->max_frame_bytes;
    resp.max_block_bytes = ctx_->config->store.max_block_bytes;
    resp.max_batch = ctx_->config->max_batch;
    resp.tenant = principal_->name;
    resp.server = std::string(kServerName);
    scratch_.clear();
    protocol::EncodeHelloResponse(resp, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
    return true;
  }

  bool Auth(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<protocol::AuthRequest> req = protocol::DecodeAuthRequest(body);
    if (!req.ok()) {
      Reply(out, h.opcode, h.request_id, req.status());
      return false;
    }
    Result<Authenticator::Principal> who = Resolve(req->tenant, req->token);
    if (!who.ok()) {
      Reply(out, h.opcode, h.request_id, who.status());
      return false;
    }
    principal_ = *who;
    scratch_.clear();
    protocol::EncodeAuthResponse(principal_->name, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
    return true;
  }

  void GetMany(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<std::vector<BlockKey>> keys = protocol::DecodeKeyList(body, ctx_->config->max_batch);
    if (!keys.ok()) {
      Reply(out, h.opcode, h.request_id, keys.status());
      return;
    }
    // A reply never exceeds max_frame_bytes: the blocks from the first one past that budget on
    // come back as ResourceExhausted, for the client to ask again in another request, and are
    // not read now (a block read from G3 or G4 and not sent would be read again then, and
    // again from G4 when its promotion did not stay in G2).
    const uint64_t budget = ctx_->max_frame_bytes - std::min<uint64_t>(ctx_->max_frame_bytes,
                                                                       16 + 12 * keys->size());
    const Status full =
        Status::ResourceExhausted("reply would exceed max_frame_bytes; request this key again");
    std::vector<Result<BlockHandle>> items;
    items.reserve(keys->size());
    uint64_t values = 0;
    bool filled = false;
    for (const BlockKey& key : *keys) {
      Result<BlockHandle> item = full;
      if (!filled) item = ctx_->store->Get(principal_->tenant, key);
      if (item.ok() && values + item->size() > budget) {
        filled = true;
        item = full;
      }
      if (item.ok()) values += item->size();
      items.push_back(std::move(item));
    }
    scratch_.clear();
    protocol::EncodeGetDirectory(items, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_, values);
    for (Result<BlockHandle>& item : items) {
      if (item.ok()) out->AppendLease(std::move(item).value());
    }
  }

  void PutMany(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<std::vector<BlockWrite>> writes = protocol::DecodePutMany(
        body, ctx_->config->max_batch, ctx_->config->store.max_block_bytes);
    if (!writes.ok()) {
      Reply(out, h.opcode, h.request_id, writes.status());
      return;
    }
    std::vector<Status> statuses = ctx_->store->PutMany(principal_->tenant, *writes);
    scratch_.clear();
    protocol::EncodeItemStatuses(statuses, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
  }

  // All or nothing: one status for the whole request.
  void PutAtomic(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<std::vector<BlockWrite>> writes = protocol::DecodePutMany(
        body, ctx_->config->max_batch, ctx_->config->store.max_block_bytes);
    Reply(out, h.opcode, h.request_id,
          writes.ok() ? ctx_->store->PutAtomic(principal_->tenant, *writes) : writes.status());
  }

  void LookupResume(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    // A prompt's keys in one request: bound by the frame, not by max_batch (no values move).
    Result<protocol::ResumeRequest> req = protocol::DecodeResumeRequest(
        body, static_cast<uint32_t>(ctx_->max_frame_bytes / kBlockKeySize));
    Result<ResumeMatch> match =
        req.ok() ? ctx_->store->LookupResume(principal_->tenant, req->keys, req->query)
                 : Result<ResumeMatch>(req.status());
    if (!match.ok()) {
      Reply(out, h.opcode, h.request_id, match.status());
      return;
    }
    scratch_.clear();
    protocol::EncodeResumeMatch(*match, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
  }

  void Delete(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<protocol::DeleteRequest> req = protocol::DecodeDeleteRequest(body, ctx_->config->max_batch);
    if (!req.ok()) {
      Reply(out, h.opcode, h.request_id, req.status());
      return;
    }
    std::vector<Status> statuses = ctx_->store->DeleteMany(principal_->tenant, req->keys);
    scratch_.clear();
    protocol::EncodeItemStatuses(statuses, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
  }

  // DELETE_SESSION and DELETE_TENANT act on the connection's own tenant only; the audit log
  // records the authenticated tenant's name as the actor.
  void DeleteScoped(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<DeletionReport> report = DeleteScopedBlocks(static_cast<Opcode>(h.opcode), body);
    if (!report.ok()) {
      Reply(out, h.opcode, h.request_id, report.status());
      return;
    }
    scratch_.clear();
    protocol::EncodeDeletionReport(*report, (features_ & protocol::kFeatureSharedReport) != 0,
                                   &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
  }

  Result<DeletionReport> DeleteScopedBlocks(Opcode op, std::span<const std::byte> body) {
    if (op == Opcode::kDeleteSession) {
      Result<SessionId> session = protocol::DecodeDeleteSessionRequest(body);
      if (!session.ok()) return session.status();
      return ctx_->store->DeleteSession(principal_->tenant, *session, principal_->name);
    }
    if (!body.empty()) return Status::InvalidArgument("malformed DELETE_TENANT body: it must be empty");
    return ctx_->store->DeleteTenant(principal_->tenant, principal_->name);
  }

  // HINT_SESSION binds the connection's own tenant's session only.
  void HintSession(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<protocol::HintSessionRequest> req = protocol::DecodeHintSessionRequest(body);
    Reply(out, h.opcode, h.request_id,
          req.ok() ? ctx_->store->HintSession(principal_->tenant, req->session, req->hint)
                   : req.status());
  }

  void KeyListOp(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    Result<std::vector<BlockKey>> keys = protocol::DecodeKeyList(body, ctx_->config->max_batch);
    if (!keys.ok()) {
      Reply(out, h.opcode, h.request_id, keys.status());
      return;
    }
    TenantId tenant = principal_->tenant;
    Store* store = ctx_->store;
    scratch_.clear();
    switch (static_cast<Opcode>(h.opcode)) {
      case Opcode::kLookupPrefix: {
        Result<PrefixMatch> match = store->LookupPrefix(tenant, *keys);
        if (!match.ok()) {
          Reply(out, h.opcode, h.request_id, match.status());
          return;
        }
        protocol::EncodePrefixMatch(*match, &scratch_);
        break;
      }
      case Opcode::kExists: {
        // The Store has no side-effect-free membership test; a one-key prefix lookup per key
        // answers it (and counts as an access, like a Redis EXISTS touching the key).
        std::vector<std::span<const BlockKey>> prompts;
        prompts.reserve(keys->size());
        for (const BlockKey& k : *keys) prompts.emplace_back(&k, 1);
        std::vector<Result<PrefixMatch>> found = store->LookupPrefixMany(tenant, prompts);
        std::vector<uint8_t> tiers;
        tiers.reserve(found.size());
        for (const Result<PrefixMatch>& m : found) {
          tiers.push_back(m.ok() && m->num_blocks == 1 ? static_cast<uint8_t>(m->tiers[0]) : 0);
        }
        protocol::EncodeExists(tiers, &scratch_);
        break;
      }
      case Opcode::kPin:
        protocol::EncodeItemStatuses(store->PinMany(tenant, *keys), &scratch_);
        break;
      case Opcode::kUnpin:
        protocol::EncodeItemStatuses(store->UnpinMany(tenant, *keys), &scratch_);
        break;
      default:
        // PREFETCH: accepted and validated; a no-op until tiers below G2 promote on hints.
        protocol::EncodeStatusOnly(Status::OK(), &scratch_);
        break;
    }
    SendFrame(out, h.opcode, h.request_id, scratch_);
  }

  void Flush(const FrameHeader& h, std::span<const std::byte> body, OutputQueue* out) {
    if (!body.empty()) {
      Reply(out, h.opcode, h.request_id, Status::InvalidArgument("malformed FLUSH body: it must be empty"));
      return;
    }
    Result<uint64_t> written = ctx_->store->Flush(principal_->tenant);
    if (!written.ok()) {
      Reply(out, h.opcode, h.request_id, written.status());
      return;
    }
    scratch_.clear();
    protocol::EncodeFlushReply(*written, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
  }

  void Stats(const FrameHeader& h, OutputQueue* out) {
    Result<TenantStats> s = ctx_->store->StatsForTenant(principal_->tenant);
    if (!s.ok()) {
      Reply(out, h.opcode, h.request_id, s.status());
      return;
    }
    std::vector<protocol::NamedCounter> c;
    for (const auto& [name, field] : TenantStats::kCounters) c.push_back({name, (*s).*field});
    scratch_.clear();
    protocol::EncodeStats(principal_->name, c, &scratch_);
    SendFrame(out, h.opcode, h.request_id, scratch_);
  }

  const ServerContext* ctx_;
  const PeerInfo peer_;
  std::optional<Authenticator::Principal> principal_;
  uint64_t features_ = 0;  // Granted by HELLO.
  std::string scratch_;    // Reused for reply bodies.
  ShmHandler shm_;         // SHM_* requests; its leases and allocations end with the connection.
  // The PUT_MANY whose values are being received in place, if any.
  std::optional<InPlacePut> put_;
  // The incomplete frame at the front is a PUT_MANY that is read whole (NeedMore refused it).
  bool whole_frame_ = false;
  uint64_t put_request_id_ = 0;
  PayloadTime put_time_;  // Spent on it so far, for the histogram.
};

}  // namespace

std::unique_ptr<ProtocolHandler> NewNativeHandler(const ServerContext* ctx, const PeerInfo& peer) {
  return std::make_unique<NativeHandler>(ctx, peer);
}

}  // namespace kvtier::server
