// Attacks a user of a shared kvtierd would worry about, each against a real kvtierd
// (docs/security.md, "Threat model", says what each mechanism guarantees):
// - one tenant reaching another's blocks through the same keys or names, on every protocol;
// - a hostile shared-memory client reading or changing what it was given to map;
// - guessing tokens: slowed by lockouts, audited, on every protocol;
// - the admin API without its token, and a tenant's admin token reaching another tenant;
// - Unix-socket peers: who they are (SO_PEERCRED) and who may connect (the socket's mode);
// - tenant names that try to leave G4's directory;
// - hostile HTTP requests and config files;
// - secrets (tokens, KV bytes) in log lines.

#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "kvtier/shm_client.h"
#include "src/protocol/shm_messages.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

constexpr char kOtherTenant[] = R"(
[[tenants]]
name = "other"
token = "other-token"
)";

std::unique_ptr<Client> Connect(const std::string& endpoint, const std::string& tenant,
                                const std::string& token, Status* status = nullptr) {
  ClientOptions o;
  o.endpoint = endpoint;
  o.tenant = tenant;
  o.token = token;
  o.retry_timeout_ms = 0;
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  if (status != nullptr) *status = c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

// One RESP connection: sends each command and returns the replies, raw.
std::vector<std::string> Resp(uint16_t port, std::initializer_list<std::string> commands) {
  int fd = ConnectTcp(port);
  std::vector<std::string> replies;
  for (const std::string& c : commands) {
    SendAll(fd, c);
    replies.push_back(ReadResp(fd));
  }
  close(fd);
  return replies;
}

std::string HttpAs(uint16_t port, const std::string& method, const std::string& path,
                   const std::string& token) {
  return Http(port, method + " " + path + " HTTP/1.0\r\n" +
                        (token.empty() ? "" : "Authorization: Bearer " + token + "\r\n") + "\r\n");
}

TEST(SecurityTest, TheSameKeysAndNamesUnderTwoTenantsNeverHitAcrossOnAnyProtocol) {
  Daemon d(kOtherTenant);
  ASSERT_TRUE(d.running());
  const BlockKey key = TestKey(42);
  const std::vector<std::byte> a = PatternValue(1, 8192), b = PatternValue(2, 8192);
  // Native over TCP and over the Unix socket (with its shared-memory path).
  std::unique_ptr<Client> acme = Connect(d.tcp_endpoint(), "acme", "acme-token");
  std::unique_ptr<Client> other = Connect(d.unix_endpoint(), "other", "other-token");
  std::unique_ptr<Client> anonymous = ConnectUnix(d);
  ASSERT_TRUE(acme && other && anonymous);
  ASSERT_TRUE(acme->Put(key, a).ok());
  EXPECT_EQ(other->Get(key).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(anonymous->Get(key).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(other->Put(key, b).ok());
  EXPECT_EQ(*acme->Get(key), a);
  EXPECT_EQ(*other->Get(key), b);
  Result<PrefixMatch> m = anonymous->LookupPrefix({&key, 1});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->num_blocks, 0u);
  EXPECT_TRUE(anonymous->Delete(key).code() == StatusCode::kNotFound);
  EXPECT_EQ(*acme->Get(key), a);

  // RESP: the same name under two tenants.
  std::vector<std::string> r = Resp(d.resp_port(), {Command({"AUTH", "acme", "acme-token"}),
                                                    Command({"SET", "shared-name", "acme's"})});
  EXPECT_EQ(r[1], "+OK\r\n");
  r = Resp(d.resp_port(), {Command({"AUTH", "other", "other-token"}), Command({"GET", "shared-name"}),
                           Command({"SET", "shared-name", "other's"}), Command({"GET", "shared-name"})});
  EXPECT_EQ(r[1], "$-1\r\n");
  EXPECT_EQ(r[3], "$7\r\nother's\r\n");
  r = Resp(d.resp_port(), {Command({"GET", "shared-name"})});  // Anonymous: tenant default.
  EXPECT_EQ(r[0], "$-1\r\n");
  r = Resp(d.resp_port(), {Command({"AUTH", "acme", "acme-token"}), Command({"GET", "shared-name"})});
  EXPECT_EQ(r[1], "$6\r\nacme's\r\n");
  // A token names its own tenant only: acme's token does not open "other".
  r = Resp(d.resp_port(), {Command({"AUTH", "other", "acme-token"})});
  EXPECT_TRUE(r[0].starts_with("-WRONGPASS")) << r[0];
  Status s;
  EXPECT_EQ(Connect(d.tcp_endpoint(), "other", "acme-token", &s), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated);
}

// Bytes no other value shares a run of 32 with (unlike PatternValue's, which repeat).
std::vector<std::byte> RandomValue(uint64_t seed, size_t size) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(size);
  for (std::byte& b : v) b = static_cast<std::byte>(rng());
  return v;
}

// What a shared-memory client of `tenant` is given: SHM_ATTACH's reply and its descriptors.
struct Attached {
  protocol::ShmAttachReply reply;
  std::vector<int> fds;
  ~Attached() {
    for (int fd : fds) close(fd);
  }
};

// Says HELLO as `tenant` on the Unix socket asking for shared memory, then SHM_ATTACH, reading
// the reply with recvmsg to receive every descriptor passed with it.
void AttachRaw(int fd, const std::string& tenant, const std::string& token, Attached* out) {
  protocol::HelloRequest hello;
  hello.features = protocol::kFeatureSharedMemory;
  hello.tenant = tenant;
  hello.token = token;
  std::string body;
  protocol::EncodeHello(hello, &body);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(protocol::Opcode::kHello), 1, body));
  RawReply hello_reply = ReadReply(fd);
  ASSERT_TRUE(hello_reply.ok && hello_reply.status.ok()) << hello_reply.status.ToString();
  SendAll(fd, NativeFrame(static_cast<uint8_t>(protocol::Opcode::kShmAttach), 2, ""));
  std::string head(protocol::kHeaderSize, '\0');
  iovec iov{head.data(), head.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ASSERT_EQ(recvmsg(fd, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC),
            static_cast<ssize_t>(head.size()));
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      out->fds.push_back(passed);
    }
  }
  protocol::DecodedFrame f = protocol::DecodeFrame(
      {reinterpret_cast<const std::byte*>(head.data()), head.size()}, 1u << 20);
  ASSERT_NE(f.state, protocol::DecodedFrame::State::kError);
  const std::string rest = RecvN(fd, f.header.body_length);
  Result<protocol::ShmAttachReply> reply = protocol::DecodeShmAttachReply(
      {reinterpret_cast<const std::byte*>(rest.data()), rest.size()});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  out->reply = *reply;
}

