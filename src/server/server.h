// Server: kvtierd without its command line. Opens the Store, listens on the configured
// endpoints and serves them from a pool of event loops until Shutdown.
//
// Thread safety: Start and Shutdown from one thread; the port accessors from any.

#ifndef KVTIER_SERVER_SERVER_H_
#define KVTIER_SERVER_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/server/config.h"
#include "src/server/event_loop.h"
#include "src/server/handler.h"
#include "src/server/handover.h"
#include "src/server/kv_events.h"
#include "src/server/metrics.h"
#include "src/server/s3_service.h"
#include "src/server/tls.h"

namespace kvtier::server {

class Server {
 public:
  // Validates `config`, creates the data directory, opens the Store and starts serving.
  // InvalidArgument for a bad config (or TLS certificate/key files that do not load);
  // Unavailable when a port cannot be bound;
  // FailedPrecondition when another kvtierd serves the Unix socket.
  // `inherited` (may be null): listening sockets taken over from the kvtierd this one
  // replaces (handover.h), used instead of binding for each listener the config has on; the
  // others are closed. With `on_handed_over`, the server itself listens for a successor and
  // calls it (on another thread) once the sockets went to one: the caller then shuts down.
  static Result<std::unique_ptr<Server>> Start(const ServerConfig& config,
                                               const ListenerFds* inherited = nullptr,
                                               std::function<void()> on_handed_over = {});

  // Shuts down if still running.
  ~Server();

  // Stops accepting, finishes writing the replies already computed (at most
  // shutdown_grace_seconds), closes every connection, removes the Unix socket (unless a
  // successor serves it now) and closes the Store; then lets the successor go on.
  // Idempotent.
  void Shutdown();

  // Ports actually bound (0 when that listener is off); useful with port 0 in the config.
  uint16_t native_port() const { return native_port_; }
  uint16_t resp_port() const { return resp_port_; }
  uint16_t http_port() const { return http_port_; }
  uint16_t s3_port() const { return s3_port_; }
  // Path of the Unix socket, or "" when off.
  const std::string& unix_socket_path() const { return unix_path_; }
  // The file G2 lives in for warm restarts ("" = off).
  std::string g2_arena_file() const { return config_.ArenaFile(); }
  // The KV events' endpoints as bound; empty when events are off.
  std::string events_endpoint() const { return events_ ? events_->endpoint() : ""; }
  std::string events_replay_endpoint() const { return events_ ? events_->replay_endpoint() : ""; }
  size_t num_loops() const { return loops_.size(); }
  // Store::WaitMemoryProvisioned.
  bool WaitMemoryProvisioned(std::chrono::milliseconds timeout) {
    return store_->WaitMemoryProvisioned(timeout);
  }
  // A kvtierd started with --take-over has the sockets now.
  bool handed_over() const { return handover_ != nullptr && handover_->handed_over(); }

 private:
  Server() = default;

  ServerConfig config_;
  std::unique_ptr<KvEventPublisher> events_;  // Null when [events] is off. Outlives the store.
  std::unique_ptr<Store> store_;
  Metrics metrics_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<AuthGuard> auth_guard_;
  std::unique_ptr<TlsContext> tls_;  // Null when TLS is off. Outlives the loops.
  std::unique_ptr<S3Service> s3_;    // Null when the S3 endpoint is off. Outlives the loops.
  ServerContext ctx_;
  std::vector<std::unique_ptr<EventLoop>> loops_;
  std::vector<EventLoop*> loop_ptrs_;
  uint16_t native_port_ = 0;
  uint16_t resp_port_ = 0;
  uint16_t http_port_ = 0;
  uint16_t s3_port_ = 0;
  std::string unix_path_;
  bool running_ = false;
  std::unique_ptr<HandoverListener> handover_;  // Destroyed after the store.
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_SERVER_H_
