// kvtierd's RESP2 and HTTP endpoints, byte for byte. (redis-cli, redis-benchmark, curl and
// promtool are exercised by daemon_tools_test.sh.)

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

// LMCache's RESP adapters SET each chunk once under a content hash: a SET of a new key must
// not delete anything nor announce a deletion to the other nodes through G4.
TEST(DaemonRespTest, SetOfANewKeyOrOfTheSameBytesDeletesNothing) {
  std::filesystem::path g4 = std::filesystem::temp_directory_path() /
                             ("kvtier_resp_g4_" + std::to_string(getpid()));
  std::filesystem::remove_all(g4);
  std::filesystem::create_directories(g4);
  {
    Daemon d("[shared]\nlocation = \"" + g4.string() + "\"\nnode_id = \"a\"\n");
    ASSERT_TRUE(d.running());
    ClientOptions o;
    o.endpoint = d.tcp_endpoint();
    auto native = std::move(Client::Connect(o)).value();
    int fd = ConnectTcp(d.resp_port());
    std::string pipeline;
    for (int i = 0; i < 200; ++i) pipeline += Command({"SET", "chunk:" + std::to_string(i), std::string(1000, 'a' + i % 26)});
    for (int i = 0; i < 200; ++i) pipeline += Command({"SET", "chunk:" + std::to_string(i), std::string(1000, 'a' + i % 26)});
    SendAll(fd, pipeline);
    for (int i = 0; i < 400; ++i) ASSERT_EQ(ReadResp(fd), "+OK\r\n") << i;
    Result<TenantStats> stats = native->Stats();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->deletes, 0u);
    EXPECT_EQ(stats->puts, 200u) << "a SET of the same bytes stores nothing";
    auto notices = [&] {
      std::filesystem::path dir = g4 / "kvtier-g4" / "v1" / "notices";
      if (!std::filesystem::exists(dir)) return 0;
      return static_cast<int>(std::distance(std::filesystem::directory_iterator(dir), {}));
    };
    EXPECT_EQ(notices(), 0);

    // A changed value replaces the old one, which is deleted everywhere and announced once.
    SendAll(fd, Command({"SET", "chunk:7", "changed"}) + Command({"GET", "chunk:7"}));
    EXPECT_EQ(ReadResp(fd), "+OK\r\n");
    EXPECT_EQ(ReadResp(fd), "$7\r\nchanged\r\n");
    stats = native->Stats();
    EXPECT_EQ(stats->deletes, 1u);
    EXPECT_EQ(notices(), 1);
    close(fd);
  }
  std::filesystem::remove_all(g4);
}