// Whether any of `needles` (their first 64 bytes) occurs in the file's first `size` bytes,
// read with pread: reading a hole through read(2) takes no memory.
bool FileHoldsAny(int fd, uint64_t size, const std::vector<std::vector<std::byte>>& needles) {
  constexpr size_t kChunk = 8 << 20, kNeedle = 64;
  std::vector<char> buf(kChunk + kNeedle);
  for (uint64_t at = 0; at < size; at += kChunk) {
    const ssize_t n = pread(fd, buf.data(), std::min<uint64_t>(kChunk + kNeedle, size - at),
                            static_cast<off_t>(at));
    if (n <= 0) return false;
    for (const std::vector<std::byte>& v : needles) {
      if (memmem(buf.data(), static_cast<size_t>(n), v.data(), kNeedle) != nullptr) return true;
    }
  }
  return false;
}

// A client of tenant "other" with shared memory maps all it is given and scans it for acme's
// values: none is there. It tries to write its region every way the kernel offers, writes all
// over its staging file, and commits garbage under acme's keys: acme's reads, through shared
// memory and the native protocol, stay exact. Acme's own client cannot change its committed
// blocks either.
TEST(SecurityTest, SharedMemoryShowsATenantItsOwnBlocksOnlyAndNoneCanBeChanged) {
  Daemon d(kOtherTenant);
  ASSERT_TRUE(d.running());
  constexpr size_t kValue = 64 << 10;
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> values;
  ShmClientOptions so;
  so.socket_path = d.unix_socket();
  so.tenant = "acme";
  so.token = "acme-token";
  Result<std::unique_ptr<ShmClient>> acme_shm = ShmClient::Connect(so);
  ASSERT_TRUE(acme_shm.ok()) << acme_shm.status().ToString();
  std::unique_ptr<Client> acme = Connect(d.tcp_endpoint(), "acme", "acme-token");
  ASSERT_TRUE(acme);
  for (uint32_t i = 0; i < 16; ++i) {
    keys.push_back(TestKey(1000 + i));
    values.push_back(RandomValue(i + 1, kValue));
    // Half through shared memory, half through the native protocol.
    ASSERT_TRUE((i % 2 == 0 ? (*acme_shm)->Put(keys[i], values[i]) : acme->Put(keys[i], values[i]))
                    .ok());
  }
  std::unique_ptr<Client> other = Connect(d.unix_endpoint(), "other", "other-token");
  ASSERT_TRUE(other);
  const std::vector<std::byte> own = RandomValue(99, kValue);
  ASSERT_TRUE(other->Put(TestKey(1), own).ok());

  int sock = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, d.unix_socket().c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  Attached got;
  AttachRaw(sock, "other", "other-token", &got);
  ASSERT_EQ(got.fds.size(), 2u) << "the G2 region and the staging file";
  const int region = got.fds[0], staging = got.fds[1];
  const uint64_t region_size = got.reply.arena_size, staging_size = got.reply.staging_size;

  // Everything it can read: its region and its staging file. Its own block is there (the scan
  // works); none of acme's is.
  EXPECT_TRUE(FileHoldsAny(region, region_size, {own}));
  EXPECT_FALSE(FileHoldsAny(region, region_size, values)) << "acme's bytes in other's region";
  EXPECT_FALSE(FileHoldsAny(staging, staging_size, values));

  // Writing the region: refused every way.
  EXPECT_EQ(mmap(nullptr, region_size, PROT_READ | PROT_WRITE, MAP_SHARED, region, 0), MAP_FAILED);
  void* ro = mmap(nullptr, region_size, PROT_READ, MAP_SHARED, region, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_NE(mprotect(ro, region_size, PROT_READ | PROT_WRITE), 0);
  munmap(ro, region_size);
  EXPECT_EQ(pwrite(region, "x", 1, 0), -1);
  EXPECT_NE(ftruncate(region, 0), 0);
  EXPECT_NE(fallocate(region, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 << 20), 0);
  // A private mapping may be written: the writes are its own copy.
  void* cow = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, region, 0);
  ASSERT_NE(cow, MAP_FAILED);
  std::memset(cow, 0xa5, 1 << 20);
  munmap(cow, 1 << 20);
  // The staging file is its own to scribble on; garbage committed under acme's keys lands in
  // other's tenant.
  void* scratch = mmap(nullptr, staging_size, PROT_READ | PROT_WRITE, MAP_SHARED, staging, 0);
  ASSERT_NE(scratch, MAP_FAILED);
  std::vector<protocol::PutEntry> entries;
  for (const BlockKey& k : keys) entries.push_back({k, std::nullopt, kValue, 0, {}});
  std::string body;
  protocol::EncodePutDirectory(entries, &body);
  SendAll(sock, NativeFrame(static_cast<uint8_t>(protocol::Opcode::kShmAlloc), 3, body));
  RawReply alloc = ReadReply(sock);
  ASSERT_TRUE(alloc.ok && alloc.status.ok()) << alloc.status.ToString();
  Result<std::vector<protocol::ShmAllocItem>> items = protocol::DecodeShmAllocReply(
      {reinterpret_cast<const std::byte*>(alloc.body.data()), alloc.body.size()});
  ASSERT_TRUE(items.ok());
  std::vector<uint64_t> ids;
  for (const protocol::ShmAllocItem& item : *items) {
    ASSERT_TRUE(item.status.ok()) << item.status.ToString();
    ids.push_back(item.allocation);
  }
  std::memset(scratch, 0x5a, staging_size / 4);
  body.clear();
  protocol::EncodeShmIds(ids, &body);
  SendAll(sock, NativeFrame(static_cast<uint8_t>(protocol::Opcode::kShmCommit), 4, body));
  RawReply commit = ReadReply(sock);
  ASSERT_TRUE(commit.ok && commit.status.ok()) << commit.status.ToString();
  std::memset(scratch, 0xff, staging_size / 4);  // And on after the commit.
  munmap(scratch, staging_size);
  close(sock);

  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(*acme->Get(keys[i]), values[i]) << "native read of acme's block " << i;
    Result<ShmBlocks> blocks = (*acme_shm)->Get({&keys[i], 1});
    ASSERT_TRUE(blocks.ok() && blocks->status(0).ok());
    std::vector<std::byte> read;
    for (std::span<const std::byte> piece : blocks->pieces(0)) {
      read.insert(read.end(), piece.begin(), piece.end());
    }
    EXPECT_EQ(read, values[i]) << "shared-memory read of acme's block " << i;
    // What other committed under the same key is other's, and the zeros and 0x5a it staged.
    Result<std::vector<std::byte>> theirs = other->Get(keys[i]);
    ASSERT_TRUE(theirs.ok());
    EXPECT_NE(*theirs, values[i]);
  }
}

