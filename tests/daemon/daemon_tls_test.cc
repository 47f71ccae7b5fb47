// TLS 1.3 on kvtierd's TCP listeners, end to end: a self-signed certificate made with the
// openssl CLI, the C++ client over TLS, and raw OpenSSL clients for what the C++ client never
// does (TLS 1.2 only, RESP over TLS). Skipped when the openssl CLI is missing.

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

// A self-signed certificate for localhost and 127.0.0.1, made once per test binary.
class Certificate {
 public:
  static const Certificate& Get() {
    static const Certificate* cert = new Certificate();
    return *cert;
  }
  bool ok() const { return ok_; }
  std::string cert_file() const { return (dir_ / "cert.pem").string(); }
  std::string key_file() const { return (dir_ / "key.pem").string(); }
  // The [tls] section for Daemon's extra config.
  std::string Toml(const std::string& more = "") const {
    return "[tls]\ncert_file = \"" + cert_file() + "\"\nkey_file = \"" + key_file() + "\"\n" + more;
  }

 private:
  Certificate() {
    dir_ = std::filesystem::temp_directory_path() / ("kvtier_tls_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
                      " -days 2 -subj /CN=localhost"
                      " -addext subjectAltName=DNS:localhost,IP:127.0.0.1"
                      " -keyout " + key_file() + " -out " + cert_file() + " >/dev/null 2>&1";
    ok_ = std::system(cmd.c_str()) == 0;
  }
  std::filesystem::path dir_;
  bool ok_ = false;
};

#define REQUIRE_CERTIFICATE()                                                \
  if (!Certificate::Get().ok()) GTEST_SKIP() << "the openssl CLI is not available"

ClientOptions TlsOptions(const Daemon& d) {
  ClientOptions o;
  o.endpoint = d.tcp_endpoint();
  o.tls.enabled = true;
  o.tls.ca_file = Certificate::Get().cert_file();
  return o;
}

// A raw blocking OpenSSL client, for what the C++ client never does.
class RawTlsClient {
 public:
  // Connects and handshakes with TLS versions [TLS 1.2, max_version].
  RawTlsClient(uint16_t port, int max_version) {
    fd_ = ConnectTcp(port);
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx_, max_version);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    connected_ = SSL_connect(ssl_) == 1;
    ERR_clear_error();
  }
  ~RawTlsClient() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
    close(fd_);
  }
  bool connected() const { return connected_; }
  std::string version() const { return SSL_get_version(ssl_); }
  void Write(std::string_view bytes) {
    while (!bytes.empty()) {
      int n = SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size()));
      if (n <= 0) return;  // The server may have closed on us; the reads will tell.
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  std::string Read(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      int r = SSL_read(ssl_, out.data() + got, static_cast<int>(n - got));
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    out.resize(got);
    return out;
  }

 private:
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  bool connected_ = false;
};

