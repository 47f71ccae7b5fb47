// A kvtierd ServerContext over a small in-memory Store, shared by the protocol fuzz targets so
// that they drive the real request handlers, not only the decoders.

#ifndef KVTIER_TESTS_FUZZ_FUZZ_SERVER_H_
#define KVTIER_TESTS_FUZZ_FUZZ_SERVER_H_

#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/store.h"
#include "src/server/config.h"
#include "src/server/handler.h"
#include "src/server/metrics.h"
#include "src/server/s3_service.h"

namespace kvtier::fuzz {

class FuzzServer {
 public:
  // A G2-only store. Aborts (it is a fuzzer) if the store cannot be opened.
  FuzzServer() {
    if (!server::ApplyConfigToml(server::kDefaultConfigToml, "default", &config_).ok()) std::abort();
    config_.store.memory.capacity_bytes = 16 << 20;
    config_.store.disk.dir.clear();  // G2 only: no files, and parallel fuzzers share nothing.
    config_.warm_restart = false;    // Nor a G2 arena file in /dev/shm.
    config_.store.security.audit_log_path.clear();
    config_.store.retention_scan_seconds = 0;
    config_.store.max_block_bytes = 64 << 10;
    config_.max_batch = 64;
    auto store = Store::Open(config_.StoreOptions());
    if (!store.ok()) std::abort();
    store_ = std::move(store).value();
    auto auth = server::Authenticator::Create(config_, *store_);
    if (!auth.ok()) std::abort();
    auth_ = std::make_unique<server::Authenticator>(std::move(auth).value());
    ctx_.config = &config_;
    ctx_.store = store_.get();
    ctx_.metrics = &metrics_;
    ctx_.auth = auth_.get();
    auth_guard_ = std::make_unique<server::AuthGuard>(config_, store_.get(), &metrics_);
    ctx_.auth_guard = auth_guard_.get();
    ctx_.max_frame_bytes = static_cast<uint32_t>(config_.EffectiveMaxFrameBytes());
  }

  // Turns the S3 endpoint on, unsigned requests let in as the anonymous tenant, its bucket
  // list in a directory of its own. Aborts if it cannot.
  void EnableS3() {
    char dir[] = "/tmp/kvtier-s3-fuzz-XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    config_.data_dir = dir;
    config_.s3.listen = "127.0.0.1:0";
    config_.s3.allow_anonymous = true;
    auto s3 = server::S3Service::Open(config_, *store_);
    if (!s3.ok()) std::abort();
    s3_ = std::move(s3).value();
    ctx_.s3 = s3_.get();
  }

  // Feeds `input` to `handler` as one connection would, until it needs more or closes.
  static void Drive(server::ProtocolHandler* handler, std::vector<std::byte> input) {
    server::OutputQueue out;
    size_t pos = 0;
    while (pos < input.size()) {
      server::ProtocolHandler::Outcome o = handler->HandleOne(std::span(input).subspan(pos), &out);
      if (o.action == server::ProtocolHandler::Outcome::Action::kReceivePayload) {
        // As the event loop does: the payload's bytes into the handler's targets, until they
        // or the input run out (a client that hung up).
        pos += o.consumed;
        for (size_t left = o.payload_bytes; left > 0 && pos < input.size();) {
          std::span<std::byte> target = handler->PayloadTarget();
          if (target.empty() || target.size() > left) std::abort();
          if (target.size() > input.size() - pos) return;
          if (target.data() != nullptr) std::memcpy(target.data(), &input[pos], target.size());
          pos += target.size();
          left -= target.size();
          handler->PayloadFilled(&out);
        }
        out.Clear();
        continue;
      }
      if (o.action == server::ProtocolHandler::Outcome::Action::kConsumed) {
        if (o.consumed == 0) std::abort();  // A request read in steps must consume bytes.
        pos += o.consumed;
        continue;
      }
      if (o.action != server::ProtocolHandler::Outcome::Action::kHandled) break;
      if (o.consumed == 0) std::abort();  // A handled request must consume bytes.
      pos += o.consumed;
      out.Clear();
    }
  }

  const server::ServerContext* ctx() const { return &ctx_; }
  // The peer the fuzzed connections come from: local, on the Unix socket or not.
  static server::PeerInfo LocalPeer(bool unix_socket) {
    server::PeerInfo peer;
    peer.local = true;
    peer.unix_socket = unix_socket;
    peer.id = unix_socket ? "unix" : "tcp:127.0.0.1";
    return peer;
  }

 private:
  server::ServerConfig config_;
  std::unique_ptr<Store> store_;
  server::Metrics metrics_;
  std::unique_ptr<server::Authenticator> auth_;
  std::unique_ptr<server::AuthGuard> auth_guard_;
  std::unique_ptr<server::S3Service> s3_;
  server::ServerContext ctx_;
};

}  // namespace kvtier::fuzz

#endif  // KVTIER_TESTS_FUZZ_FUZZ_SERVER_H_