TEST(SecurityTest, TokenGuessingIsLockedOutOnEveryProtocolAndAudited) {
  Daemon d("[auth]\nmax_failures = 3\nlockout_seconds = 600\n");
  ASSERT_TRUE(d.running());
  Status s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Connect(d.tcp_endpoint(), "acme", "guess-" + std::to_string(i), &s), nullptr);
    EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s.ToString();
  }
  // Locked out: even the right token is refused unchecked, on the native protocol and RESP.
  EXPECT_EQ(Connect(d.tcp_endpoint(), "acme", "acme-token", &s), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("locked out for"), std::string::npos) << s.ToString();
  std::vector<std::string> r = Resp(d.resp_port(), {Command({"AUTH", "acme", "acme-token"})});
  EXPECT_TRUE(r[0].starts_with("-ERR too many failed authentications from tcp:127.0.0.1")) << r[0];
  // Another peer (the Unix socket, uid 0) is not locked out.
  EXPECT_NE(Connect(d.unix_endpoint(), "acme", "acme-token"), nullptr);
  EXPECT_EQ(Metric(d, "kvtier_auth_lockouts_total{protocol=\"native\"}"), 1);
  EXPECT_EQ(Metric(d, "kvtier_auth_failures_total{protocol=\"native\"}"), 3);
  EXPECT_EQ(Metric(d, "kvtier_auth_refused_total{protocol=\"native\"}"), 1);
  EXPECT_EQ(Metric(d, "kvtier_auth_refused_total{protocol=\"resp\"}"), 1);

  // The audit log has the first failure and the lockout, naming the peer, never a token.
  const std::string audit = ReadFile(d.dir() / "audit.log");
  EXPECT_NE(audit.find(R"("op":"auth_failure","tenant":"acme","actor":"tcp:127.0.0.1")"),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find(R"("op":"auth_lockout")"), std::string::npos) << audit;
  EXPECT_EQ(audit.find("guess-"), std::string::npos);
  const std::string log = d.Log();
  EXPECT_NE(log.find("3 failed authentications in a row from tcp:127.0.0.1 over native: locked "
                     "out for 600 s"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("guess-"), std::string::npos);
  EXPECT_EQ(log.find("acme-token"), std::string::npos);
}

