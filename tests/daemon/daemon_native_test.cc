// kvtierd's native protocol end to end, through the C++ client and through raw bytes.

#include <poll.h>

#include <algorithm>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

using protocol::Opcode;

std::unique_ptr<Client> Connect(const std::string& endpoint, const std::string& tenant = "",
                                const std::string& token = "") {
  ClientOptions o;
  o.endpoint = endpoint;
  o.tenant = tenant;
  o.token = token;
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

bool Same(std::span<const std::byte> a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size()) == 0;
}

std::string Chars(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

// A PUT_MANY body: the directory of `keys` with `values`' sizes, then the values.
std::string PutManyBody(const std::vector<BlockKey>& keys,
                        const std::vector<std::vector<std::byte>>& values) {
  std::vector<protocol::PutEntry> entries;
  for (size_t i = 0; i < keys.size(); ++i) {
    protocol::PutEntry e;
    e.key = keys[i];
    e.size = values[i].size();
    entries.push_back(e);
  }
  std::string body;
  protocol::EncodePutDirectory(entries, &body);
  for (const auto& v : values) body += Chars(v);
  return body;
}

// G2's bytes in use, from /metrics.
double G2Used(const Daemon& d) { return Metric(d, "kvtier_tier_used_bytes{tier=\"g2\"}"); }

TEST(DaemonNativeTest, RoundTripsOverTcpAndUnixSocket) {
  Daemon d;
  ASSERT_TRUE(d.running());
  auto tcp = Connect(d.tcp_endpoint());
  ASSERT_NE(tcp, nullptr);
  EXPECT_EQ(tcp->server_info().tenant, "default");
  EXPECT_EQ(tcp->server_info().max_block_bytes, 4 * kMiB);
  EXPECT_TRUE(tcp->Ping().ok());

  std::vector<std::vector<std::byte>> values = {RandomValue(1, 100), RandomValue(2, 3 * kMiB),
                                                RandomValue(3, 4096)};
  std::vector<BlockWrite> writes;
  for (uint32_t i = 0; i < values.size(); ++i) {
    writes.push_back({TestKey(i), values[i],
                      i > 0 ? std::optional<BlockKey>(TestKey(i - 1)) : std::nullopt, 0,
                      std::nullopt});
  }
  for (const Status& s : tcp->PutMany(writes)) EXPECT_TRUE(s.ok()) << s.ToString();

  auto unix_client = Connect(d.unix_endpoint());
  ASSERT_NE(unix_client, nullptr);
  std::vector<BlockKey> keys = {TestKey(0), TestKey(1), TestKey(2), TestKey(99)};
  BlockValues got = unix_client->GetMany(keys);
  ASSERT_EQ(got.values.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(got.values[i].ok()) << got.values[i].status().ToString();
    EXPECT_TRUE(Same(*got.values[i], values[i])) << i;
  }
  EXPECT_EQ(got.values[3].status().code(), StatusCode::kNotFound);

  Result<PrefixMatch> m = unix_client->LookupPrefix(keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->num_blocks, 3u);
  EXPECT_EQ(m->tiers, std::vector<TierLevel>(3, TierLevel::kG2));
  auto exists = unix_client->Exists(std::vector<BlockKey>{TestKey(1), TestKey(99)});
  ASSERT_TRUE(exists.ok());
  EXPECT_EQ((*exists)[0], TierLevel::kG2);
  EXPECT_FALSE((*exists)[1].has_value());

  EXPECT_TRUE(tcp->PinMany(std::vector<BlockKey>{TestKey(0)})[0].ok());
  EXPECT_EQ(tcp->UnpinMany(std::vector<BlockKey>{TestKey(1)})[0].code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(tcp->UnpinMany(std::vector<BlockKey>{TestKey(0)})[0].ok());
  EXPECT_TRUE(tcp->Prefetch(keys).ok());

  EXPECT_TRUE(tcp->Delete(TestKey(2)).ok());
  EXPECT_EQ(tcp->Get(TestKey(2)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tcp->Delete(TestKey(2)).code(), StatusCode::kNotFound);
  Result<std::vector<std::byte>> one = tcp->Get(TestKey(0));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, values[0]);

  Result<TenantStats> stats = tcp->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->name, "default");
  EXPECT_EQ(stats->puts, 3u);
  EXPECT_EQ(stats->blocks, 2u);
}

TEST(DaemonNativeTest, GetManyIntoReadsStraightIntoTheCallersBuffers) {
  Daemon d;
  ASSERT_TRUE(d.running());
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  std::vector<std::vector<std::byte>> values = {RandomValue(1, 100), RandomValue(2, 3 * kMiB),
                                                RandomValue(3, 4096)};
  for (uint32_t i = 0; i < values.size(); ++i) ASSERT_TRUE(c->Put(TestKey(i), values[i]).ok());

  // Exact, larger, smaller (not written), and a miss.
  std::vector<std::vector<std::byte>> bufs = {std::vector<std::byte>(100),
                                              std::vector<std::byte>(4 * kMiB, std::byte{0xab}),
                                              std::vector<std::byte>(4095, std::byte{0xcd}),
                                              std::vector<std::byte>(10)};
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  std::vector<BlockKey> keys = {TestKey(0), TestKey(1), TestKey(2), TestKey(99)};
  std::vector<Result<size_t>> got = c->GetManyInto(keys, outs);
  ASSERT_EQ(got.size(), 4u);
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(*got[0], 100u);
  EXPECT_TRUE(Same(outs[0], values[0]));
  ASSERT_TRUE(got[1].ok()) << got[1].status().ToString();
  EXPECT_EQ(*got[1], 3 * kMiB);
  EXPECT_TRUE(Same(outs[1].first(3 * kMiB), values[1]));
  EXPECT_EQ(bufs[1][3 * kMiB], std::byte{0xab}) << "wrote past the value";
  EXPECT_EQ(got[2].status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(std::count(bufs[2].begin(), bufs[2].end(), std::byte{0xcd}), 4095) << "a value that does not fit must not be written";
  EXPECT_EQ(got[3].status().code(), StatusCode::kNotFound);

  // More than one reply holds (max_frame_bytes is 4 MiB + 64 KiB): split into several requests.
  std::vector<BlockWrite> writes;
  std::vector<std::vector<std::byte>> many;
  for (uint32_t i = 0; i < 24; ++i) many.push_back(RandomValue(100 + i, kMiB + i));
  for (uint32_t i = 0; i < 24; ++i) writes.push_back({TestKey(100 + i), many[i], std::nullopt, 0, std::nullopt});
  for (const Status& s : c->PutMany(writes)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<BlockKey> many_keys;
  std::vector<std::vector<std::byte>> many_bufs;
  for (uint32_t i = 0; i < 24; ++i) {
    many_keys.push_back(TestKey(100 + i));
    many_bufs.emplace_back(kMiB + i);
  }
  std::vector<std::span<std::byte>> many_outs(many_bufs.begin(), many_bufs.end());
  got = c->GetManyInto(many_keys, many_outs);
  for (uint32_t i = 0; i < 24; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    EXPECT_TRUE(Same(many_outs[i], many[i])) << i;
  }
}

TEST(DaemonNativeTest, CallsRetryWhileKvtierdRestarts) {
  Daemon d;
  ASSERT_TRUE(d.running());
  ClientOptions o;
  o.endpoint = d.unix_endpoint();
  o.connections = 2;
  auto retrying = std::move(Client::Connect(o)).value();
  o.retry_timeout_ms = 0;
  auto once = std::move(Client::Connect(o)).value();
  std::vector<std::byte> value = RandomValue(7, 64 * 1024);
  ASSERT_TRUE(retrying->Put(TestKey(1), value).ok());

  ASSERT_EQ(d.Stop(), 0);
  EXPECT_EQ(once->Ping().code(), StatusCode::kUnavailable) << "without retries, the first failure is returned";
  // Put while kvtierd is down: it retries until the daemon is back.
  std::future<Status> put = std::async(std::launch::async, [&] { return retrying->Put(TestKey(2), value); });
  d.Start();
  ASSERT_TRUE(d.running());
  Status s = put.get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  Result<std::vector<std::byte>> back = retrying->Get(TestKey(2));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(Same(*back, value));
  std::vector<std::byte> buf(value.size());
  std::vector<std::span<std::byte>> outs = {buf};
  EXPECT_TRUE(retrying->GetManyInto(std::vector<BlockKey>{TestKey(2)}, outs)[0].ok());
  EXPECT_TRUE(once->Ping().ok()) << "the broken connection is replaced on the next call";
}

TEST(DaemonNativeTest, TenantsAuthenticateAndAreIsolated) {
  Daemon d;
  auto anon = Connect(d.tcp_endpoint());
  auto acme = Connect(d.tcp_endpoint(), "acme", "acme-token");
  ASSERT_NE(acme, nullptr);
  EXPECT_EQ(acme->server_info().tenant, "acme");
  std::vector<std::byte> v = RandomValue(7, 1000);
  ASSERT_TRUE(acme->Put(TestKey(7), v).ok());
  EXPECT_EQ(anon->Get(TestKey(7)).status().code(), StatusCode::kNotFound);

  ClientOptions wrong;
  wrong.endpoint = d.tcp_endpoint();
  wrong.tenant = "acme";
  wrong.token = "guess";
  EXPECT_EQ(Client::Connect(wrong).status().code(), StatusCode::kUnauthenticated);
  wrong.tenant = "acme";
  wrong.token = "";
  EXPECT_EQ(Client::Connect(wrong).status().code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(acme->Ping().ok());  // The failed logins did not disturb anyone.
}

TEST(DaemonNativeTest, PipelinedAsyncCallsAllComplete) {
  Daemon d;
  auto c = Connect(d.tcp_endpoint());
  constexpr uint32_t kRequests = 64;
  std::vector<std::vector<std::byte>> values;
  for (uint32_t i = 0; i < kRequests; ++i) values.push_back(RandomValue(100 + i, 10000 + i));
  std::vector<std::future<std::vector<Status>>> puts;
  for (uint32_t i = 0; i < kRequests; ++i) {
    BlockWrite w{TestKey(100 + i), values[i], std::nullopt, 0, std::nullopt};
    puts.push_back(c->PutManyAsync(std::span(&w, 1)));
  }
  for (auto& f : puts) EXPECT_TRUE(f.get()[0].ok());
  std::vector<std::future<BlockValues>> gets;
  std::vector<BlockKey> keys;
  for (uint32_t i = 0; i < kRequests; ++i) keys.push_back(TestKey(100 + i));
  for (uint32_t i = 0; i < kRequests; ++i) gets.push_back(c->GetManyAsync(std::span(&keys[i], 1)));
  for (uint32_t i = 0; i < kRequests; ++i) {
    BlockValues v = gets[i].get();
    ASSERT_TRUE(v.values[0].ok());
    EXPECT_TRUE(Same(*v.values[0], values[i])) << i;
  }
}

TEST(DaemonNativeTest, RawPipelinedFramesAreAnsweredWithTheirIds) {
  Daemon d;
  int fd = ConnectTcp(d.native_port());
  std::string batch = HelloFrame(10);
  for (uint64_t id = 11; id <= 13; ++id) batch += NativeFrame(static_cast<uint8_t>(Opcode::kPing), id, "");
  SendAll(fd, batch);
  for (uint64_t id = 10; id <= 13; ++id) {
    RawReply r = ReadReply(fd);
    ASSERT_TRUE(r.ok);
    EXPECT_EQ(r.header.request_id, id);
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  }
  close(fd);
}

// A PUT_MANY of large values is received into G2 in place (docs/protocol.md); the requests
// pipelined before and after it in the same bytes are answered as ever.
TEST(DaemonNativeTest, ALargePutManyBetweenPipelinedRequestsStoresEveryValue) {
  Daemon d;
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  const std::vector<std::byte> kept = RandomValue(2, 200 << 10);
  ASSERT_TRUE(c->Put(TestKey(2), kept).ok());
  const std::vector<BlockKey> keys = {TestKey(1), TestKey(2), TestKey(3)};
  const std::vector<std::vector<std::byte>> values = {
      RandomValue(1, 300 << 10), RandomValue(20, 200 << 10), RandomValue(3, kMiB + 5)};
  int fd = ConnectTcp(d.native_port());
  SendAll(fd, HelloFrame(1) +
                  NativeFrame(static_cast<uint8_t>(Opcode::kPutMany), 2,
                              PutManyBody(keys, values)) +
                  NativeFrame(static_cast<uint8_t>(Opcode::kPing), 3, ""));
  EXPECT_TRUE(ReadReply(fd).status.ok());
  RawReply put = ReadReply(fd);
  ASSERT_TRUE(put.ok);
  EXPECT_EQ(put.header.request_id, 2u);
  Result<std::vector<Status>> statuses = protocol::DecodeItemStatuses(
      {reinterpret_cast<const std::byte*>(put.body.data()), put.body.size()});
  ASSERT_TRUE(statuses.ok()) << statuses.status().ToString();
  ASSERT_EQ(statuses->size(), 3u);
  for (const Status& s : *statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  RawReply ping = ReadReply(fd);
  EXPECT_EQ(ping.header.request_id, 3u);
  EXPECT_TRUE(ping.status.ok());
  close(fd);
  EXPECT_EQ(*c->Get(TestKey(1)), values[0]);
  EXPECT_EQ(*c->Get(TestKey(2)), kept);  // A block is immutable: the first put's bytes stay.
  EXPECT_EQ(*c->Get(TestKey(3)), values[2]);
}

// The C++ client splits a batch into frames of at most max_frame_bytes, counting each entry at
// its largest encoding: with a parent, a session, a dtype, a 32-byte engine hash and a role.
TEST(DaemonNativeTest, ABatchOfEntriesWithEveryFieldIsSplitWithinMaxFrameBytes) {
  Daemon d("max_frame_bytes = \"5MiB\"\n");
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  // 64 values that, with 116-byte entries, fill just over 5 MiB: two frames, not one.
  constexpr size_t kValue = 81833;
  EngineHash hash;
  hash.size = 32;
  std::vector<std::vector<std::byte>> values;
  std::vector<BlockWrite> writes;
  for (uint32_t i = 0; i < 64; ++i) values.push_back(RandomValue(i, kValue));
  for (uint32_t i = 0; i < 64; ++i) {
    writes.push_back({TestKey(100 + i), values[i], TestKey(99 + i), 5, KvDtype::kBf16, hash,
                      BlockRole::kKvNeedsState});
  }
  for (const Status& s : c->PutMany(writes)) ASSERT_TRUE(s.ok()) << s.ToString();
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(*c->Get(TestKey(100 + i)), values[i]) << i;
}

// Each kind of bad input gets a clear error (or a close); a bystander keeps working throughout.
class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bystander_ = Connect(daemon_.tcp_endpoint());
    ASSERT_NE(bystander_, nullptr);
    value_ = RandomValue(42, 2 * kMiB);
    ASSERT_TRUE(bystander_->Put(TestKey(42), value_).ok());
  }
  void TearDown() override {
    Result<std::vector<std::byte>> v = bystander_->Get(TestKey(42));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, value_);
  }
  // A connection that has said HELLO.
  int Hello() {
    int fd = ConnectTcp(daemon_.native_port());
    SendAll(fd, HelloFrame(1));
    EXPECT_TRUE(ReadReply(fd).status.ok());
    return fd;
  }

  Daemon daemon_;
  std::unique_ptr<Client> bystander_;
  std::vector<std::byte> value_;
};

TEST_F(BadInputTest, TruncatedFrameThenHangUp) {
  int fd = Hello();
  std::string frame = NativeFrame(static_cast<uint8_t>(Opcode::kGetMany), 2, std::string(36, 'k'));
  SendAll(fd, frame.substr(0, 27));
  close(fd);
}

TEST_F(BadInputTest, LyingLengthOverTheLimitGetsAnErrorAndAClose) {
  int fd = Hello();
  std::string frame = NativeFrame(static_cast<uint8_t>(Opcode::kPutMany), 2, "");
  uint32_t huge = 0x7fffffff;
  std::memcpy(frame.data() + 16, &huge, 4);
  SendAll(fd, frame);
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.header.opcode, static_cast<uint8_t>(Opcode::kError));
  EXPECT_EQ(r.status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(BadInputTest, LengthShorterThanTheBodyIsAMalformedRequest) {
  int fd = Hello();
  std::string keys;
  protocol::EncodeKeyList(std::vector<BlockKey>{TestKey(42)}, &keys);
  // The frame claims 10 bytes: the key list inside is cut short, so the request is rejected.
  std::string frame = NativeFrame(static_cast<uint8_t>(Opcode::kGetMany), 3, keys.substr(0, 10));
  SendAll(fd, frame);
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.header.request_id, 3u);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  // The rest of the key, now out of step with the framing, fails the magic check: closed.
  SendAll(fd, keys.substr(10));
  RawReply bad = ReadReply(fd);
  EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(BadInputTest, OversizedValueIsRejectedAndTheConnectionCarriesOn) {
  int fd = Hello();
  std::vector<protocol::PutEntry> entries = {
      {TestKey(1), std::nullopt, 4 * kMiB + 1, 0, std::nullopt}};
  std::string body;
  protocol::EncodePutDirectory(entries, &body);
  body.append(4 * kMiB + 1, 'x');
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kPutMany), 4, body));
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("max_block_bytes"), std::string_view::npos);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kPing), 5, ""));
  EXPECT_TRUE(ReadReply(fd).status.ok());
  close(fd);
}

