// Test harness for kvtierd end-to-end tests: starts a real kvtierd on ephemeral ports (port 0,
// reported through --port-file), and speaks raw bytes to it for the bad-input tests.
//
// Readiness is awaited by polling for the port file with a bounded deadline; reads use socket
// timeouts as an upper bound only (a test that hits one fails, it never passes by waiting).

#ifndef KVTIER_TESTS_DAEMON_DAEMON_HARNESS_H_
#define KVTIER_TESTS_DAEMON_DAEMON_HARNESS_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/block_key.h"
#include "kvtier/client.h"
#include "src/protocol/messages.h"
#include "src/protocol/wire.h"

namespace kvtier::daemon_test {

// Upper bound on any wait in these tests; reaching it is a failure, not a pass.
inline constexpr std::chrono::seconds kDeadline{60};

// Test data: a block key made of two numbers.
inline BlockKey TestKey(uint32_t a, uint32_t b = 0) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  std::memcpy(bytes.data(), &a, 4);
  std::memcpy(bytes.data() + 4, &b, 4);
  bytes[31] = 0x5a;
  return BlockKey(bytes);
}

// `size` bytes of an xorshift64 sequence started at `state` (nonzero): incompressible.
inline std::vector<std::byte> XorshiftBytes(uint64_t state, size_t size) {
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    v[i] = static_cast<std::byte>(state);
  }
  return v;
}

// Removes the G2 arena files kvtierd left for `arena_file` (its regions, index and lock) and
// for every arena in /dev/shm whose lock names `data_dir` as its owner: also those of a kvtierd
// that failed or was killed before it wrote its port file.
inline void RemoveArenaFiles(const std::string& arena_file, const std::filesystem::path& data_dir) {
  std::vector<std::filesystem::path> arenas;
  if (!arena_file.empty()) arenas.emplace_back(arena_file);
  const std::string owner = "data_dir=" + data_dir.string() + "\n";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("kvtier-g2-") || !name.ends_with(".lock")) continue;
    std::ifstream lock(e.path());
    const std::string text((std::istreambuf_iterator<char>(lock)), std::istreambuf_iterator<char>());
    if (text.ends_with(owner)) arenas.push_back(e.path().parent_path() / name.substr(0, name.size() - 5));
  }
  for (const std::filesystem::path& arena : arenas) {
    for (const auto& e : std::filesystem::directory_iterator(arena.parent_path(), ec)) {
      const std::string name = e.path().filename().string();
      if (name == arena.filename().string() || name.starts_with(arena.filename().string() + ".")) {
        std::filesystem::remove(e.path(), ec);
      }
    }
  }
}

// Pseudo-random bytes from `seed`: incompressible.
inline std::vector<std::byte> RandomValue(uint32_t seed, size_t size) {
  return XorshiftBytes(seed * 0x9E3779B97F4A7C15ull + 1, size);
}

// Bytes of a short repeating pattern from `seed`: they compress.
inline std::vector<std::byte> PatternValue(uint32_t seed, size_t size) {
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>((seed * 131 + i * 7) & 0xff);
  return v;
}