TEST(SecurityTest, AdminEndpointsNeedTheirTokenAndATenantsTokenReachesOnlyItsTenant) {
  Daemon d(std::string("[auth]\nadmin_token = \"root-admin\"\n") + kOtherTenant +
           "admin_token = \"other-admin\"\n");
  ASSERT_TRUE(d.running());
  std::unique_ptr<Client> acme = Connect(d.tcp_endpoint(), "acme", "acme-token");
  ASSERT_TRUE(acme && acme->Put(TestKey(1), PatternValue(1, 4096)).ok());
  const std::string key = TestKey(1).ToHex();

  EXPECT_TRUE(HttpAs(d.http_port(), "GET", "/admin/tenants", "").starts_with("HTTP/1.1 401"));
  EXPECT_TRUE(HttpAs(d.http_port(), "GET", "/admin/tenants", "wrong").starts_with("HTTP/1.1 401"));
  // The tenant token is not an admin token.
  EXPECT_TRUE(HttpAs(d.http_port(), "GET", "/admin/tenants", "acme-token").starts_with("HTTP/1.1 401"));
  const std::string all = HttpAs(d.http_port(), "GET", "/admin/tenants", "root-admin");
  EXPECT_TRUE(all.starts_with("HTTP/1.1 200")) << all;
  EXPECT_NE(all.find("\"acme\""), std::string::npos);
  // Scoped: other's admin token sees and acts on "other" only.
  const std::string scoped = HttpAs(d.http_port(), "GET", "/admin/tenants", "other-admin");
  EXPECT_NE(scoped.find("\"other\""), std::string::npos);
  EXPECT_EQ(scoped.find("\"acme\""), std::string::npos) << scoped;
  std::string reply = HttpAs(d.http_port(), "DELETE", "/admin/blocks/" + key + "?tenant=acme", "other-admin");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 403")) << reply;
  EXPECT_NE(reply.find("acts on tenant 'other' only"), std::string::npos);
  reply = HttpAs(d.http_port(), "DELETE", "/admin/tenants/acme", "other-admin");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 403")) << reply;
  reply = HttpAs(d.http_port(), "POST", "/admin/tenants/acme/shred", "other-admin");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 403")) << reply;
  EXPECT_TRUE(acme->Get(TestKey(1)).ok()) << "a scoped admin token deleted another tenant's block";
  reply = HttpAs(d.http_port(), "DELETE", "/admin/tenants/other", "other-admin");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply;
  // The global token acts on every tenant; the audit log names who.
  reply = HttpAs(d.http_port(), "DELETE", "/admin/blocks/" + key + "?tenant=acme", "root-admin");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply;
  EXPECT_NE(ReadFile(d.dir() / "audit.log").find(R"("actor":"admin:other")"), std::string::npos);
}

