// kvtierd: the kvtier node daemon.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "src/common/malloc_tuning.h"
#include "src/server/config.h"
#include "src/server/server.h"

namespace {

// How long --take-over waits for the old kvtierd to drain, save G2 and close its Store.
constexpr int kTakeOverTimeoutSeconds = 600;

// How often freed heap pages go back to the kernel while serving.
constexpr time_t kHeapReleaseIntervalSeconds = 5;

using kvtier::Status;
using kvtier::server::ServerConfig;

constexpr const char* kDescription =
    "kvtierd - the kvtier node daemon: a tiered KV-cache store for LLM inference engines.\n"
    "\n"
    "With no arguments it serves on localhost only, with 1 GiB of DRAM and files under\n"
    "./kvtier-data:\n"
    "  native protocol  tcp 127.0.0.1:7380 and unix socket ./kvtier-data/kvtierd.sock\n"
    "  Redis (RESP2)    127.0.0.1:6380   try: redis-cli -p 6380 set k v\n"
    "  HTTP             127.0.0.1:7381   /metrics (Prometheus), /healthz, /admin/\n"
    "Local clients that do not authenticate act as tenant \"default\".\n"
    "\n"
    "Settings come from the built-in defaults (see --print-default-config), then the --config\n"
    "file, then the flags below. SIGTERM or Ctrl-C shuts down cleanly.";

// A configuration is a few KiB; anything near this is not one.
constexpr std::streamoff kMaxConfigBytes = 1 << 20;

Status ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read config file " + path);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size > kMaxConfigBytes) {
    return Status::InvalidArgument("config file " + path + " is " + std::to_string(size) +
                                   " bytes; a configuration is at most 1 MiB");
  }
  in.seekg(0);
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return Status::OK();
}

// `provisioned`: G2 has taken its memory up front (or was not asked to): the line
// g2_provisioned=1, which a benchmark waits for before it measures.
Status WritePortFile(const std::string& path, const kvtier::server::Server& server,
                     bool provisioned) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "native_port=" << server.native_port() << "\n"
        << "resp_port=" << server.resp_port() << "\n"
        << "http_port=" << server.http_port() << "\n"
        << "s3_port=" << server.s3_port() << "\n"
        << "unix_socket=" << server.unix_socket_path() << "\n"
        << "g2_arena_file=" << server.g2_arena_file() << "\n"
        << "g2_provisioned=" << (provisioned ? 1 : 0) << "\n";
    if (!server.events_endpoint().empty()) {
      out << "events_endpoint=" << server.events_endpoint() << "\n"
          << "events_replay_endpoint=" << server.events_replay_endpoint() << "\n";
    }
    if (!out) return Status::Unavailable("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::Unavailable("cannot write " + path);
  return Status::OK();
}

