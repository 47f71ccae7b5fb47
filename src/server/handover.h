// Handover: rolling upgrades without a refused connection.
//
// A running kvtierd listens on <data_dir>/kvtierd.handover (mode 0600; a peer of another
// user than the daemon's, root aside, is refused). A new kvtierd started with
// --take-over (same data directory, same or newer binary) connects there and asks for the
// listening sockets; the old one sends them (SCM_RIGHTS), stops accepting, drains its
// connections as on SIGTERM (clients reconnect and retry), saves G2 for the warm restart and
// closes its Store, and only then closes the handover connection. The new one waits for that,
// opens the Store (adopting G2, taking over G3), and serves on the same sockets. Connections
// made meanwhile wait in the sockets' backlog: nobody is refused, nothing is lost.

#ifndef KVTIER_SERVER_HANDOVER_H_
#define KVTIER_SERVER_HANDOVER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "kvtier/status.h"

namespace kvtier::server {

// The listening sockets of a kvtierd by role; -1 = that listener is off.
struct ListenerFds {
  int native = -1;  // Native protocol over TCP.
  int resp = -1;
  int http = -1;
  int unix_socket = -1;  // Native protocol over the Unix socket.
  int s3 = -1;
};

std::string HandoverPath(const std::string& data_dir);

// The old side. Thread-safe.
class HandoverListener {
 public:
  // Listens at `path` until one kvtierd takes over; then sends it `listeners` (which stay
  // open here too) and calls `handed_over` on its own thread.
  static Result<std::unique_ptr<HandoverListener>> Start(const std::string& path,
                                                         ListenerFds listeners,
                                                         std::function<void()> handed_over);
  // Stops listening; closes the connection of the kvtierd that took over, which tells it
  // this process has let go of the data directory. Destroy it last.
  ~HandoverListener();
  HandoverListener(const HandoverListener&) = delete;
  HandoverListener& operator=(const HandoverListener&) = delete;

  bool handed_over() const { return handed_over_.load(); }

 private:
  HandoverListener() = default;
  void Run();
  // Serves one connection: true when the sockets went to it.
  bool Serve(int conn);

  std::string path_;
  ListenerFds listeners_;
  std::function<void()> on_handed_over_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: the destructor wakes the thread.
  int successor_ = -1;  // The connection of the kvtierd that took over.
  std::atomic<bool> handed_over_{false};
  std::thread thread_;
};

// The new side: takes the sockets from the kvtierd listening at `path`, then waits until it
// has closed its Store. FailedPrecondition when no kvtierd listens there; DeadlineExceeded
// when it does not let go within `timeout`.
Result<ListenerFds> TakeOver(const std::string& path, std::chrono::seconds timeout);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_HANDOVER_H_