// A client that hangs up in the middle of a large PUT_MANY: each value that came whole is
// stored (a PUT_MANY is not atomic: PUT_ATOMIC is), the space of the one cut short is given back.
TEST_F(BadInputTest, APutManyCutOffMidValueGivesTheSpaceOfTheUnfinishedValueBack) {
  const double before = G2Used(daemon_);
  const std::vector<std::vector<std::byte>> values = {RandomValue(60, 256 << 10),
                                                      RandomValue(61, 256 << 10)};
  const std::string frame = NativeFrame(static_cast<uint8_t>(Opcode::kPutMany), 2,
                                        PutManyBody({TestKey(60), TestKey(61)}, values));
  int fd = Hello();
  SendAll(fd, frame.substr(0, frame.size() - (128 << 10)));
  close(fd);
  EXPECT_TRUE(Eventually([&] { return G2Used(daemon_) == before + (256 << 10); }))
      << G2Used(daemon_) << " bytes used, " << before << " before";
  EXPECT_EQ(*bystander_->Get(TestKey(60)), values[0]);
  EXPECT_EQ(bystander_->Get(TestKey(61)).status().code(), StatusCode::kNotFound);
}

TEST_F(BadInputTest, UnknownOpcodeIsUnimplementedAndTheConnectionCarriesOn) {
  int fd = Hello();
  SendAll(fd, NativeFrame(0x66, 6, "whatever"));
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.header.request_id, 6u);
  EXPECT_EQ(r.header.opcode, 0x66);
  EXPECT_EQ(r.status.code(), StatusCode::kUnimplemented);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kPing), 7, ""));
  EXPECT_TRUE(ReadReply(fd).status.ok());
  close(fd);
}