int Fail(const Status& s) {
  std::fprintf(stderr, "kvtierd: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::KeepLargeBuffersInHeap();
  CLI::App app(kDescription, "kvtierd");
  std::string config_file, port_file;
  std::string data_dir, native_listen, unix_socket, resp_listen, http_listen, s3_listen;
  std::string memory, disk_dir, disk_capacity, max_block;
  std::string tls_cert, tls_key, tls_ca;
  uint32_t threads = 0, idle_timeout = 0;
  bool print_default = false, check_only = false, tls_require_client_cert = false;
  bool take_over = false;
  app.add_option("-c,--config", config_file, "TOML config file (keys it sets replace the defaults)");
  app.add_flag("--print-default-config", print_default, "Print the built-in config, commented, and exit");
  app.add_flag("--check-config", check_only, "Validate the configuration and exit");
  app.add_option("--data-dir", data_dir, "Directory for the Unix socket and the disk tier");
  app.add_option("--listen", native_listen, "Native protocol TCP address host:port (\"\" = off)");
  app.add_option("--unix-socket", unix_socket, "Native protocol Unix socket path (\"\" = off)");
  app.add_option("--resp-listen", resp_listen, "Redis protocol address host:port (\"\" = off)");
  app.add_option("--http-listen", http_listen, "HTTP address host:port (\"\" = off)");
  app.add_option("--s3-listen", s3_listen, "S3 endpoint address host:port (\"\" = off)");
  app.add_option("--memory", memory, "DRAM tier (G2) size, e.g. 8GiB");
  app.add_option("--disk-dir", disk_dir, "Directory of the SSD tier (G3); enables it");
  app.add_option("--disk-capacity", disk_capacity, "SSD tier size, e.g. 500GiB");
  app.add_option("--max-block", max_block, "Largest block (value) accepted, e.g. 64MiB");
  app.add_option("--threads", threads, "Event-loop threads (0 = one per core, at most 8)");
  app.add_option("--idle-timeout", idle_timeout, "Close connections idle this many seconds (0 = never)");
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain: turns on TLS 1.3 for [tls] listeners");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", tls_ca, "PEM CAs that client certificates must chain to");
  app.add_flag("--tls-require-client-cert", tls_require_client_cert,
               "Refuse TLS clients without a valid certificate (needs --tls-ca)");
  app.add_flag("--take-over", take_over,
               "Rolling upgrade: take the sockets, G2 and G3 of the kvtierd running with the same "
               "data_dir once it has drained; no client is refused (docs/operations.md)");
  app.add_option("--port-file", port_file,
                 "After listening, write the bound ports here (for scripts using port 0); "
                 "rewritten with g2_provisioned=1 once G2 has taken its memory up front");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (print_default) {
    std::fwrite(kvtier::server::kDefaultConfigToml.data(), 1,
                kvtier::server::kDefaultConfigToml.size(), stdout);
    return 0;
  }

  ServerConfig config;
  Status s = kvtier::server::ApplyConfigToml(kvtier::server::kDefaultConfigToml, "default config", &config);
  if (!s.ok()) return Fail(s);
  if (!config_file.empty()) {
    std::string text;
    s = ReadFile(config_file, &text);
    if (s.ok()) s = kvtier::server::ApplyConfigToml(text, config_file, &config);
    if (!s.ok()) return Fail(s);
  }
  auto size_flag = [&](const char* flag, const std::string& text, uint64_t* out) -> Status {
    if (app.count(flag) == 0) return Status::OK();
    kvtier::Result<uint64_t> v = kvtier::server::ParseByteSize(text);
    if (!v.ok()) return Status::InvalidArgument(std::string(flag) + ": " + std::string(v.status().message()));
    *out = *v;
    return Status::OK();
  };
  if (app.count("--data-dir")) config.data_dir = data_dir;
  if (app.count("--listen")) config.native_listen = native_listen;
  if (app.count("--unix-socket")) config.unix_socket = unix_socket;
  if (app.count("--resp-listen")) config.resp_listen = resp_listen;
  if (app.count("--http-listen")) config.http_listen = http_listen;
  if (app.count("--s3-listen")) config.s3.listen = s3_listen;
  if (app.count("--disk-dir")) config.store.disk.dir = disk_dir;
  if (app.count("--threads")) config.threads = threads;
  if (app.count("--idle-timeout")) config.idle_timeout_seconds = idle_timeout;
  if (app.count("--tls-cert")) config.tls.cert_file = tls_cert;
  if (app.count("--tls-key")) config.tls.key_file = tls_key;
  if (app.count("--tls-ca")) config.tls.ca_file = tls_ca;
  if (app.count("--tls-require-client-cert")) config.tls.require_client_cert = true;
  for (Status fs : {size_flag("--memory", memory, &config.store.memory.capacity_bytes),
                    size_flag("--disk-capacity", disk_capacity, &config.store.disk.capacity_bytes),
                    size_flag("--max-block", max_block, &config.store.max_block_bytes)}) {
    if (!fs.ok()) return Fail(fs);
  }
  s = config.Validate();
  if (!s.ok()) return Fail(s);
  if (check_only) {
    std::printf("kvtierd: configuration OK\n");
    return 0;
  }

  // Signals are taken synchronously by this thread (sigwait), never by the event loops: block
  // them before any thread starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::optional<kvtier::server::ListenerFds> inherited;
  if (take_over) {
    const std::string path = kvtier::server::HandoverPath(config.data_dir);
    std::fprintf(stderr, "kvtierd: taking over from the kvtierd at %s\n", path.c_str());
    kvtier::Result<kvtier::server::ListenerFds> fds =
        kvtier::server::TakeOver(path, std::chrono::seconds(kTakeOverTimeoutSeconds));
    if (!fds.ok()) return Fail(fds.status());
    inherited = *fds;
  }
  // A successor (kvtierd --take-over) has the sockets: stop as on SIGTERM.
  auto handed_over = [] { kill(getpid(), SIGTERM); };
  kvtier::Result<std::unique_ptr<kvtier::server::Server>> server = kvtier::server::Server::Start(
      config, inherited ? &*inherited : nullptr, handed_over);
  if (!server.ok()) return Fail(server.status());
  std::fprintf(stderr,
               "kvtierd: serving native tcp port %u, unix %s, resp port %u, http port %u, s3 port %s; "
               "G2 %llu MiB, G3 %s; %zu event loops; anonymous local tenant: %s; TLS %s\n",
               (*server)->native_port(),
               (*server)->unix_socket_path().empty() ? "off" : (*server)->unix_socket_path().c_str(),
               (*server)->resp_port(), (*server)->http_port(),
               (*server)->s3_port() == 0 ? "off" : std::to_string((*server)->s3_port()).c_str(),
               static_cast<unsigned long long>(config.store.memory.capacity_bytes >> 20),
               config.store.disk.dir.empty() ? "off" : config.StoreOptions().disk.dir.c_str(),
               (*server)->num_loops(),
               config.anonymous_tenant.empty() ? "(none)" : config.anonymous_tenant.c_str(),
               !config.tls.enabled() ? "off"
               : config.tls.require_client_cert ? "1.3 (client certificates required)"
                                                : "1.3");
  // The port file is written once kvtierd serves, and again once G2 has taken its memory.
  std::atomic<bool> stopping{false};
  std::thread provisioned_writer;
  if (!port_file.empty()) {
    s = WritePortFile(port_file, **server, /*provisioned=*/false);
    if (!s.ok()) return Fail(s);
    provisioned_writer = std::thread([&] {
      while (!stopping.load()) {
        if (!(*server)->WaitMemoryProvisioned(std::chrono::milliseconds(100))) continue;
        if (Status w = WritePortFile(port_file, **server, /*provisioned=*/true); !w.ok()) {
          std::fprintf(stderr, "kvtierd: %s\n", w.ToString().c_str());
        }
        return;
      }
    });
  }

  // While serving, this thread gives the kernel back the freed heap pages every few seconds:
  // without it, resident memory keeps the high-water mark of every arena's transient buffers
  // and the free space fragmentation leaves (docs/operations.md, "Soak").
  int sig = 0;
  for (;;) {
    const timespec interval{kHeapReleaseIntervalSeconds, 0};
    sig = sigtimedwait(&signals, nullptr, &interval);
    if (sig > 0) break;
    kvtier::ReleaseFreeHeapPages();
  }
  if ((*server)->handed_over()) {
    std::fprintf(stderr, "kvtierd: handed the sockets to a new kvtierd; draining and stopping\n");
  } else {
    std::fprintf(stderr, "kvtierd: %s received, shutting down\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  stopping = true;
  if (provisioned_writer.joinable()) provisioned_writer.join();
  (*server)->Shutdown();
  std::fprintf(stderr, "kvtierd: stopped\n");
  return 0;
}
