// S3ServerProcess: starts a real S3 server on a free loopback port with a fresh data directory
// and one bucket, for the S3 tests and the G4 benchmark, and kills it on destruction. Two
// servers: s3rver (npm; scripts/deps.sh installs it into build/npm), which ignores conditional
// creates, and MinIO (built from its Go module by scripts/test into build/go/bin), which
// honours them as AWS does.
//
// Lookup order: $KVTIER_S3RVER / $KVTIER_MINIO, then the build's default path, then $PATH.

#ifndef KVTIER_SRC_TIER_S3_S3_SERVER_HARNESS_H_
#define KVTIER_SRC_TIER_S3_S3_SERVER_HARNESS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#ifndef KVTIER_S3RVER_DEFAULT
#define KVTIER_S3RVER_DEFAULT ""
#endif
#ifndef KVTIER_MINIO_DEFAULT
#define KVTIER_MINIO_DEFAULT ""
#endif

namespace kvtier::testing_s3 {

// $`variable`, then `default_path`, then `name` on $PATH; "" when none is executable.
inline std::string FindBinary(const char* variable, const std::string& default_path,
                              const std::string& name) {
  if (const char* v = std::getenv(variable); v != nullptr && *v != '\0') return v;
  if (!default_path.empty() && ::access(default_path.c_str(), X_OK) == 0) return default_path;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// A loopback port nobody listened on a moment ago.
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline bool PortAccepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// The status code of GET `path` on the loopback port; 0 when there is no answer.
inline int HttpGetStatus(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  int code = 0;
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[64] = {};
    const ssize_t n = ::recv(fd, buf, sizeof(buf) - 1, 0);
    if (n > 12 && std::strncmp(buf, "HTTP/1.", 7) == 0) code = std::atoi(buf + 9);
  }
  ::close(fd);
  return code;
}

enum class S3Server { kS3rver, kMinio };

inline const char* S3ServerName(S3Server kind) {
  return kind == S3Server::kS3rver ? "s3rver" : "MinIO";
}

class S3ServerProcess {
 public:
  // Starts the server with `bucket`; ok() is false (and error() says why) when it cannot.
  S3ServerProcess(S3Server kind, const std::string& bucket) : kind_(kind) {
    binary_ = kind == S3Server::kS3rver
                  ? FindBinary("KVTIER_S3RVER", KVTIER_S3RVER_DEFAULT, "s3rver")
                  : FindBinary("KVTIER_MINIO", KVTIER_MINIO_DEFAULT, "minio");
    if (binary_.empty()) {
      error_ = kind == S3Server::kS3rver
                   ? "s3rver not found (run scripts/deps.sh or set KVTIER_S3RVER)"
                   : "minio not found (run scripts/test, which builds it, or set KVTIER_MINIO)";
      return;
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier-s3-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    bucket_ = bucket;
    // MinIO serves each top-level directory of its drive as a bucket.
    if (kind == S3Server::kMinio) std::filesystem::create_directories(dir_ + "/" + bucket);
    port_ = FreePort();
    Start();
  }
  ~S3ServerProcess() {
    Stop();
    std::error_code ec;
    if (!dir_.empty()) {
      std::filesystem::remove_all(dir_, ec);
      std::filesystem::remove(dir_ + ".log", ec);
    }
  }
  // Kills the server (the "G4 is gone" fault).
  void Stop() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }
  // Stops the server without closing anything (SIGSTOP): its sockets accept and requests hang
  // until the client's timeout, as with a stalled service. Thaw resumes it.
  void Freeze() {
    if (pid_ > 0) ::kill(-pid_, SIGSTOP);
  }
  void Thaw() {
    if (pid_ > 0) ::kill(-pid_, SIGCONT);
  }
  bool running() const { return pid_ > 0; }
  // Starts it again after Stop, on the same port and data (what it had stored is kept).
  bool Restart() {
    Stop();
    ok_ = false;
    Start();
    return ok_;
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& data_dir() const { return dir_; }
  std::string access_key() const { return kind_ == S3Server::kS3rver ? "S3RVER" : "kvtier-test"; }
  std::string secret_key() const {
    return kind_ == S3Server::kS3rver ? "S3RVER" : "kvtier-test-secret";
  }
  // Whether the server honours conditional creates (If-None-Match: * on PUT).
  bool conditional_put() const { return kind_ == S3Server::kMinio; }

 private:
  void Start() {
    const std::string port = std::to_string(port_);
    const std::string console = std::to_string(FreePort());
    const std::string address = "127.0.0.1:" + port;
    const std::string console_address = "127.0.0.1:" + console;
    const std::string user = access_key(), password = secret_key();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      // Dies with the test process, even when that one crashes.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const std::string log = dir_ + ".log";
      FILE* f = std::freopen(log.c_str(), "a", stdout);
      (void)f;
      ::dup2(STDOUT_FILENO, STDERR_FILENO);
      if (kind_ == S3Server::kS3rver) {
        ::execl(binary_.c_str(), binary_.c_str(), "-d", dir_.c_str(), "-a", "127.0.0.1", "-p",
                port.c_str(), "--silent", "--service-endpoint", "localhost",
                "--configure-bucket", bucket_.c_str(), static_cast<char*>(nullptr));
      } else {
        ::setenv("MINIO_ROOT_USER", user.c_str(), 1);
        ::setenv("MINIO_ROOT_PASSWORD", password.c_str(), 1);
        ::setenv("MINIO_BROWSER", "off", 1);
        ::setenv("MINIO_UPDATE", "off", 1);
        ::setenv("MINIO_DOMAIN", "s3.localhost", 1);  // Virtual-host style, as s3rver's.
        ::execl(binary_.c_str(), binary_.c_str(), "server", dir_.c_str(), "--address",
                address.c_str(), "--console-address", console_address.c_str(), "--quiet",
                static_cast<char*>(nullptr));
      }
      ::_exit(127);
    }
    // The server takes a moment to start: wait until the port accepts (or the child died),
    // at most 30 s. MinIO answers 503 for a while after that, until its readiness check says
    // it serves.
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = std::string(S3ServerName(kind_)) + " exited at start (see " + dir_ + ".log)";
        return;
      }
      if (PortAccepts(port_) &&
          (kind_ != S3Server::kMinio || HttpGetStatus(port_, "/minio/health/ready") == 200)) {
        ok_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Polling for readiness.
    }
    error_ = std::string(S3ServerName(kind_)) + " did not start listening in 30 s";
  }

  S3Server kind_;
  std::string binary_;
  std::string dir_;
  std::string bucket_;
  std::string error_;
  int port_ = -1;
  pid_t pid_ = -1;
  bool ok_ = false;
};

}  // namespace kvtier::testing_s3

#endif  // KVTIER_SRC_TIER_S3_S3_SERVER_HARNESS_H_
