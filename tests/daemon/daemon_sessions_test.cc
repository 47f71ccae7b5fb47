// Sessions, dtype hints and scoped deletions over the wire: the native protocol (C++ client and
// raw frames) and the HTTP admin API. Tests named *DeletesSession* / *DeletesTenant* / *Shred*
// need Store::DeleteSession / DeleteTenant / ShredTenant.

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

using protocol::Opcode;

std::unique_ptr<Client> Connect(const Daemon& d, const std::string& tenant = "",
                                const std::string& token = "") {
  ClientOptions o;
  o.endpoint = d.tcp_endpoint();
  o.tenant = tenant;
  o.token = token;
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Puts blocks 0..n-1 (ids first_key + i) with `session` and a bf16 dtype.
void PutSession(Client* c, uint32_t first_key, uint32_t n, SessionId session) {
  std::vector<std::vector<std::byte>> values;
  std::vector<BlockWrite> writes;
  for (uint32_t i = 0; i < n; ++i) values.push_back(PatternValue(first_key + i, 4096));
  for (uint32_t i = 0; i < n; ++i) {
    writes.push_back({TestKey(first_key + i), values[i],
                      i > 0 ? std::optional<BlockKey>(TestKey(first_key + i - 1)) : std::nullopt,
                      session, KvDtype::kBf16});
  }
  for (const Status& s : c->PutMany(writes)) ASSERT_TRUE(s.ok()) << s.ToString();
}

size_t CountPresent(Client* c, uint32_t first_key, uint32_t n) {
  std::vector<BlockKey> keys;
  for (uint32_t i = 0; i < n; ++i) keys.push_back(TestKey(first_key + i));
  Result<std::vector<std::optional<TierLevel>>> e = c->Exists(keys);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  size_t present = 0;
  if (e.ok()) {
    for (const auto& t : *e) present += t.has_value();
  }
  return present;
}

TEST(DaemonSessionsTest, SessionAndDtypeTravelWithPutsAndValuesRoundTrip) {
  Daemon d;
  auto c = Connect(d, "acme", "acme-token");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->server_info().features & protocol::kFeatureSessions, 0u);
  std::vector<std::byte> v = PatternValue(1, 10000);
  PutOptions options;
  options.session = 5;
  options.dtype = KvDtype::kFp8E4M3;
  ASSERT_TRUE(c->Put(TestKey(1), v, options).ok());
  Result<std::vector<std::byte>> got = c->Get(TestKey(1));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, v);
}

TEST(DaemonSessionsTest, BadSessionRequestsAreNamedAndTheConnectionCarriesOn) {
  Daemon d;
  auto c = Connect(d);
  EXPECT_EQ(c->DeleteSession(0).status().code(), StatusCode::kInvalidArgument);

  int fd = ConnectTcp(d.native_port());
  SendAll(fd, HelloFrame(1));
  ASSERT_TRUE(ReadReply(fd).status.ok());
  // The old DELETE scope 1 (session as a string) is retired; the error says what to use.
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kDelete), 2, std::string("\x01\x02\x00id", 5)));
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("DELETE_SESSION"), std::string_view::npos) << r.status.ToString();
  // DELETE_SESSION with a short body, DELETE_TENANT with a body.
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kDeleteSession), 3, "1234"));
  EXPECT_EQ(ReadReply(fd).status.code(), StatusCode::kInvalidArgument);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kDeleteTenant), 4, "x"));
  EXPECT_EQ(ReadReply(fd).status.code(), StatusCode::kInvalidArgument);
  // A PUT_MANY entry with a dtype outside the enum.
  std::string body;
  protocol::EncodePutDirectory(
      std::vector<protocol::PutEntry>{{TestKey(1), std::nullopt, 3, 9, KvDtype::kBf16}}, &body);
  body[4 + 32 + 1 + 8] = 42;  // After key, flags and session: the dtype byte.
  body += "abc";
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kPutMany), 5, body));
  r = ReadReply(fd);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("dtype"), std::string_view::npos) << r.status.ToString();
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kPing), 6, ""));
  EXPECT_TRUE(ReadReply(fd).status.ok());
  close(fd);
}

TEST(DaemonSessionsTest, NativeDeletesSessionOfItsOwnTenantOnly) {
  Daemon d;
  auto acme = Connect(d, "acme", "acme-token");
  auto other = Connect(d);
  ASSERT_NE(acme, nullptr);
  PutSession(acme.get(), 100, 5, 41);
  PutSession(acme.get(), 200, 3, 42);
  PutSession(other.get(), 100, 5, 41);  // Same keys and session id, another tenant.

  Result<DeletionReport> report = acme->DeleteSession(41);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->memory_blocks, 5u);
  EXPECT_EQ(CountPresent(acme.get(), 100, 5), 0u);
  EXPECT_EQ(CountPresent(acme.get(), 200, 3), 3u);
  EXPECT_EQ(CountPresent(other.get(), 100, 5), 5u);

  Result<DeletionReport> again = acme->DeleteSession(41);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->memory_blocks, 0u);
}

