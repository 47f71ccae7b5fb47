// The native protocol's shared-memory requests (SHM_ATTACH .. SHM_PUT, docs/protocol.md
// "Shared-memory fast path") for one connection. The native handler owns one, asks it which
// feature bit to grant in HELLO, and hands it every SHM_* request after HELLO.
//
// Runs on the connection's event-loop thread only, like the handler that owns it. Destroying
// it (the connection closed) releases every lease and aborts every allocation it holds.

#ifndef KVTIER_SERVER_SHM_HANDLER_H_
#define KVTIER_SERVER_SHM_HANDLER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvtier/store.h"
#include "src/protocol/wire.h"
#include "src/server/buffers.h"
#include "src/server/handler.h"
#include "src/server/shm_session.h"

namespace kvtier::server {

class ShmHandler {
 public:
  // `unix_socket`: the connection is on the Unix socket, the only place the region's memfd can
  // be passed (and where file permissions decide who may connect).
  ShmHandler(const ServerContext* ctx, bool unix_socket, ShmSession::Limits limits = {})
      : ctx_(ctx), unix_socket_(unix_socket), limits_(limits) {}

  // The shared-memory feature bit to grant in HELLO to a client of `tenant`:
  // kFeatureSharedMemory when the client asks for it, the connection is on the Unix socket and
  // the store has an arena; else 0.
  uint64_t Negotiate(uint64_t requested_features, TenantId tenant);

  // Handles one SHM_* request for `tenant`, queuing its reply on `out`.
  // REQUIRES: protocol::IsShmOpcode(header.opcode); HELLO succeeded, for the same tenant.
  void Handle(const protocol::FrameHeader& header, std::span<const std::byte> body,
              TenantId tenant, OutputQueue* out);

 private:
  void Attach(const protocol::FrameHeader& h, TenantId tenant, OutputQueue* out);
  void Get(const protocol::FrameHeader& h, std::span<const std::byte> body, TenantId tenant,
           OutputQueue* out);
  void Alloc(const protocol::FrameHeader& h, std::span<const std::byte> body, OutputQueue* out);
  void Reserve(const protocol::FrameHeader& h, std::span<const std::byte> body, OutputQueue* out);
  void Put(const protocol::FrameHeader& h, std::span<const std::byte> body, OutputQueue* out);
  void IdOp(const protocol::FrameHeader& h, std::span<const std::byte> body, OutputQueue* out);
  // Header + body_ (+ extra_body_bytes the caller appends itself).
  void Send(OutputQueue* out, const protocol::FrameHeader& request, uint64_t extra_body_bytes = 0);
  void Reply(OutputQueue* out, const protocol::FrameHeader& request, const Status& status);

  const ServerContext* const ctx_;
  const bool unix_socket_;
  const ShmSession::Limits limits_;
  bool granted_ = false;
  std::unique_ptr<ShmSession> session_;  // From the first SHM_ATTACH on.
  std::string body_;                   // Reused for reply bodies.
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_SHM_HANDLER_H_