TEST_F(BadInputTest, GarbageGetsAnErrorFrameAndAClose) {
  int fd = ConnectTcp(daemon_.native_port());
  SendAll(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(BadInputTest, RequestsBeforeHelloAreRefused) {
  int fd = ConnectTcp(daemon_.native_port());
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kPing), 1, ""));
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(BadInputTest, WrongTokenIsUnauthenticatedAndClosed) {
  int fd = ConnectTcp(daemon_.native_port());
  SendAll(fd, HelloFrame(1, "acme", "not-the-token"));
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(BadInputTest, ManyGarbageClientsAtOnce) {
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) {
    int fd = ConnectTcp(daemon_.native_port());
    SendAll(fd, std::string(static_cast<size_t>(i + 1), static_cast<char>(i)));
    fds.push_back(fd);
  }
  for (int fd : fds) {
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
}

TEST(DaemonIdleTest, IdleClientIsToldAndClosedOthersCarryOn) {
  Daemon d("idle_timeout_seconds = 1\n");
  int idle = ConnectTcp(d.native_port());
  SendAll(idle, HelloFrame(1));
  EXPECT_TRUE(ReadReply(idle).status.ok());
  RawReply r = ReadReply(idle);  // Blocks until the server gives up on us.
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(ClosedByPeer(idle));
  close(idle);
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Ping().ok());
}