TEST(DaemonSessionsTest, NativeDeletesTenantBlocksAndLeavesOtherTenants) {
  Daemon d;
  auto acme = Connect(d, "acme", "acme-token");
  auto other = Connect(d);
  PutSession(acme.get(), 300, 4, 0);
  PutSession(acme.get(), 400, 2, 7);
  PutSession(other.get(), 300, 4, 0);
  Result<DeletionReport> report = acme->DeleteAllBlocks();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->memory_blocks, 6u);
  EXPECT_EQ(CountPresent(acme.get(), 300, 4) + CountPresent(acme.get(), 400, 2), 0u);
  EXPECT_EQ(CountPresent(other.get(), 300, 4), 4u);
  // The tenant still works: new puts are stored.
  PutSession(acme.get(), 500, 1, 0);
  EXPECT_EQ(CountPresent(acme.get(), 500, 1), 1u);
}

std::string Body(const std::string& response) {
  size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

TEST(DaemonSessionsTest, AdminApiRejectsBadRequestsClearly) {
  Daemon d;
  std::string r = Http(d.http_port(), "DELETE /admin/sessions/abc?tenant=acme HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
  r = Http(d.http_port(), "DELETE /admin/sessions/0?tenant=acme HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
  r = Http(d.http_port(), "DELETE /admin/sessions/5?tenant=nobody HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 404")) << r;
  r = Http(d.http_port(), "DELETE /admin/tenants/nobody HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 404")) << r;
  r = Http(d.http_port(), "GET /admin/tenants/acme/shred HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 405")) << r;
  r = Http(d.http_port(), "POST /admin/tenants/acme HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 405")) << r;
  r = Http(d.http_port(), "DELETE /admin/tenants/acme/extra HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 404")) << r;
}

TEST(DaemonSessionsTest, AdminDeletesSessionAndTenant) {
  Daemon d;
  auto acme = Connect(d, "acme", "acme-token");
  auto other = Connect(d);
  PutSession(acme.get(), 100, 3, 12345678901234ull);
  PutSession(acme.get(), 200, 2, 9);
  PutSession(other.get(), 100, 3, 12345678901234ull);

  std::string r = Http(d.http_port(),
                       "DELETE /admin/sessions/12345678901234?tenant=acme HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_NE(Body(r).find("\"memory_blocks\":3"), std::string::npos) << r;
  EXPECT_NE(Body(r).find("\"session\":12345678901234"), std::string::npos) << r;
  EXPECT_EQ(CountPresent(acme.get(), 100, 3), 0u);
  EXPECT_EQ(CountPresent(acme.get(), 200, 2), 2u);
  EXPECT_EQ(CountPresent(other.get(), 100, 3), 3u);

  r = Http(d.http_port(), "DELETE /admin/tenants/acme HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_NE(Body(r).find("\"memory_blocks\":2"), std::string::npos) << r;
  EXPECT_EQ(CountPresent(acme.get(), 200, 2), 0u);
  EXPECT_EQ(CountPresent(other.get(), 100, 3), 3u);
}

