// The protocol side of a kvtierd connection: what the event loop calls with the bytes a client
// sent, and the state every protocol handler shares (store, auth, metrics, limits).
//
// Handlers run on their connection's event-loop thread only, one request at a time.

#ifndef KVTIER_SERVER_HANDLER_H_
#define KVTIER_SERVER_HANDLER_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/common/mutex.h"
#include "src/server/buffers.h"
#include "src/server/config.h"
#include "src/server/metrics.h"
#include "src/server/net.h"

namespace kvtier::server {

class TlsContext;
class KvEventPublisher;
class S3Service;

// Tenant authentication: tenant tokens from the config, tenants of Unix-socket peers by their
// uid or gid (SO_PEERCRED), the anonymous tenant for local clients, and admin tokens (global or
// scoped to a tenant). Tokens are kept as SHA-256 digests and compared in constant time: how
// long a check takes says nothing about how much of a token matched, nor its length.
// Immutable after construction; thread-safe.
class Authenticator {
 public:
  static Result<Authenticator> Create(const ServerConfig& config, const Store& store);

  struct Principal {
    TenantId tenant;
    std::string name;
  };
  // `tenant` with its token. An empty `tenant` means "whichever tenant owns this token".
  // Unauthenticated when the pair does not match a configured tenant (the message does not
  // say which half was wrong).
  Result<Principal> Authenticate(std::string_view tenant, std::string_view token) const;
  // The tenant of a client that did not authenticate: for a Unix-socket peer whose uid or gid
  // a tenant lists (unix_uids, unix_gids), that tenant; otherwise, for a local peer, the
  // anonymous tenant when one is configured; otherwise nullopt.
  std::optional<Principal> Anonymous(const PeerInfo& peer) const;

  // Who an admin API request is: every tenant (the [auth] admin_token), one tenant (its
  // admin_token), or nullopt for a wrong or missing token. With no admin token configured at
  // all, everyone is the global admin (the API is then as open as the HTTP listener).
  struct AdminScope {
    std::optional<std::string> tenant;  // nullopt = every tenant.
  };
  std::optional<AdminScope> Admin(std::string_view bearer_token) const;
  bool admin_tokens_configured() const { return admin_tokens_configured_; }

 private:
  using Digest = std::array<uint8_t, 32>;
  struct Entry {
    Principal principal;
    std::optional<Digest> token;
    std::optional<Digest> admin_token;
    std::vector<uint32_t> unix_uids;
    std::vector<uint32_t> unix_gids;
  };
  std::vector<Entry> entries_;
  std::optional<Principal> anonymous_;
  std::optional<Digest> admin_token_;
  bool admin_tokens_configured_ = false;
};

// Failed authentications per peer (PeerInfo::id), on every protocol: after max_failures in a
// row a peer is locked out for lockout_seconds, doubled at each further lockout (up to an
// hour); while locked out its attempts are refused before any token is looked at, so guessing
// gets nowhere. The first failure of a peer and each lockout go to the audit log and the
// operator's log, once each, so an attacker cannot flood either. A success clears the peer.
// Thread-safe.
class AuthGuard {
 public:
  AuthGuard(const ServerConfig& config, Store* store, Metrics* metrics);

  // ResourceExhausted, saying for how long, while `peer` is locked out; OK otherwise.
  Status Admit(const PeerInfo& peer, Proto proto);
  // `claimed_tenant` is what the client asked for (audited only when it is a real tenant).
  void Failed(const PeerInfo& peer, Proto proto, std::string_view claimed_tenant);
  void Succeeded(const PeerInfo& peer);
  // auth.Authenticate behind the guard, as the native protocol and RESP use it: Admit, then
  // Failed or Succeeded by the outcome.
  Result<Authenticator::Principal> Authenticate(const Authenticator& auth, const PeerInfo& peer,
                                                Proto proto, std::string_view tenant,
                                                std::string_view token);