// A client that trickles a request, a byte at a time, is never idle: the request timeout ends
// it (slowloris), stores nothing of it, and everyone else is served meanwhile.
// Sends the PUT_MANY frame of `body`: its first `at_once` bytes, then a byte every 20 ms until
// the server answers (it must, before the frame is all sent). Returns the answer.
RawReply TrickleUntilCutOff(int fd, const std::string& body, size_t at_once) {
  const std::string frame = NativeFrame(static_cast<uint8_t>(Opcode::kPutMany), 2, body);
  size_t sent = at_once;
  SendAll(fd, frame.substr(0, sent));
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  while (sent + 1 < frame.size() && poll(&p, 1, 20) == 0) SendAll(fd, frame.substr(sent++, 1));
  EXPECT_LT(sent + 1, frame.size()) << "the request was never cut off";
  return ReadReply(fd);
}

TEST(DaemonIdleTest, ARequestTrickledInIsToldAndClosedOthersCarryOn) {
  Daemon d("idle_timeout_seconds = 30\nrequest_timeout_seconds = 1\nmin_request_rate = \"1MiB\"\n");
  int slow = ConnectTcp(d.native_port());
  SendAll(slow, HelloFrame(1));
  ASSERT_TRUE(ReadReply(slow).status.ok());
  // The whole frame would take over 80 s; the server gives up long before.
  RawReply r = TrickleUntilCutOff(slow, PutManyBody({TestKey(7)}, {RandomValue(7, 4096)}), 0);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status.message().find("request_timeout_seconds"), std::string_view::npos);
  EXPECT_TRUE(ClosedByPeer(slow));
  close(slow);
  EXPECT_EQ(Metric(d, "kvtier_request_timeouts_total{protocol=\"native\"}"), 1);
  EXPECT_EQ(Metric(d, "kvtier_idle_closed_total{protocol=\"native\"}"), 0);
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_FALSE(c->Get(TestKey(7)).ok());
}