// A child process that becomes `uid` (and its group) and connects to `d`'s Unix socket without
// a token. Exit code: 0 connected as `tenant`, 1 connected as another tenant, 2 refused.
int ConnectAsUser(const Daemon& d, uid_t uid, const std::string& tenant) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(3);
    ClientOptions o;
    o.endpoint = d.unix_endpoint();
    o.retry_timeout_ms = 0;
    Result<std::unique_ptr<Client>> c = Client::Connect(o);
    if (!c.ok()) _exit(2);
    _exit((*c)->server_info().tenant == tenant ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SecurityTest, UnixPeersAreTheirUidsTenantAndTheSocketModeDecidesWhoConnects) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  // The harness's config continues its [server] table with what a test adds.
  Daemon open_socket(std::string("unix_socket_mode = \"0666\"\n") + kOtherTenant +
                     "unix_uids = [65534]\n");
  ASSERT_TRUE(open_socket.running());
  struct stat st {};
  ASSERT_EQ(stat(open_socket.unix_socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  // uid 65534 is "other" by its credentials alone; root (uid 0) is the anonymous tenant.
  EXPECT_EQ(ConnectAsUser(open_socket, 65534, "other"), 0);
  std::unique_ptr<Client> root = ConnectUnix(open_socket);
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->server_info().tenant, "default");

  Daemon closed_socket("unix_socket_mode = \"0600\"\n");
  ASSERT_TRUE(closed_socket.running());
  ASSERT_EQ(stat(closed_socket.unix_socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ConnectAsUser(closed_socket, 65534, "default"), 2) << "mode 0600 let another user in";
}

TEST(SecurityTest, TenantNamesCannotLeaveTheSharedTiersDirectory) {
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("kvtier_security_g4_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "g4");
  {
    Daemon d("[shared]\nlocation = \"" + (root / "g4").string() +
             "\"\nwrite_policy = \"on_put\"\n[[tenants]]\nname = \"../../escape\"\ntoken = \"t1\"\n"
             "[[tenants]]\nname = \"a/b\"\ntoken = \"t2\"\n");
    ASSERT_TRUE(d.running());
    for (const char* token : {"t1", "t2"}) {
      std::unique_ptr<Client> c = Connect(d.tcp_endpoint(), "", token);
      ASSERT_NE(c, nullptr);
      ASSERT_TRUE(c->Put(TestKey(7), PatternValue(7, 4096)).ok());
      ASSERT_TRUE(c->Get(TestKey(7)).ok());
    }
  }
  // Only the G4 directory got files, under a hashed component for each odd name.
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = std::filesystem::relative(e.path(), root / "g4").string();
    EXPECT_FALSE(rel.starts_with("..")) << e.path();
    EXPECT_EQ(rel.find("escape"), std::string::npos) << rel;
  }
  std::filesystem::remove_all(root);
}

TEST(SecurityTest, HostileHttpRequestsAndConfigFilesGetClearErrors) {
  Daemon d;
  ASSERT_TRUE(d.running());
  EXPECT_TRUE(Http(d.http_port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n")
                  .starts_with("HTTP/1.1 431"));
  EXPECT_TRUE(Http(d.http_port(), "POST /admin/pin HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n")
                  .starts_with("HTTP/1.1 413"));
  // A chunked body is read whole, then judged like any other.
  EXPECT_TRUE(Http(d.http_port(), "POST /admin/pin HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                                  "Connection: close\r\n\r\n5\r\n{\"x\":\r\n0\r\n\r\n")
                  .starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(Http(d.http_port(), "POST /admin/pin HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                  .starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(Http(d.http_port(), "\x16\x03\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
  EXPECT_TRUE(Http(d.http_port(),
                   "POST /admin/pin HTTP/1.1\r\nConnection: close\r\nContent-Length: 5\r\n\r\n{\"x\":")
                  .starts_with("HTTP/1.1 400"));
  // The daemon serves on.
  EXPECT_TRUE(Http(d.http_port(), "GET /healthz HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));

  // Config files: a huge garbage file, a token shared by two tenants, a socket mode that is
  // not octal. kvtierd exits 1 with the reason on stderr, before serving anything.
  const std::filesystem::path dir = d.dir() / "configs";
  std::filesystem::create_directories(dir);
  auto start = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    const std::string cmd = std::string(KVTIERD_PATH) + " --config " + (dir / name).string() +
                            " 2>" + (dir / (name + ".err")).string();
    const int status = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                          ReadFile(dir / (name + ".err")));
  };
  auto [code, err] = start("huge.toml", std::string(8 << 20, '\x01'));
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("huge.toml is 8388608 bytes; a configuration is at most 1 MiB"),
            std::string::npos)
      << err;
  std::tie(code, err) = start("garbage.toml", std::string(1000, '\x01'));
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("garbage.toml"), std::string::npos) << err;
  std::tie(code, err) = start("tokens.toml",
                              "[[tenants]]\nname = \"a\"\ntoken = \"x\"\n[[tenants]]\nname = \"b\"\n"
                              "token = \"x\"\n");
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("tokens must be unique"), std::string::npos) << err;
  std::tie(code, err) = start("mode.toml", "data_dir = \"" + (dir / "data").string() +
                                               "\"\n[server]\nnative_listen = \"\"\nresp_listen = \"\"\n"
                                               "http_listen = \"\"\nunix_socket_mode = \"rw-rw----\"\n"
                                               "[disk]\ndir = \"\"\n[memory]\nwarm_restart = false\n");
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("unix_socket_mode must be octal"), std::string::npos) << err;
}

TEST(SecurityTest, NoTokenAndNoKvByteEverReachesALogLine) {
  Daemon d(std::string("[auth]\nadmin_token = \"admin-XYZZY\"\n") + kOtherTenant);
  ASSERT_TRUE(d.running());
  const std::string secret = "KV-BYTES-THAT-MUST-NOT-BE-LOGGED";
  std::unique_ptr<Client> acme = Connect(d.tcp_endpoint(), "acme", "acme-token");
  ASSERT_NE(acme, nullptr);
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(secret.data()), secret.size());
  ASSERT_TRUE(acme->Put(TestKey(3), bytes).ok());
  EXPECT_EQ(Connect(d.tcp_endpoint(), "other", "wrong-token-QWERTY"), nullptr);
  Resp(d.resp_port(), {Command({"AUTH", "acme", "resp-guess-ASDF"}), Command({"SET", "k", secret})});
  HttpAs(d.http_port(), "GET", "/admin/tenants", "admin-guess-ZXCV");
  HttpAs(d.http_port(), "DELETE", "/admin/tenants/other", "admin-XYZZY");
  ASSERT_EQ(d.Stop(), 0);
  const std::string everything = d.Log() + ReadFile(d.dir() / "audit.log");
  EXPECT_NE(everything.find("failed authentication"), std::string::npos) << everything;
  for (const char* s : {"acme-token", "other-token", "admin-XYZZY", "QWERTY", "ASDF", "ZXCV",
                        "KV-BYTES"}) {
    EXPECT_EQ(everything.find(s), std::string::npos) << s << " reached a log line:\n" << everything;
  }
}

}  // namespace
}  // namespace kvtier::daemon_test
