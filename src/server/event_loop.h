// kvtierd's event loops: one thread each, an epoll set of non-blocking sockets, level-triggered.
//
// Loop 0 also owns the listening sockets and deals accepted connections out to all loops
// round-robin. A connection lives on one loop for its whole life, so its buffers and handler
// need no locks. Backpressure: while a connection has more than max_output_bytes of replies
// queued, its loop stops reading from it. Idle connections are closed after
// idle_timeout_seconds. Shutdown: stop accepting; close connections between requests at once;
// stop reading the others, flush the replies already computed (for at most
// shutdown_grace_seconds), close.

#ifndef KVTIER_SERVER_EVENT_LOOP_H_
#define KVTIER_SERVER_EVENT_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "src/common/mutex.h"
#include "src/server/handler.h"

namespace kvtier::server {

class Connection;

class EventLoop {
 public:
  // `loops` lists every loop of the server (this one included); loop 0 deals connections to
  // them. Not owned; outlives this loop.
  EventLoop(const ServerContext* ctx, std::vector<EventLoop*>* loops);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Creates the epoll set and wake-up eventfd. Call once, before Start.
  Status Init();
  // REQUIRES: before Start. Takes ownership of listening socket `fd`. `tls`: its connections
  // speak TLS (REQUIRES: ServerContext::tls).
  void AddListener(int fd, Proto proto, bool tls);
  void Start();

  // Thread-safe: gives an accepted socket to this loop (which then owns it). `tls`: the loop
  // runs the TLS handshake (non-blocking, bounded by the idle timeout) before any request.
  void Adopt(int fd, Proto proto, PeerInfo peer, bool tls);
  // Thread-safe: closes the listeners, stops reading, flushes, closes; the thread then exits.
  void BeginShutdown();
  // Waits for the thread to exit. REQUIRES: BeginShutdown was called.
  void Join();

 private:
  friend class Connection;
  struct Listener {
    int fd;
    Proto proto;
    bool tls;
  };
  struct Pending {
    int fd;
    Proto proto;
    PeerInfo peer;
    bool tls;
  };

  void Run();
  void Accept(const Listener& listener);
  void TakeAdopted();
  void SweepIdle(std::chrono::steady_clock::time_point now);
  void CloseConnection(Connection* conn);
  void UpdateInterest(Connection* conn);
  // Logs a connection's trace line, at most one a second; lines held back are counted in the
  // next one.
  void LogTrace(const std::string& line);

  const ServerContext* ctx_;
  std::vector<EventLoop*>* loops_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::vector<Listener> listeners_;
  size_t next_loop_ = 0;
  std::thread thread_;

  std::unordered_map<Connection*, std::unique_ptr<Connection>> connections_;
  // Closed during the current batch of events; destroyed after it (a later event of the same
  // batch may still name them).
  std::vector<std::unique_ptr<Connection>> closed_;

  std::chrono::steady_clock::time_point last_trace_{};
  uint64_t traces_held_back_ = 0;
  // Where payload bytes a handler drops are read (ProtocolHandler::PayloadTarget); allocated
  // at first use.
  std::unique_ptr<std::byte[]> discard_;

  std::atomic<bool> shutting_down_{false};
  Mutex mu_;
  std::vector<Pending> adopted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_EVENT_LOOP_H_
