#include "src/server/server.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <utility>

#include "src/server/net.h"
#include "src/tier/memory/arena_files.h"

namespace kvtier::server {
namespace {

// Says which arenas beside this kvtierd's hold memory that no kvtierd will adopt: a data
// directory that was removed or moved leaves its arena on tmpfs until someone removes it.
void LogIdleArenas(const std::string& own_arena) {
  const std::string dir = std::filesystem::path(own_arena).parent_path().string();
  Result<std::vector<ArenaFiles>> arenas = ListArenas(dir.empty() ? "." : dir);
  if (!arenas.ok()) return;  // Only advice; G2 itself opened.
  for (ArenaState state : {ArenaState::kOrphaned, ArenaState::kUnknownOwner}) {
    uint64_t bytes = 0;
    std::string paths;
    for (const ArenaFiles& a : *arenas) {
      if (a.state != state || a.path == own_arena) continue;
      bytes += a.bytes;
      paths += (paths.empty() ? "" : ", ") + a.path;
      if (!a.data_dir.empty()) paths += " (" + a.data_dir + ")";
    }
    if (paths.empty()) continue;
    Env::Default()->Log(
        "G2: arenas no running kvtierd holds " +
        std::string(state == ArenaState::kOrphaned ? "whose data directory is gone"
                                                   : "that name no data directory") +
        " keep " + std::to_string(bytes >> 20) + " MiB of memory: " + paths + "; `kvtier admin " +
        "arenas` lists them, `kvtier admin arenas --remove" +
        (state == ArenaState::kOrphaned ? "" : " --all-stopped") + "` frees them");
  }
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(const ServerConfig& config,
                                              const ListenerFds* inherited,
                                              std::function<void()> on_handed_over) {
  // Inherited sockets this server closes unless a listener takes them.
  ListenerFds unused = inherited != nullptr ? *inherited : ListenerFds{};
  struct CloseUnused {
    ListenerFds* fds;
    ~CloseUnused() {
      for (int fd : {fds->native, fds->resp, fds->http, fds->unix_socket, fds->s3}) {
        if (fd >= 0) close(fd);
      }
    }
  } close_unused{&unused};
  KVTIER_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Server> s(new Server());
  s->config_ = config;
  std::error_code ec;
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec) {
    return Status::Unavailable("cannot create data_dir " + config.data_dir + ": " + ec.message());
  }
  Options options = s->config_.StoreOptions();
  if (config.events.enabled) {
    std::vector<std::string> names;
    for (const TenantOptions& t : options.tenants) names.push_back(t.name);
    Result<std::unique_ptr<KvEventPublisher>> events = KvEventPublisher::Start(config.events, names);
    if (!events.ok()) return events.status();
    s->events_ = std::move(events).value();
    options.event_listener = s->events_.get();
  }
  Result<std::unique_ptr<Store>> store = Store::Open(options);
  if (!store.ok()) return store.status();
  s->store_ = std::move(store).value();
  // Routers learn what G2 adopted and G3 recovered.
  if (s->events_) s->events_->SetStore(s->store_.get(), /*announce=*/true);
  if (const std::string arena = s->config_.ArenaFile(); !arena.empty()) LogIdleArenas(arena);
  Result<Authenticator> auth = Authenticator::Create(s->config_, *s->store_);
  if (!auth.ok()) return auth.status();
  s->auth_ = std::make_unique<Authenticator>(std::move(auth).value());

  if (s->config_.tls.enabled()) {
    Result<std::unique_ptr<TlsContext>> tls = TlsContext::Create(s->config_.tls);
    if (!tls.ok()) return tls.status();
    s->tls_ = std::move(tls).value();
  }

  if (!s->config_.s3.listen.empty()) {
    Result<std::unique_ptr<S3Service>> s3 = S3Service::Open(s->config_, *s->store_);
    if (!s3.ok()) return s3.status();
    s->s3_ = std::move(s3).value();
  }

  s->ctx_.config = &s->config_;
  s->ctx_.s3 = s->s3_.get();
  s->ctx_.tls = s->tls_.get();
  s->ctx_.store = s->store_.get();
  s->ctx_.metrics = &s->metrics_;
  s->ctx_.events = s->events_.get();
  s->ctx_.auth = s->auth_.get();
  s->auth_guard_ = std::make_unique<AuthGuard>(s->config_, s->store_.get(), &s->metrics_);
  s->ctx_.auth_guard = s->auth_guard_.get();
  s->ctx_.max_frame_bytes = static_cast<uint32_t>(s->config_.EffectiveMaxFrameBytes());
  s->ctx_.started = std::chrono::steady_clock::now();

  uint32_t threads = config.threads;
  if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  for (uint32_t i = 0; i < threads; ++i) {
    s->loops_.push_back(std::make_unique<EventLoop>(&s->ctx_, &s->loop_ptrs_));
    s->loop_ptrs_.push_back(s->loops_.back().get());
    KVTIER_RETURN_IF_ERROR(s->loops_.back()->Init());
  }

  // Listeners go to loop 0, which owns them from here on (and closes them on failure).
  EventLoop* acceptor = s->loops_[0].get();
  // What loop 0 listens on, for a successor to take over.
  ListenerFds serving;
  struct Tcp {
    const std::string& address;
    Proto proto;
    uint16_t* port;
    bool tls;
    int ListenerFds::*role;
  };
  const TlsConfig& tls = config.tls;
  for (const Tcp& t :
       {Tcp{config.native_listen, Proto::kNative, &s->native_port_, tls.enabled() && tls.native,
            &ListenerFds::native},
        Tcp{config.resp_listen, Proto::kResp, &s->resp_port_, tls.enabled() && tls.resp,
            &ListenerFds::resp},
        Tcp{config.http_listen, Proto::kHttp, &s->http_port_, tls.enabled() && tls.http,
            &ListenerFds::http},
        Tcp{config.s3.listen, Proto::kS3, &s->s3_port_, tls.enabled() && tls.s3,
            &ListenerFds::s3}}) {
    if (t.address.empty()) continue;
    Result<int> fd = std::exchange(unused.*t.role, -1);
    if (*fd >= 0 && !BoundTo(*fd, t.address)) {
      // The configuration in force moved the listener: the old socket goes.
      Env::Default()->Log("take-over: listening on " + t.address + " instead of port " +
                          std::to_string(BoundPort(*fd)));
      close(*fd);
      fd = -1;
    }
    if (*fd >= 0) {
      *t.port = BoundPort(*fd);
    } else {
      fd = ListenTcp(t.address, t.port);
      if (!fd.ok()) return fd.status();
    }
    acceptor->AddListener(*fd, t.proto, t.tls);
    serving.*t.role = *fd;
  }
  if (!config.unix_socket.empty()) {
    std::string path = config.unix_socket[0] == '/' ? config.unix_socket
                                                     : config.data_dir + "/" + config.unix_socket;
    Result<int> fd = std::exchange(unused.unix_socket, -1);
    if (*fd >= 0) {
      const std::string bound = BoundPath(*fd);
      std::error_code ec;
      if (bound != path && !(std::filesystem::equivalent(bound, path, ec) && !ec)) {
        Env::Default()->Log("take-over: listening on " + path + " instead of " + bound);
        close(*fd);
        fd = -1;
        if (!bound.empty()) unlink(bound.c_str());
      }
    }
    if (*fd < 0) fd = ListenUnix(path, {config.unix_socket_mode, config.unix_socket_group});
    if (!fd.ok()) return fd.status();
    s->unix_path_ = path;
    acceptor->AddListener(*fd, Proto::kNative, /*tls=*/false);  // Local: always plaintext.
    serving.unix_socket = *fd;
  }
  if (on_handed_over) {
    Result<std::unique_ptr<HandoverListener>> handover = HandoverListener::Start(
        HandoverPath(config.data_dir), serving, std::move(on_handed_over));
    if (!handover.ok()) return handover.status();
    s->handover_ = std::move(handover).value();
  }
  for (auto& loop : s->loops_) loop->Start();
  s->running_ = true;
  return s;
}

Server::~Server() { Shutdown(); }

void Server::Shutdown() {
  if (running_) {
    for (auto& loop : loops_) loop->BeginShutdown();
    for (auto& loop : loops_) loop->Join();
    running_ = false;
  }
  loops_.clear();
  loop_ptrs_.clear();
  tls_.reset();
  s3_.reset();
  if (!unix_path_.empty()) {
    if (!handed_over()) unlink(unix_path_.c_str());
    unix_path_.clear();
  }
  if (events_) events_->SetStore(nullptr, /*announce=*/false);
  store_.reset();
  handover_.reset();
}

}  // namespace kvtier::server