// The rest of a large request is awaited with SO_RCVLOWAT: a value arriving in small writes, and
// one followed by nothing (a truncated request), must behave as without it.
TEST(DaemonRespTest, SaveMakesWhatWasSetSurviveKillNine) {
  Daemon d;
  ASSERT_TRUE(d.running());
  int fd = ConnectTcp(d.resp_port());
  SendAll(fd, Command({"SET", "kept", "flushed before the crash"}) + Command({"SAVE"}) +
                  Command({"SAVE", "extra"}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "-ERR wrong number of arguments for 'save' command\r\n");
  close(fd);
  d.Kill();
  d.Start();
  fd = ConnectTcp(d.resp_port());
  SendAll(fd, Command({"GET", "kept"}));
  EXPECT_EQ(ReadResp(fd), "$24\r\nflushed before the crash\r\n");
  close(fd);
}

TEST(DaemonRespTest, AValueArrivingInSmallPiecesIsStored) {
  Daemon d;
  int fd = ConnectTcp(d.resp_port());
  std::string value(3 << 20, 'p');
  for (size_t i = 0; i < value.size(); i += 4099) value[i] = static_cast<char>(i);
  std::string cmd = Command({"SET", "pieces", value});
  for (size_t i = 0; i < cmd.size(); i += 1000) SendAll(fd, cmd.substr(i, 1000));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  SendAll(fd, Command({"GET", "pieces"}));
  EXPECT_EQ(ReadResp(fd), "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n");
  // A truncated request leaves the connection waiting; others are served, and closing it is seen.
  int cut = ConnectTcp(d.resp_port());
  SendAll(cut, cmd.substr(0, cmd.size() / 2));
  SendAll(fd, Command({"PING"}));
  EXPECT_EQ(ReadResp(fd), "+PONG\r\n");
  close(cut);
  close(fd);
}

TEST(DaemonRespTest, SetGetExistsDelAndFriends) {
  Daemon d;
  int fd = ConnectTcp(d.resp_port());
  SendAll(fd, Command({"PING"}));
  EXPECT_EQ(ReadResp(fd), "+PONG\r\n");
  std::string big(3 << 20, 'v');
  big[12345] = '\n';
  SendAll(fd, Command({"SET", "lmcache@key@0kv_bytes", big}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  SendAll(fd, Command({"GET", "lmcache@key@0kv_bytes"}));
  EXPECT_EQ(ReadResp(fd), "$" + std::to_string(big.size()) + "\r\n" + big + "\r\n");
  SendAll(fd, Command({"SET", "k", "one"}) + Command({"SET", "k", "two"}) + Command({"GET", "k"}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "$3\r\ntwo\r\n");  // SET replaces, as in Redis.
  SendAll(fd, Command({"EXISTS", "k", "nope", "k"}));
  EXPECT_EQ(ReadResp(fd), ":2\r\n");
  SendAll(fd, Command({"MSET", "a", "1", "b", "2"}) + Command({"MGET", "a", "nope", "b"}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n");
  SendAll(fd, Command({"DEL", "a", "b", "nope"}) + Command({"GET", "a"}));
  EXPECT_EQ(ReadResp(fd), ":2\r\n");
  EXPECT_EQ(ReadResp(fd), "$-1\r\n");
  SendAll(fd, Command({"SET", "nx", "1", "NX"}) + Command({"SET", "nx", "2", "NX"}) +
                  Command({"SET", "e", "v", "EX", "60"}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "$-1\r\n");
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  SendAll(fd, Command({"DBSIZE"}));
  EXPECT_EQ(ReadResp(fd), ":4\r\n");
  SendAll(fd, Command({"SELECT", "0"}) + Command({"SELECT", "1"}) + Command({"CLIENT", "SETNAME", "t"}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "-ERR DB index is out of range\r\n");
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  SendAll(fd, Command({"INFO"}));
  EXPECT_NE(ReadResp(fd).find("redis_version:"), std::string::npos);
  SendAll(fd, "PING inline\r\n");
  EXPECT_EQ(ReadResp(fd), "$6\r\ninline\r\n");
  close(fd);
}

TEST(DaemonRespTest, ErrorsAreTheOnesRedisClientsExpect) {
  Daemon d;
  int fd = ConnectTcp(d.resp_port());
  SendAll(fd, Command({"FLUSHALL", "ASYNC"}));
  EXPECT_EQ(ReadResp(fd), "-ERR unknown command 'FLUSHALL', with args beginning with: 'ASYNC' \r\n");
  SendAll(fd, Command({"GET"}));
  EXPECT_EQ(ReadResp(fd), "-ERR wrong number of arguments for 'get' command\r\n");
  SendAll(fd, Command({"HELLO", "3"}));
  EXPECT_TRUE(ReadResp(fd).starts_with("-NOPROTO"));
  SendAll(fd, Command({"HELLO", "2"}));
  EXPECT_TRUE(ReadResp(fd).starts_with("*14\r\n$6\r\nserver\r\n"));
  SendAll(fd, Command({"SET", "empty", ""}));
  EXPECT_EQ(ReadResp(fd), "-ERR kvtier does not store empty values\r\n");
  SendAll(fd, Command({"AUTH", "acme", "wrong"}));
  EXPECT_TRUE(ReadResp(fd).starts_with("-WRONGPASS"));
  SendAll(fd, Command({"SET", "k", std::string(4 * kMiB + 1, 'x')}));
  EXPECT_EQ(ReadResp(fd), "-ERR Protocol error: invalid bulk length\r\n");
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST(DaemonRespTest, AuthSelectsTheTenant) {
  Daemon d;
  int anon = ConnectTcp(d.resp_port());
  int acme = ConnectTcp(d.resp_port());
  SendAll(acme, Command({"AUTH", "acme-token"}));
  EXPECT_EQ(ReadResp(acme), "+OK\r\n");
  SendAll(acme, Command({"SET", "secret", "acme's"}));
  EXPECT_EQ(ReadResp(acme), "+OK\r\n");
  SendAll(anon, Command({"GET", "secret"}));
  EXPECT_EQ(ReadResp(anon), "$-1\r\n");
  SendAll(anon, Command({"AUTH", "acme", "acme-token"}) + Command({"GET", "secret"}));
  EXPECT_EQ(ReadResp(anon), "+OK\r\n");
  EXPECT_EQ(ReadResp(anon), "$6\r\nacme's\r\n");
  close(anon);
  close(acme);
}

TEST(DaemonRespTest, RespKeysAreSha256OfTheKeyInTheTenantsKeySpace) {
  Daemon d;
  int fd = ConnectTcp(d.resp_port());
  SendAll(fd, Command({"SET", "hello", "world"}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  ClientOptions o;
  o.endpoint = d.tcp_endpoint();
  auto c = std::move(Client::Connect(o)).value();
  // SHA256("kvtier/resp/v1" || "hello"), as docs/protocol.md specifies, computed by coreutils.
  std::string hex;
  {
    FILE* p = popen("printf %s 'kvtier/resp/v1hello' | sha256sum", "r");
    ASSERT_NE(p, nullptr);
    char buf[65] = {};
    ASSERT_EQ(fread(buf, 1, 64, p), 64u);
    pclose(p);
    hex = buf;
  }
  Result<std::vector<std::byte>> v = c->Get(*BlockKey::FromHex(hex));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(v->data()), v->size()), "world");
  close(fd);
}

TEST(DaemonHttpTest, HealthMetricsAndAdmin) {
  Daemon d;
  std::string health = Http(d.http_port(), "GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(health.starts_with("HTTP/1.1 200 OK\r\n"));
  EXPECT_TRUE(health.ends_with("\r\n\r\nok\n"));
  ClientOptions o;
  o.endpoint = d.tcp_endpoint();
  auto c = std::move(Client::Connect(o)).value();
  BlockKey key = *BlockKey::FromHex(std::string(64, 'a'));
  std::vector<std::byte> v(100, std::byte{1});
  ASSERT_TRUE(c->Put(key, v).ok());
  ASSERT_EQ(c->Get(key).status().code(), StatusCode::kOk);

  std::string metrics = Http(d.http_port(), "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(metrics.find("kvtier_tenant_puts_total{tenant=\"default\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("kvtier_request_duration_seconds_count{protocol=\"native\",op=\"put\"} 1\n"),
            std::string::npos);

  std::string pin = "{\"tenant\":\"default\",\"keys\":[\"" + key.ToHex() + "\"]}";
  std::string pinned = Http(d.http_port(), "POST /admin/pin HTTP/1.1\r\nConnection: close\r\nContent-Length: " +
                                               std::to_string(pin.size()) + "\r\n\r\n" + pin);
  EXPECT_NE(pinned.find("\"status\":\"OK\""), std::string::npos) << pinned;
  std::string tenants = Http(d.http_port(), "GET /admin/tenants HTTP/1.0\r\n\r\n");
  EXPECT_NE(tenants.find("\"pinned_blocks\":1"), std::string::npos) << tenants;
  std::string del = Http(d.http_port(), "DELETE /admin/blocks/" + key.ToHex() + "?tenant=default HTTP/1.0\r\n\r\n");
  EXPECT_NE(del.find("{\"deleted\":true}"), std::string::npos) << del;
  EXPECT_EQ(c->Get(key).status().code(), StatusCode::kNotFound);
  std::string again = Http(d.http_port(), "DELETE /admin/blocks/" + key.ToHex() + "?tenant=default HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(again.starts_with("HTTP/1.1 404"));
  std::string bad = Http(d.http_port(), std::string(20000, 'G'));
  EXPECT_TRUE(bad.starts_with("HTTP/1.1 400")) << bad;
  std::string long_head = Http(d.http_port(), "GET /healthz HTTP/1.1\r\nX: " + std::string(20000, 'a'));
  EXPECT_TRUE(long_head.starts_with("HTTP/1.1 431")) << long_head;
}

}  // namespace
}  // namespace kvtier::daemon_test