TEST(DaemonSessionsTest, AdminHintsReachTheSessionOrSayWhyNot) {
  Daemon d;
  auto acme = Connect(d, "acme", "acme-token");
  PutSession(acme.get(), 100, 3, 77);
  auto post = [&](const std::string& target, const std::string& body) {
    return Http(d.http_port(), "POST " + target + " HTTP/1.0\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n" + body);
  };
  std::string r = post("/admin/sessions/77/hint?tenant=acme", R"({"retain_s": 60})");
  ASSERT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_NE(Body(r).find("\"session\":77"), std::string::npos) << r;
  r = post("/admin/sessions/77/hint?tenant=acme", R"({"finished": true})");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  // A hint orders evictions; it removes nothing.
  EXPECT_EQ(CountPresent(acme.get(), 100, 3), 3u);
  // Bad hints: a clear 4xx each.
  EXPECT_TRUE(post("/admin/sessions/77/hint?tenant=acme", R"({"retain_s": 31536000})")
                  .starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(post("/admin/sessions/77/hint?tenant=acme", R"({"retain_s": -5})")
                  .starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(post("/admin/sessions/77/hint?tenant=acme", R"({"finished": true, "retain_s": 5})")
                  .starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(post("/admin/sessions/77/hint?tenant=acme", "not json").starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(post("/admin/sessions/0/hint?tenant=acme", R"({"finished": true})")
                  .starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(post("/admin/sessions/78/hint?tenant=acme", R"({"finished": true})")
                  .starts_with("HTTP/1.1 404"));
  EXPECT_TRUE(post("/admin/sessions/77/hint?tenant=nobody", R"({"finished": true})")
                  .starts_with("HTTP/1.1 404"));
  EXPECT_TRUE(Http(d.http_port(), "GET /admin/sessions/77/hint?tenant=acme HTTP/1.0\r\n\r\n")
                  .starts_with("HTTP/1.1 405"));
  // Priority, alone or with a retention.
  r = post("/admin/sessions/77/hint?tenant=acme", R"({"retain_s": 30, "priority": "high"})");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  r = post("/admin/sessions/77/hint?tenant=acme", R"({"priority": "urgent"})");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
  EXPECT_NE(Body(r).find(R"({"error":"\"priority\": expected)"), std::string::npos) << r;
  EXPECT_TRUE(post("/admin/sessions/77/hint?tenant=acme", R"({"finished": true, "priority": "low"})")
                  .starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(post("/admin/sessions/77/hint?tenant=acme", "{}").starts_with("HTTP/1.1 400"));
}

TEST(DaemonSessionsTest, HintsTravelOverTheNativeProtocolAndResp) {
  Daemon d;
  auto acme = Connect(d, "acme", "acme-token");
  auto other = Connect(d);
  PutSession(acme.get(), 100, 3, 77);
  ASSERT_NE(acme->server_info().features & protocol::kFeatureHints, 0u);
  Store::SessionHint retain;
  retain.retain_seconds = 60;
  retain.priority = Store::SessionPriority::kLow;
  EXPECT_TRUE(acme->HintSession(77, retain).ok());
  // The Store's answers come back as they are: another tenant's session is not found, a
  // contradiction or a year's retention is refused with the reason.
  EXPECT_EQ(other->HintSession(77, retain).code(), StatusCode::kNotFound);
  EXPECT_EQ(acme->HintSession(78, retain).code(), StatusCode::kNotFound);
  Store::SessionHint bad = retain;
  bad.finished = true;
  EXPECT_EQ(acme->HintSession(77, bad).code(), StatusCode::kInvalidArgument);
  bad = Store::SessionHint{};
  bad.retain_seconds = 365 * 86400;
  const Status year = acme->HintSession(77, bad);
  EXPECT_EQ(year.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(year.message().find("max_hint_retain_seconds"), std::string::npos) << year.ToString();
  EXPECT_EQ(acme->HintSession(0, retain).code(), StatusCode::kInvalidArgument);
  // A hint orders evictions; it removes nothing.
  EXPECT_EQ(CountPresent(acme.get(), 100, 3), 3u);

  int fd = ConnectTcp(d.resp_port());
  SendAll(fd, Command({"AUTH", "acme", "acme-token"}) +
                  Command({"KVTIER.HINT", "77", "RETAIN", "30", "PRIORITY", "high"}) +
                  Command({"kvtier.hint", "77", "FINISHED"}) +
                  Command({"KVTIER.HINT", "78", "FINISHED"}) +
                  Command({"KVTIER.HINT", "77", "PRIORITY", "urgent"}) +
                  Command({"KVTIER.HINT", "77"}));
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "+OK\r\n");
  EXPECT_EQ(ReadResp(fd), "-ERR NOT_FOUND: session has no block in G2\r\n");
  EXPECT_TRUE(ReadResp(fd).starts_with("-ERR syntax error at 'PRIORITY'"));
  EXPECT_EQ(ReadResp(fd), "-ERR wrong number of arguments for 'kvtier.hint' command\r\n");
  close(fd);
}

TEST(DaemonSessionsTest, AdminShredWithoutAMasterKeyIsAConflict) {
  // The test daemon has no master key: nothing is encrypted, so there is nothing to shred and
  // the Store says FailedPrecondition (409), leaving the blocks in place.
  Daemon d;
  auto acme = Connect(d, "acme", "acme-token");
  PutSession(acme.get(), 100, 2, 0);
  std::string r = Http(d.http_port(), "POST /admin/tenants/acme/shred HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 409")) << r;
  EXPECT_NE(Body(r).find("FAILED_PRECONDITION"), std::string::npos) << r;
  EXPECT_EQ(CountPresent(acme.get(), 100, 2), 2u);
}

}  // namespace
}  // namespace kvtier::daemon_test
