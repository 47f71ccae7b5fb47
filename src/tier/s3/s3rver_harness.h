// S3rverProcess: starts a real s3rver (the npm package; scripts/deps.sh installs it into
// build/npm) on a free loopback port with a fresh data directory and one bucket, for the S3
// tests and the G4 benchmark, and stops it on destruction.
//
// Lookup order: $KVTIER_S3RVER, then `default_path` (the build's npm prefix), then $PATH.

#ifndef KVTIER_SRC_TIER_S3_S3RVER_HARNESS_H_
#define KVTIER_SRC_TIER_S3_S3RVER_HARNESS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace kvtier::testing_s3 {

inline std::string FindS3rver(const std::string& default_path) {
  if (const char* v = std::getenv("KVTIER_S3RVER"); v != nullptr && *v != '\0') return v;
  if (!default_path.empty() && ::access(default_path.c_str(), X_OK) == 0) return default_path;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/s3rver";
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

class S3rverProcess {
 public:
  // Starts s3rver with `bucket`; ok() is false (and error() says why) when it cannot.
  S3rverProcess(const std::string& default_path, const std::string& bucket) {
    binary_ = FindS3rver(default_path);
    if (binary_.empty()) {
      error_ = "s3rver not found (run scripts/deps.sh or set KVTIER_S3RVER)";
      return;
    }
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "kvtier-s3rver-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    port_ = FreePort();
    const std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      // Dies with the test process, even when that one crashes.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const std::string log = dir_ + ".log";
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      (void)f;
      ::dup2(STDOUT_FILENO, STDERR_FILENO);
      ::execl(binary_.c_str(), binary_.c_str(), "-d", dir_.c_str(), "-a", "127.0.0.1", "-p",
              port.c_str(), "--silent", "--service-endpoint", "localhost",
              "--configure-bucket", bucket.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Node takes a moment to start: wait until the port accepts (or the child died), at most
    // 30 s.
    for (int i = 0; i < 600; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = "s3rver exited at start (see " + dir_ + ".log)";
        return;
      }
      if (PortAccepts(port_)) {
        ok_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    error_ = "s3rver did not start listening in 30 s";
  }
  ~S3rverProcess() {
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
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& data_dir() const { return dir_; }

 private:
  std::string binary_;
  std::string dir_;
  std::string error_;
  int port_ = -1;
  pid_t pid_ = -1;
  bool ok_ = false;
};

}  // namespace kvtier::testing_s3

#endif  // KVTIER_SRC_TIER_S3_S3RVER_HARNESS_H_