TEST(DaemonTlsTest, RoundTripOverTlsWhileTheUnixSocketStaysPlaintext) {
  REQUIRE_CERTIFICATE();
  Daemon d(Certificate::Get().Toml());
  ASSERT_TRUE(d.running());
  ClientOptions o = TlsOptions(d);
  o.tenant = "acme";
  o.token = "acme-token";
  o.connections = 2;
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->server_info().tenant, "acme");

  // Values across TLS record boundaries: tiny, exactly 16 KiB, 3 MiB.
  std::vector<std::vector<std::byte>> values = {RandomValue(1, 1), RandomValue(2, 16384),
                                                RandomValue(3, 3 << 20)};
  std::vector<BlockWrite> writes;
  for (uint32_t i = 0; i < values.size(); ++i) {
    writes.push_back({TestKey(i), values[i], std::nullopt, 0, std::nullopt});
  }
  for (const Status& s : (*c)->PutMany(writes)) ASSERT_TRUE(s.ok()) << s.ToString();
  BlockValues got =
      (*c)->GetMany(std::vector<BlockKey>{TestKey(0), TestKey(1), TestKey(2), TestKey(99)});
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(got.values[i].ok()) << got.values[i].status().ToString();
    EXPECT_TRUE(std::equal(got.values[i]->begin(), got.values[i]->end(), values[i].begin(),
                           values[i].end())) << i;
  }
  EXPECT_EQ(got.values[3].status().code(), StatusCode::kNotFound);

  // Many pipelined requests in flight at once over the TLS connections.
  std::vector<std::future<BlockValues>> pending;
  std::vector<BlockKey> keys(64, TestKey(2));
  for (size_t i = 0; i < keys.size(); ++i) pending.push_back((*c)->GetManyAsync(std::span(&keys[i], 1)));
  for (auto& f : pending) {
    BlockValues v = f.get();
    ASSERT_TRUE(v.values[0].ok()) << v.values[0].status().ToString();
    EXPECT_EQ(v.values[0]->size(), values[2].size());
  }

  // The "tls://" endpoint form, and the Unix socket in plaintext.
  ClientOptions scheme;
  scheme.endpoint = "tls://127.0.0.1:" + std::to_string(d.native_port());
  scheme.tls.ca_file = Certificate::Get().cert_file();
  Result<std::unique_ptr<Client>> by_scheme = Client::Connect(scheme);
  ASSERT_TRUE(by_scheme.ok()) << by_scheme.status().ToString();
  EXPECT_TRUE((*by_scheme)->Ping().ok());
  ClientOptions local;
  local.endpoint = d.unix_endpoint();
  Result<std::unique_ptr<Client>> plain = Client::Connect(local);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE((*plain)->Ping().ok());
}

TEST(DaemonTlsTest, AStoppedServerFailsCallsAfterTheIoTimeoutNotNever) {
  REQUIRE_CERTIFICATE();
  Daemon d(Certificate::Get().Toml());
  ASSERT_TRUE(d.running());
  ClientOptions o = TlsOptions(d);
  o.io_timeout_ms = 200;
  o.retry_timeout_ms = 0;
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Ping().ok());
  d.Pause();
  Status stalled = (*c)->Ping();
  EXPECT_EQ(stalled.code(), StatusCode::kUnavailable);
  EXPECT_NE(stalled.message().find("no reply from kvtierd"), std::string::npos) << stalled.ToString();
  d.Resume();
  EXPECT_TRUE((*c)->Ping().ok());  // A new connection replaces the one given up.
}

TEST(DaemonTlsTest, TheServerIsVerified) {
  REQUIRE_CERTIFICATE();
  Daemon d(Certificate::Get().Toml());
  ClientOptions o = TlsOptions(d);
  o.tls.ca_file.clear();  // The system trust store does not know our self-signed certificate.
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("certificate"), std::string_view::npos) << c.status().ToString();

  o = TlsOptions(d);
  o.tls.server_name = "kvtier.example.com";  // Not a name the certificate carries.
  c = Client::Connect(o);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("certificate"), std::string_view::npos) << c.status().ToString();

  o = TlsOptions(d);
  o.tls.server_name = "localhost";
  c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

TEST(DaemonTlsTest, PlaintextClientIsClosedCleanlyWhileOthersCarryOn) {
  REQUIRE_CERTIFICATE();
  Daemon d(Certificate::Get().Toml());
  Result<std::unique_ptr<Client>> tls = Client::Connect(TlsOptions(d));
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  std::vector<std::byte> v = RandomValue(9, 1 << 20);
  ASSERT_TRUE((*tls)->Put(TestKey(9), v).ok());

  // The C++ client without TLS: a clear error, no hang.
  ClientOptions plain;
  plain.endpoint = d.tcp_endpoint();
  EXPECT_EQ(Client::Connect(plain).status().code(), StatusCode::kUnavailable);
  // A raw plaintext HELLO: the server closes on it.
  int fd = ConnectTcp(d.native_port());
  SendAll(fd, HelloFrame(1));
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);

  Result<std::vector<std::byte>> got = (*tls)->Get(TestKey(9));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, v);
}