// The whole file ("" when it cannot be read).
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class Daemon {
 public:
  // Starts kvtierd with `extra_toml` appended to a test config (ports 0, a temp data dir,
  // 256 MiB of DRAM unless `extra_toml` has a [memory] table, 4 MiB max block, tenants
  // "default" (anonymous) and "acme" (token "acme-token")).
  explicit Daemon(const std::string& extra_toml = "") {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtierd_test_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::string config = "data_dir = \"" + dir_.string() + "\"\n" + R"(
[server]
native_listen = "127.0.0.1:0"
resp_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
unix_socket = "kvtierd.sock"
threads = 2
)" + extra_toml +
                         (extra_toml.find("[memory]") == std::string::npos ? "\n[memory]\ncapacity = \"256MiB\"\n" : "") +
                         R"(
[store]
max_block_bytes = "4MiB"
[[tenants]]
name = "default"
[[tenants]]
name = "acme"
token = "acme-token"
)";
    std::ofstream(dir_ / "kvtierd.toml") << config;
    Start();
  }

  ~Daemon() {
    if (::testing::Test::HasFailure()) std::fprintf(stderr, "kvtierd's log:\n%s", Log().c_str());
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "kvtierd did not shut down cleanly";
    }
    // G2 stays in its files on /dev/shm for a warm restart (arena_file and arena_file.*: the
    // tenants' regions, the index, the lock): a test's daemon has none coming.
    std::error_code ec;
    RemoveArenaFiles(arena_file_, std::filesystem::weakly_canonical(dir_, ec));
    std::filesystem::remove_all(dir_);
  }

  // Starts kvtierd (again, after Stop or Kill) with the same configuration and data directory:
  // the same Unix socket path, new TCP ports.
  void Start() { Launch(false); }

  // A rolling upgrade: starts a second kvtierd with --take-over on the same configuration,
  // waits until it serves (its port file) and the old one has exited, and returns the old
  // one's exit code (-1 if it died of a signal). The ports stay the same.
  int Upgrade() {
    const pid_t old = pid_;
    Launch(true);
    int status = 0;
    waitpid(old, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  // Starts kvtierd and waits (bounded) for its port file.
  void Launch(bool take_over) {
    values_.clear();
    std::string port_file = (dir_ / (take_over ? "ports.new" : "ports")).string();
    std::filesystem::remove(port_file);
    std::string config_file = (dir_ / "kvtierd.toml").string();
    const std::string log_file = (dir_ / "kvtierd.log").string();
    pid_ = fork();
    if (pid_ == 0) {
      // kvtierd's log goes to a file (Log() reads it; a failed test prints it).
      const int log = open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log >= 0) dup2(log, STDERR_FILENO);
      if (take_over) {
        execl(KVTIERD_PATH, "kvtierd", "--config", config_file.c_str(), "--port-file",
              port_file.c_str(), "--take-over", static_cast<char*>(nullptr));
      } else {
        execl(KVTIERD_PATH, "kvtierd", "--config", config_file.c_str(), "--port-file",
              port_file.c_str(), static_cast<char*>(nullptr));
      }
      _exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!std::filesystem::exists(port_file)) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        ADD_FAILURE() << "kvtierd exited during start-up";
        return;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "kvtierd did not start";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // Polling for readiness.
    }
    std::ifstream in(port_file);
    std::string line;
    while (std::getline(in, line)) {
      size_t eq = line.find('=');
      values_[line.substr(0, eq)] = line.substr(eq + 1);
    }
    arena_file_ = values_["g2_arena_file"];
  }

 public:
  // Sends SIGTERM and returns kvtierd's exit code (-1 if it died of a signal).
  int Stop() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // SIGKILL: the daemon dies mid-whatever, as in a crash.
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // SIGSTOP, and waits until every thread of kvtierd has stopped (delivery is asynchronous):
  // connections stay open and nothing answers. Resume sends SIGCONT.
  void Pause() {
    kill(pid_, SIGSTOP);
    const std::filesystem::path tasks = "/proc/" + std::to_string(pid_) + "/task";
    auto deadline = std::chrono::steady_clock::now() + kDeadline;
    for (;;) {
      bool all = true;
      for (const auto& task : std::filesystem::directory_iterator(tasks)) {
        std::ifstream in(task.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const size_t paren = stat.rfind(')');
        if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 't' &&
            stat[paren + 2] != 'T') {
          all = false;
        }
      }
      if (all) return;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "kvtierd did not stop";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // Polling thread states, bounded.
    }
  }
  void Resume() { kill(pid_, SIGCONT); }

  uint16_t native_port() const { return static_cast<uint16_t>(std::stoi(values_.at("native_port"))); }
  uint16_t resp_port() const { return static_cast<uint16_t>(std::stoi(values_.at("resp_port"))); }
  uint16_t http_port() const { return static_cast<uint16_t>(std::stoi(values_.at("http_port"))); }
  std::string unix_socket() const { return values_.at("unix_socket"); }
  std::string tcp_endpoint() const { return "127.0.0.1:" + std::to_string(native_port()); }
  std::string unix_endpoint() const { return "unix:" + unix_socket(); }
  bool running() const { return pid_ > 0; }
  // The data directory, and everything kvtierd has logged so far.
  const std::filesystem::path& dir() const { return dir_; }
  std::string Log() const { return ReadFile(dir_ / "kvtierd.log"); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  std::map<std::string, std::string> values_;
  std::string arena_file_;  // G2's file for warm restarts, removed at the end.
};