 private:
  struct State {
    uint32_t failures = 0;
    uint32_t lockouts = 0;
    std::chrono::steady_clock::time_point locked_until{};
    std::chrono::steady_clock::time_point last_failure{};
  };
  const uint32_t max_failures_;
  const std::chrono::seconds lockout_;
  Store* const store_;
  Metrics* const metrics_;
  Mutex mu_;
  std::unordered_map<std::string, State> peers_ ABSL_GUARDED_BY(mu_);
};

// Shared by every connection of the server. The pointed-to objects outlive all connections.
struct ServerContext {
  const ServerConfig* config = nullptr;
  Store* store = nullptr;
  Metrics* metrics = nullptr;
  const KvEventPublisher* events = nullptr;  // Null when [events] is off.
  const Authenticator* auth = nullptr;
  AuthGuard* auth_guard = nullptr;
  const TlsContext* tls = nullptr;  // Null when TLS is off.
  S3Service* s3 = nullptr;  // Null when the S3 endpoint is off.
  uint32_t max_frame_bytes = 0;  // ServerConfig::EffectiveMaxFrameBytes().
  std::chrono::steady_clock::time_point started;  // When the server started (for uptime).
};

class ProtocolHandler {
 public:
  struct Outcome {
    enum class Action {
      kNeedMore,  // The request at the front of the input is incomplete.
      kHandled,   // One request handled: `consumed` bytes; its reply is queued.
      kClose,     // Queued a final reply (maybe none); close once it is written. Stop reading.
      // The head of a request (`consumed` bytes) is handled, and its payload, the next
      // `payload_bytes` bytes of input, goes straight to where PayloadTarget says (a put's G2
      // allocations) instead of through the input buffer.
      kReceivePayload,
      // `consumed` bytes at the front of the request were read into the handler's state (a body
      // taken as it comes: its framing); the request goes on with the next bytes, however few.
      kConsumed,
    };
    Action action = Action::kNeedMore;
    size_t consumed = 0;
    // kNeedMore: the total size of the incomplete request, when known, so that the input buffer
    // can grow to it at once. 0 = unknown. kConsumed, and kReceivePayload when the request goes
    // on: the bytes the rest of the request (after the payload) has at least, for the request's
    // deadline and for waking on more than one segment; not a size to wait for before handling.
    size_t bytes_needed = 0;
    size_t payload_bytes = 0;  // kReceivePayload: at least 1.
    // kReceivePayload: the handler reads more of the request after the payload (the framing
    // after a run of a framed body), so its reply is not queued when the payload ends.
    bool request_goes_on = false;
    // kConsumed, and kReceivePayload when the request goes on: reads into the input buffer take
    // at most this many bytes at a time until the request ends (0: no limit), so that framing
    // is read in small steps and the payload after it in place; the payload's last bytes are
    // read together with up to this many after them.
    size_t read_step = 0;
  };

  virtual ~ProtocolHandler() = default;

  // Handles at most one request at the front of `input`, appending its reply to `out`.
  // `input` is mutable so that handlers may parse in place; bytes past `consumed` are untouched.
  virtual Outcome HandleOne(std::span<std::byte> input, OutputQueue* out) = 0;

  // After kReceivePayload: where the payload's next bytes go, at least one byte and no more
  // than are left of it; a span with a null data() asks for that many bytes to be read and
  // dropped. Asked again each time the span before it is filled.
  virtual std::span<std::byte> PayloadTarget() { return {}; }
  // The span PayloadTarget gave last is filled. After the payload's last one, the handler has
  // queued the request's reply to `out`.
  virtual void PayloadFilled(OutputQueue* out) { (void)out; }

  // The connection is being closed because it was idle too long: queue a last message for the
  // client, if the protocol has one (it is written on a best-effort basis).
  virtual void OnIdleTimeout(OutputQueue* out) = 0;

  // The connection is being closed because the request at the front of the input did not
  // arrive whole in time (server.request_timeout_seconds): as OnIdleTimeout.
  virtual void OnRequestTimeout(OutputQueue* out) = 0;

  // The protocol this handler speaks (for metrics).
  virtual Proto proto() const = 0;
};

// Creates the handler for a new connection with `peer` on the other end: a local peer may get
// the anonymous tenant, a Unix-socket peer its uid's tenant and the shared-memory fast path.
std::unique_ptr<ProtocolHandler> NewNativeHandler(const ServerContext* ctx, const PeerInfo& peer);
std::unique_ptr<ProtocolHandler> NewRespHandler(const ServerContext* ctx, const PeerInfo& peer);
std::unique_ptr<ProtocolHandler> NewHttpHandler(const ServerContext* ctx, const PeerInfo& peer);
std::unique_ptr<ProtocolHandler> NewS3Handler(const ServerContext* ctx, const PeerInfo& peer);

// The bytes a client refused at max_connections is sent before its socket is closed.
std::string RefusalMessage(Proto proto);
// The S3 endpoint's (an S3 SlowDown error).
std::string S3RefusalMessage();

// Measures one request for the latency histogram.
class RequestTimer {
 public:
  RequestTimer(Metrics* metrics, Proto proto, Op op)
      : metrics_(metrics), proto_(proto), op_(op), start_(std::chrono::steady_clock::now()) {}
  ~RequestTimer() {
    auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start_);
    metrics_->RecordRequest(proto_, op_, static_cast<uint64_t>(nanos.count()));
  }
  void set_op(Op op) { op_ = op; }
  RequestTimer(const RequestTimer&) = delete;
  RequestTimer& operator=(const RequestTimer&) = delete;

 private:
  Metrics* metrics_;
  Proto proto_;
  Op op_;
  std::chrono::steady_clock::time_point start_;
};

// The server's own time on a request whose payload is received in place (kReceivePayload):
// what its handler's PayloadTarget and PayloadFilled take, not the wait for its bytes. Recorded
// as a buffered request's RequestTimer would be.
class PayloadTime {
 public:
  // Adds its own lifetime to `time`.
  class Scope {
   public:
    explicit Scope(PayloadTime* time) : time_(time), start_(std::chrono::steady_clock::now()) {}
    ~Scope() { time_->busy_ += std::chrono::steady_clock::now() - start_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PayloadTime* const time_;
    const std::chrono::steady_clock::time_point start_;
  };

  void Record(Metrics* metrics, Proto proto, Op op) const {
    metrics->RecordRequest(
        proto, op,
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(busy_).count()));
  }

 private:
  std::chrono::steady_clock::duration busy_{};
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_HANDLER_H_