TEST(DaemonTlsTest, Tls12OnlyClientIsRefused) {
  REQUIRE_CERTIFICATE();
  Daemon d(Certificate::Get().Toml());
  RawTlsClient old(d.native_port(), TLS1_2_VERSION);
  EXPECT_FALSE(old.connected());
  RawTlsClient current(d.native_port(), TLS1_3_VERSION);
  ASSERT_TRUE(current.connected());
  EXPECT_EQ(current.version(), "TLSv1.3");
  current.Write(HelloFrame(1));
  std::string head = current.Read(protocol::kHeaderSize);
  ASSERT_EQ(head.size(), protocol::kHeaderSize);
  protocol::DecodedFrame f = protocol::DecodeFrame(
      {reinterpret_cast<const std::byte*>(head.data()), head.size()}, 1 << 20);
  EXPECT_EQ(f.header.request_id, 1u);
}

TEST(DaemonTlsTest, RespAndHttpOverTlsWhenConfigured) {
  REQUIRE_CERTIFICATE();
  Daemon d(Certificate::Get().Toml("resp = true\nhttp = true\n"));
  RawTlsClient resp(d.resp_port(), TLS1_3_VERSION);
  ASSERT_TRUE(resp.connected());
  resp.Write("*1\r\n$4\r\nPING\r\n");
  EXPECT_EQ(resp.Read(7), "+PONG\r\n");
  RawTlsClient http(d.http_port(), TLS1_3_VERSION);
  ASSERT_TRUE(http.connected());
  http.Write("GET /healthz HTTP/1.0\r\n\r\n");
  std::string answer = http.Read(17);
  EXPECT_EQ(answer, "HTTP/1.1 200 OK\r\n");
}

TEST(DaemonTlsTest, ClientThatDoesNotReadIsThrottledAndThenServedInOrder) {
  // Backpressure with requests buffered inside OpenSSL (read-ahead), where epoll cannot see
  // them: once the client reads, the server must come back for them by itself.
  REQUIRE_CERTIFICATE();
  Daemon d("max_output_bytes = \"1MiB\"\n" + Certificate::Get().Toml());
  Result<std::unique_ptr<Client>> writer = Client::Connect(TlsOptions(d));
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  std::vector<std::byte> v = RandomValue(5, 1 << 20);
  ASSERT_TRUE((*writer)->Put(TestKey(5), v).ok());
  RawTlsClient slow(d.native_port(), TLS1_3_VERSION);
  ASSERT_TRUE(slow.connected());
  std::string keys;
  protocol::EncodeKeyList(std::vector<BlockKey>{TestKey(5)}, &keys);
  // One TLS record per request, so that the server reads many records ahead at once.
  slow.Write(HelloFrame(1));
  for (uint64_t id = 2; id < 66; ++id) {
    slow.Write(NativeFrame(static_cast<uint8_t>(protocol::Opcode::kGetMany), id, keys));
  }
  EXPECT_TRUE((*writer)->Ping().ok());  // Others are served meanwhile.
  for (uint64_t id = 1; id < 66; ++id) {
    std::string head = slow.Read(protocol::kHeaderSize);
    ASSERT_EQ(head.size(), protocol::kHeaderSize) << "reply " << id;
    protocol::DecodedFrame f = protocol::DecodeFrame(
        {reinterpret_cast<const std::byte*>(head.data()), head.size()}, 1u << 30);
    ASSERT_EQ(f.header.request_id, id);
    std::string body = slow.Read(f.header.body_length);
    ASSERT_EQ(body.size(), f.header.body_length);
    if (id == 1) continue;
    auto items = protocol::DecodeGetMany({reinterpret_cast<const std::byte*>(body.data()), body.size()});
    ASSERT_TRUE(items.ok());
    ASSERT_TRUE((*items)[0].ok());
    EXPECT_TRUE(std::equal((*items)[0]->begin(), (*items)[0]->end(), v.begin(), v.end()));
  }
}

TEST(DaemonTlsTest, SilentClientIsDroppedAtTheIdleTimeoutDuringTheHandshake) {
  REQUIRE_CERTIFICATE();
  Daemon d("idle_timeout_seconds = 1\n" + Certificate::Get().Toml());
  int silent = ConnectTcp(d.native_port());
  EXPECT_TRUE(ClosedByPeer(silent));  // Blocks until the server gives up on the handshake.
  close(silent);
  Result<std::unique_ptr<Client>> c = Client::Connect(TlsOptions(d));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Ping().ok());
}

}  // namespace
}  // namespace kvtier::daemon_test
