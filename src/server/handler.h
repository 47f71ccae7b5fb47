// The protocol side of a kvtierd connection: what the event loop calls with the bytes a client
// sent, and the state every protocol handler shares (store, auth, metrics, limits).
//
// Handlers run on their connection's event-loop thread only, one request at a time.

#ifndef KVTIER_SERVER_HANDLER_H_
#define KVTIER_SERVER_HANDLER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/server/buffers.h"
#include "src/server/config.h"
#include "src/server/metrics.h"

namespace kvtier::server {

class TlsContext;
class KvEventPublisher;

// Tenant authentication: tenant tokens from the config, and the anonymous tenant for local
// clients. Immutable after construction; thread-safe.
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
  // The tenant of a client that did not authenticate: the anonymous tenant for a local client
  // when one is configured, else nullopt.
  std::optional<Principal> Anonymous(bool local_peer) const;

 private:
  struct Entry {
    Principal principal;
    std::string token;
  };
  std::vector<Entry> entries_;
  std::optional<Principal> anonymous_;
};

// Shared by every connection of the server. The pointed-to objects outlive all connections.
struct ServerContext {
  const ServerConfig* config = nullptr;
  Store* store = nullptr;
  Metrics* metrics = nullptr;
  const KvEventPublisher* events = nullptr;  // Null when [events] is off.
  const Authenticator* auth = nullptr;
  const TlsContext* tls = nullptr;  // Null when TLS is off.
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
    };
    Action action = Action::kNeedMore;
    size_t consumed = 0;
    // kNeedMore: the total size of the incomplete request, when known, so that the input buffer
    // can grow to it at once. 0 = unknown.
    size_t bytes_needed = 0;
  };

  virtual ~ProtocolHandler() = default;

  // Handles at most one request at the front of `input`, appending its reply to `out`.
  // `input` is mutable so that handlers may parse in place; bytes past `consumed` are untouched.
  virtual Outcome HandleOne(std::span<std::byte> input, OutputQueue* out) = 0;

  // The connection is being closed because it was idle too long: queue a last message for the
  // client, if the protocol has one (it is written on a best-effort basis).
  virtual void OnIdleTimeout(OutputQueue* out) = 0;

  // The protocol this handler speaks (for metrics).
  virtual Proto proto() const = 0;
};

// Creates the handler for a new connection. `local_peer`: the client is on this host (Unix
// socket or loopback), which is what entitles it to the anonymous tenant.
// `unix_socket`: the connection is on the Unix socket, where the shared-memory fast path is
// offered.
std::unique_ptr<ProtocolHandler> NewNativeHandler(const ServerContext* ctx, bool local_peer,
                                                  bool unix_socket = false);
std::unique_ptr<ProtocolHandler> NewRespHandler(const ServerContext* ctx, bool local_peer);
std::unique_ptr<ProtocolHandler> NewHttpHandler(const ServerContext* ctx);

// The bytes a client refused at max_connections is sent before its socket is closed.
std::string RefusalMessage(Proto proto);

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

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_HANDLER_H_