// The same for a large value received in place: the deadline holds, the space goes back.
TEST(DaemonIdleTest, AValueTrickledInPlaceIsToldAndClosedAndItsSpaceGivenBack) {
  Daemon d("idle_timeout_seconds = 30\nrequest_timeout_seconds = 1\nmin_request_rate = \"1MiB\"\n");
  const double before = G2Used(d);
  int slow = ConnectTcp(d.native_port());
  SendAll(slow, HelloFrame(1));
  ASSERT_TRUE(ReadReply(slow).status.ok());
  RawReply r =
      TrickleUntilCutOff(slow, PutManyBody({TestKey(7)}, {RandomValue(7, 256 << 10)}), 64 << 10);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(ClosedByPeer(slow));
  close(slow);
  EXPECT_TRUE(Eventually([&] { return G2Used(d) == before; })) << G2Used(d) << " vs " << before;
  auto c = Connect(d.tcp_endpoint());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Get(TestKey(7)).status().code(), StatusCode::kNotFound);
}

TEST(DaemonSlowClientTest, ClientThatDoesNotReadIsThrottledNotFatal) {
  Daemon d("max_output_bytes = \"1MiB\"\n");
  auto writer = Connect(d.tcp_endpoint());
  std::vector<std::byte> v = RandomValue(5, 1 * kMiB);
  ASSERT_TRUE(writer->Put(TestKey(5), v).ok());
  // A raw client queues 64 reads of 1 MiB without reading any reply.
  int slow = ConnectTcp(d.native_port());
  SendAll(slow, HelloFrame(1));
  std::string keys;
  protocol::EncodeKeyList(std::vector<BlockKey>{TestKey(5)}, &keys);
  std::string requests;
  for (uint64_t id = 2; id < 66; ++id) requests += NativeFrame(static_cast<uint8_t>(Opcode::kGetMany), id, keys);
  SendAll(slow, requests);
  // Meanwhile another client is served.
  Result<std::vector<std::byte>> other = writer->Get(TestKey(5));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, v);
  // The slow client then reads everything, intact and in order.
  EXPECT_TRUE(ReadReply(slow).status.ok());
  for (uint64_t id = 2; id < 66; ++id) {
    RawReply r = ReadReply(slow);
    ASSERT_TRUE(r.ok) << "no reply to request " << id << " (of 2..65)";
    EXPECT_EQ(r.header.request_id, id);
    auto items = protocol::DecodeGetMany({reinterpret_cast<const std::byte*>(r.body.data()), r.body.size()});
    ASSERT_TRUE(items.ok());
    ASSERT_TRUE((*items)[0].ok());
    EXPECT_TRUE(Same(*(*items)[0], v));
  }
  close(slow);
}