// A blocking TCP socket to 127.0.0.1:port with a receive timeout of kDeadline.
inline int ConnectTcp(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{static_cast<time_t>(kDeadline.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

inline void SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;  // The server may have closed on us; the reads will tell.
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads exactly n bytes; fewer when the peer closes first.
inline std::string RecvN(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

// True once the peer has closed (read returns 0 or a reset), after discarding what is left.
inline bool ClosedByPeer(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r == 0) return true;
    if (r < 0) return errno == ECONNRESET;
  }
}

// Sends one HTTP request (which should ask the server to close, e.g. HTTP/1.0) and returns
// everything the server sends until it closes.
inline std::string Http(uint16_t port, const std::string& request) {
  int fd = ConnectTcp(port);
  SendAll(fd, request);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// Reads one RESP reply (simple, error, integer, bulk, or array of those) as raw text.
inline std::string ReadResp(int fd) {
  std::string line;
  for (;;) {
    std::string c = RecvN(fd, 1);
    if (c.empty()) return line;
    line += c;
    if (line.size() >= 2 && line.ends_with("\r\n")) break;
  }
  if (line[0] == '$') {
    long n = std::stol(line.substr(1));
    if (n >= 0) line += RecvN(fd, static_cast<size_t>(n) + 2);
  } else if (line[0] == '*') {
    long n = std::stol(line.substr(1));
    for (long i = 0; i < n; ++i) line += ReadResp(fd);
  }
  return line;
}

inline std::string Command(std::initializer_list<std::string_view> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (std::string_view a : args) out += "$" + std::to_string(a.size()) + "\r\n" + std::string(a) + "\r\n";
  return out;
}

// A client of `d`'s Unix socket (the anonymous tenant); null, with a test failure, if none.
inline std::unique_ptr<Client> ConnectUnix(const Daemon& d) {
  ClientOptions o;
  o.endpoint = d.unix_endpoint();
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// The value of a sample of `d`'s /metrics ("name value" on a line of its own, labels
// included in `name`); -1 when absent.
inline double Metric(const Daemon& d, const std::string& name) {
  const std::string body = Http(d.http_port(), "GET /metrics HTTP/1.0\r\n\r\n");
  const size_t at = body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(body.substr(at + name.size() + 2));
}

// Polls `done` until it holds or the deadline passes.
template <typename Fn>
bool Eventually(Fn done) {
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline std::string NativeFrame(uint8_t opcode, uint64_t id, std::string_view body) {
  protocol::FrameHeader h;
  h.opcode = opcode;
  h.request_id = id;
  h.body_length = static_cast<uint32_t>(body.size());
  std::byte head[protocol::kHeaderSize];
  protocol::EncodeHeader(h, head);
  return std::string(reinterpret_cast<const char*>(head), sizeof(head)) + std::string(body);
}

inline std::string HelloFrame(uint64_t id, const std::string& tenant = "", const std::string& token = "") {
  protocol::HelloRequest hello;
  hello.tenant = tenant;
  hello.token = token;
  std::string body;
  protocol::EncodeHello(hello, &body);
  return NativeFrame(static_cast<uint8_t>(protocol::Opcode::kHello), id, body);
}

struct RawReply {
  protocol::FrameHeader header;
  std::string body;
  Status status;  // The status at the front of the body.
  bool ok = false;  // A whole frame arrived.
};

inline RawReply ReadReply(int fd) {
  RawReply r;
  std::string head = RecvN(fd, protocol::kHeaderSize);
  if (head.size() != protocol::kHeaderSize) return r;
  protocol::DecodedFrame f = protocol::DecodeFrame(
      {reinterpret_cast<const std::byte*>(head.data()), head.size()}, 1u << 30);
  if (f.state == protocol::DecodedFrame::State::kError) return r;
  r.header = f.header;
  r.body = RecvN(fd, f.header.body_length);
  if (r.body.size() != f.header.body_length) return r;
  r.status = protocol::DecodeResponseStatus({reinterpret_cast<const std::byte*>(r.body.data()), r.body.size()});
  r.ok = true;
  return r;
}

}  // namespace kvtier::daemon_test

#endif  // KVTIER_TESTS_DAEMON_DAEMON_HARNESS_H_