TEST(DaemonShutdownTest, SigtermStopsCleanlyAndRemovesTheSocket) {
  Daemon d;
  ClientOptions o;
  o.endpoint = d.unix_endpoint();
  o.retry_timeout_ms = 0;  // The first Unavailable, not 10 s of retries.
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Ping().ok());
  std::string socket_path = d.unix_socket();
  EXPECT_EQ(d.Stop(), 0);
  EXPECT_FALSE(std::filesystem::exists(socket_path));
  EXPECT_EQ((*c)->Ping().code(), StatusCode::kUnavailable);
}

// Clients that keep idle connections open (an engine's pool) are closed at once at shutdown, not
// waited for (they held the drain, the G2 save and a rolling upgrade's successor for the grace
// period before): each sees an orderly end after its last reply, not a reset, and the next call
// of a kvtier client reconnects.
TEST(DaemonShutdownTest, IdleConnectionsAreClosedCleanlyAndTheirClientsReconnect) {
  Daemon d;
  auto on_unix = Connect(d.unix_endpoint());
  auto on_tcp = Connect(d.tcp_endpoint());
  ASSERT_TRUE(on_unix->Put(TestKey(1), PatternValue(1, 1000)).ok());
  ASSERT_TRUE(on_tcp->Ping().ok());
  const int resp = ConnectTcp(d.resp_port());
  SendAll(resp, Command({"PING"}));
  ASSERT_EQ(ReadResp(resp), "+PONG\r\n");
  ASSERT_EQ(d.Stop(), 0);
  char byte;
  EXPECT_EQ(recv(resp, &byte, 1, 0), 0) << "an orderly end, not a reset: " << std::strerror(errno);
  close(resp);
  d.Start();
  // The restart has new TCP ports; the Unix socket's path is the same.
  EXPECT_EQ(*on_unix->Get(TestKey(1)), PatternValue(1, 1000)) << "a warm restart kept it";
}

}  // namespace
}  // namespace kvtier::daemon_test
