// The shared-memory fast path end to end: ShmClient and raw SHM_* frames against a real
// kvtierd (docs/protocol.md, "Shared-memory fast path").

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "kvtier/shm_client.h"
#include "src/protocol/shm_messages.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

using protocol::Opcode;

// G3 off, so that "resident" means "in the arena" and nothing is demoted.
constexpr char kNoDisk[] = "[disk]\ndir = \"\"\n";

std::unique_ptr<ShmClient> ConnectShm(const Daemon& d) {
  ShmClientOptions o;
  o.socket_path = d.unix_socket();
  Result<std::unique_ptr<ShmClient>> c = ShmClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::unique_ptr<Client> ConnectNative(const Daemon& d) {
  ClientOptions o;
  o.endpoint = d.unix_endpoint();
  Result<std::unique_ptr<Client>> c = Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// The bytes of block i of `blocks`, gathered from its pieces.
std::vector<std::byte> Gather(const ShmBlocks& blocks, size_t i) {
  std::vector<std::byte> out;
  for (std::span<const std::byte> p : blocks.pieces(i)) out.insert(out.end(), p.begin(), p.end());
  return out;
}

uint64_t G2UsedBytes(const Daemon& d) {
  return static_cast<uint64_t>(Metric(d, "kvtier_tier_used_bytes{tier=\"g2\"}"));
}

// Polls `condition` until it holds; false when kDeadline passes first.
template <typename Condition>
bool Eventually(Condition condition) {
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // Polling, bounded above.
  }
  return true;
}

// A raw Unix-socket connection that says HELLO (asking for `features`) and reads its reply.
class RawUnix {
 public:
  RawUnix(const Daemon& d, uint64_t features) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = d.unix_socket();
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{static_cast<time_t>(kDeadline.count()), 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    protocol::HelloRequest hello;
    hello.features = features;
    std::string body;
    protocol::EncodeHello(hello, &body);
    SendAll(fd_, NativeFrame(static_cast<uint8_t>(Opcode::kHello), 1, body));
    RawReply r = ReadReply(fd_);
    EXPECT_TRUE(r.ok && r.status.ok()) << r.status.ToString();
    Result<protocol::HelloResponse> resp = protocol::DecodeHelloResponse(
        {reinterpret_cast<const std::byte*>(r.body.data()), r.body.size()});
    granted_ = resp.ok() ? resp->features : 0;
  }
  ~RawUnix() { close(fd_); }

  uint64_t granted() const { return granted_; }
  int fd() const { return fd_; }

  RawReply Call(Opcode op, const std::string& body) {
    SendAll(fd_, NativeFrame(static_cast<uint8_t>(op), ++id_, body));
    return ReadReply(fd_);
  }
  // A request taking a list of ids.
  RawReply CallIds(Opcode op, std::vector<uint64_t> ids) {
    std::string body;
    protocol::EncodeShmIds(ids, &body);
    return Call(op, body);
  }

 private:
  int fd_ = -1;
  uint64_t id_ = 1;
  uint64_t granted_ = 0;
};

std::vector<Status> ItemStatuses(const RawReply& r) {
  Result<std::vector<Status>> s = protocol::DecodeItemStatuses(
      {reinterpret_cast<const std::byte*>(r.body.data()), r.body.size()});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : std::vector<Status>{};
}

TEST(DaemonShmTest, ShmPutThenNativeGetAndNativePutThenShmGet) {
  Daemon d;
  std::unique_ptr<ShmClient> shm = ConnectShm(d);
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(shm && native);
  EXPECT_EQ(shm->tenant(), "default");
  EXPECT_GE(shm->arena_size(), 256u << 20);

  // Odd sizes, so that a block does not end on a page boundary.
  std::vector<std::byte> a = PatternValue(1, (1 << 20) + 3);
  ASSERT_TRUE(shm->Put(TestKey(1), a).ok());
  Result<std::vector<std::byte>> got = native->Get(TestKey(1));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, a);
  // Putting the same key again is OK (blocks are immutable) and changes nothing.
  EXPECT_TRUE(shm->Put(TestKey(1), PatternValue(99, 10)).ok());
  EXPECT_EQ(*native->Get(TestKey(1)), a);

  std::vector<std::byte> b = PatternValue(2, 77777);
  ASSERT_TRUE(native->Put(TestKey(2), b).ok());
  std::vector<BlockKey> keys = {TestKey(2), TestKey(3), TestKey(1)};
  Result<ShmBlocks> blocks = shm->Get(keys);
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  ASSERT_EQ(blocks->size(), 3u);
  ASSERT_TRUE(blocks->status(0).ok());
  EXPECT_EQ(Gather(*blocks, 0), b);
  EXPECT_EQ(blocks->status(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(Gather(*blocks, 2), a);
  blocks->Release();

  std::vector<std::byte> out(b.size());
  Result<size_t> n = shm->Read(TestKey(2), out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, b.size());
  EXPECT_EQ(out, b);
  std::vector<std::byte> small(10);
  EXPECT_EQ(shm->Read(TestKey(2), small).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(shm->Read(TestKey(3), out).status().code(), StatusCode::kNotFound);

  // A batch put, with chain, session and dtype.
  std::vector<std::vector<std::byte>> values;
  std::vector<BlockWrite> writes;
  for (uint32_t i = 0; i < 20; ++i) values.push_back(PatternValue(100 + i, 4096 * (i + 1)));
  for (uint32_t i = 0; i < 20; ++i) {
    writes.push_back({TestKey(100 + i), values[i],
                      i > 0 ? std::optional<BlockKey>(TestKey(100 + i - 1)) : std::nullopt, 42,
                      KvDtype::kBf16});
  }
  for (const Status& s : shm->PutMany(writes)) EXPECT_TRUE(s.ok()) << s.ToString();
  for (uint32_t i = 0; i < 20; ++i) EXPECT_EQ(*native->Get(TestKey(100 + i)), values[i]);
  Result<DeletionReport> deleted = native->DeleteSession(42);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(deleted->memory_blocks, 20u);
  EXPECT_TRUE(shm->Flush().ok());
}

// server.busy_poll_us: loops that poll between requests (the harness runs two) serve clients on
// several connections as loops that sleep do (three clients, every byte checked).
TEST(DaemonShmTest, BusyPollingLoopsServeEveryClient) {
  Daemon d("busy_poll_us = 500\n[disk]\ndir = \"\"\n");  // In the harness's [server].
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(native);
  std::vector<std::thread> clients;
  std::atomic<int> wrong{0};
  for (uint32_t c = 0; c < 2; ++c) {
    clients.emplace_back([&, c] {
      std::unique_ptr<ShmClient> shm = ConnectShm(d);
      if (!shm) return (void)++wrong;
      std::vector<std::byte> out;
      for (uint32_t i = 0; i < 200; ++i) {
        const uint32_t id = 1000 * (c + 1) + i;
        std::vector<std::byte> v = PatternValue(id, 4096 + i);
        out.assign(v.size(), std::byte{0});
        Result<size_t> n = Status::Internal("not read");
        if (shm->Put(TestKey(id), v).ok()) n = shm->Read(TestKey(id), out);
        if (!n.ok() || *n != v.size() || out != v) ++wrong;
      }
    });
  }
  for (uint32_t i = 0; i < 200; ++i) {
    std::vector<std::byte> v = PatternValue(5000 + i, 100 + i);
    Result<std::vector<std::byte>> got = Status::Internal("not read");
    if (native->Put(TestKey(5000 + i), v).ok()) got = native->Get(TestKey(5000 + i));
    if (!got.ok() || *got != v) ++wrong;
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(DaemonShmTest, AllocateFillInPlaceCommitOrAbort) {
  Daemon d(kNoDisk);
  std::unique_ptr<ShmClient> shm = ConnectShm(d);
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(shm && native);
  const uint64_t baseline = G2UsedBytes(d);
  std::vector<std::byte> v = PatternValue(20, 123457);
  Result<ShmAllocation> a = shm->Allocate(TestKey(20), v.size());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  size_t off = 0;
  for (std::span<std::byte> piece : a->pieces()) {
    std::memcpy(piece.data(), v.data() + off, piece.size());
    off += piece.size();
  }
  ASSERT_EQ(off, v.size());
  EXPECT_EQ(native->Get(TestKey(20)).status().code(), StatusCode::kNotFound);  // Not yet visible.
  ASSERT_TRUE(shm->Commit(std::move(a).value()).ok());
  EXPECT_EQ(*native->Get(TestKey(20)), v);
  EXPECT_EQ(shm->Allocate(TestKey(20), 10).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(shm->Commit(ShmAllocation()).code(), StatusCode::kInvalidArgument);

  // Dropped uncommitted: the space comes back once the abort is applied.
  const uint64_t with_block = G2UsedBytes(d);
  EXPECT_GT(with_block, baseline);
  {
    Result<ShmAllocation> dropped = shm->Allocate(TestKey(21), 4 << 20);
    ASSERT_TRUE(dropped.ok());
    EXPECT_GE(G2UsedBytes(d), with_block + (4 << 20));
  }
  ASSERT_TRUE(shm->Flush().ok());
  EXPECT_EQ(G2UsedBytes(d), with_block);
  EXPECT_EQ(native->Get(TestKey(21)).status().code(), StatusCode::kNotFound);
}

// A put from a staging buffer is one SHM_PUT: kvtierd copies the values from the buffer into
// G2, and nothing goes through the staging file's allocations.
TEST(DaemonShmTest, StagingBufferPutsAreCopiedOnceByKvtierd) {
  Daemon d(kNoDisk);
  std::unique_ptr<ShmClient> shm = ConnectShm(d);
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(shm && native);
  EXPECT_EQ(shm->StagingBuffer(0).status().code(), StatusCode::kInvalidArgument);
  // The whole staging file as one buffer: Put, which copies through the staging file, finds no
  // room, so the puts from the buffer that succeed below did not go through it.
  Result<ShmBuffer> whole = shm->StagingBuffer(shm->staging_size());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(shm->StagingBuffer(4096).status().code(), StatusCode::kResourceExhausted);
  const std::vector<std::byte> a = PatternValue(31, 123457);
  const std::vector<std::byte> b = PatternValue(32, 2 << 20);
  EXPECT_EQ(shm->Put(TestKey(30), b).code(), StatusCode::kResourceExhausted);

  // Values at odd offsets; a chain, as an engine puts it.
  std::span<std::byte> mem = whole->data();
  std::memcpy(mem.data() + 100, a.data(), a.size());
  std::memcpy(mem.data() + 100 + a.size(), b.data(), b.size());
  auto write = [](uint32_t key, std::span<const std::byte> value,
                  std::optional<BlockKey> parent = std::nullopt) {
    BlockWrite w;
    w.key = TestKey(key);
    w.value = value;
    w.parent = parent;
    return w;
  };
  std::vector<BlockWrite> writes = {write(31, mem.subspan(100, a.size())),
                                    write(32, mem.subspan(100 + a.size(), b.size()), TestKey(31))};
  std::vector<Status> put = shm->PutMany(writes);
  ASSERT_TRUE(put[0].ok() && put[1].ok()) << put[0].ToString() << put[1].ToString();
  EXPECT_TRUE(shm->PutMany(writes)[0].ok());  // Present already: OK, as PUT_MANY.
  // The buffer is the client's again as soon as PutMany returns: no block changes with it.
  std::memset(mem.data(), 0xEE, 100 + a.size() + b.size());
  EXPECT_EQ(*native->Get(TestKey(31)), a);
  EXPECT_EQ(*native->Get(TestKey(32)), b);

  // Released, its room is the staging file's again; a batch with one value outside every
  // buffer is copied as usual.
  whole->Release();
  ASSERT_TRUE(shm->Flush().ok());
  Result<ShmBuffer> small = shm->StagingBuffer(a.size());
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  std::memcpy(small->data().data(), a.data(), a.size());
  writes = {write(33, small->data()), write(34, b)};
  put = shm->PutMany(writes);
  ASSERT_TRUE(put[0].ok() && put[1].ok()) << put[0].ToString() << put[1].ToString();
  EXPECT_EQ(*native->Get(TestKey(33)), a);
  EXPECT_EQ(*native->Get(TestKey(34)), b);
}

TEST(DaemonShmTest, LeaseKeepsBytesUnchangedAfterDeleteAndChurn) {
  Daemon d(kNoDisk);
  std::unique_ptr<ShmClient> shm = ConnectShm(d);
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(shm && native);
  std::vector<std::byte> v = PatternValue(5, 3 << 20);
  ASSERT_TRUE(native->Put(TestKey(5), v).ok());
  Result<ShmBlocks> lease = shm->Get(std::vector<BlockKey>{TestKey(5)});
  ASSERT_TRUE(lease.ok() && lease->status(0).ok());
  ASSERT_TRUE(native->Delete(TestKey(5)).ok());
  EXPECT_EQ(native->Get(TestKey(5)).status().code(), StatusCode::kNotFound);
  // Write well over the arena's capacity: the leased space must not be reused meanwhile.
  std::vector<std::byte> filler = PatternValue(6, 4 << 20);
  for (uint32_t i = 0; i < 100; ++i) {
    filler[0] = static_cast<std::byte>(i);
    ASSERT_TRUE(shm->Put(TestKey(1000 + i), filler).ok());
  }
  EXPECT_EQ(Gather(*lease, 0), v);
}

// A ShmClient comes through an upgrade and a restart by itself. What its old connection held
// ends with it: a lease then reports itself invalid and a copy out of it fails (the new kvtierd
// reuses its memory), and an allocation's commit is aborted.
TEST(DaemonShmTest, AClientComesThroughAnUpgradeAndARestartAndOldLeasesFailCleanly) {
  Daemon d(kNoDisk);
  std::unique_ptr<ShmClient> shm = ConnectShm(d);
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(shm && native);
  const std::vector<std::byte> v = PatternValue(1, 1 << 20);
  ASSERT_TRUE(shm->Put(TestKey(1), v).ok());
  Result<ShmBlocks> lease = shm->Get(std::vector<BlockKey>{TestKey(1)});
  ASSERT_TRUE(lease.ok() && lease->status(0).ok());
  EXPECT_TRUE(lease->Valid());
  Result<ShmAllocation> pending = shm->Allocate(TestKey(2), 4096);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  Result<ShmBuffer> buffer = shm->StagingBuffer(v.size());
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  std::memcpy(buffer->data().data(), v.data(), v.size());
  EXPECT_TRUE(buffer->Valid());

  ASSERT_EQ(d.Upgrade(), 0) << "the old kvtierd did not stop cleanly";
  // Another client overwrites G2 several times over: the lease's pages are reused.
  native = ConnectNative(d);
  ASSERT_NE(native, nullptr);
  std::vector<std::byte> filler = PatternValue(6, 4 << 20);
  for (uint32_t i = 0; i < 100; ++i) {
    filler[0] = static_cast<std::byte>(i);
    ASSERT_TRUE(native->Put(TestKey(1000 + i), filler).ok());
  }
  EXPECT_FALSE(lease->Valid());
  std::vector<std::byte> out(v.size());
  EXPECT_EQ(lease->CopyTo(0, out).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(shm->Commit(std::move(pending).value()).code(), StatusCode::kAborted);
  lease->Release();  // Its connection is gone: nothing to send.
  // The buffer's memory is still the client's, but no longer the new connection's staging
  // file: a put from it copies it, as from any memory.
  EXPECT_FALSE(buffer->Valid());
  ASSERT_TRUE(shm->Put(TestKey(4), buffer->data()).ok());
  EXPECT_EQ(*native->Get(TestKey(4)), v);
  buffer->Release();

  // The next calls reconnect: the block put before the upgrade (put again, since the churn
  // evicted it), a new one, through shared memory and the native protocol alike.
  ASSERT_TRUE(shm->Put(TestKey(1), v).ok());
  Result<size_t> n = shm->Read(TestKey(1), out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(out, v);
  const std::vector<std::byte> w = PatternValue(3, 300000);
  ASSERT_TRUE(shm->Put(TestKey(3), w).ok());
  EXPECT_EQ(*native->Get(TestKey(3)), w);

  // A restart: a call made while kvtierd is down waits for it (retry_timeout_ms).
  ASSERT_EQ(d.Stop(), 0);
  Result<size_t> during = Status::Internal("not read");
  std::vector<std::byte> got(w.size());
  std::thread reader([&] { during = shm->Read(TestKey(3), got); });
  d.Start();
  reader.join();
  ASSERT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_EQ(got, w) << "the warm restart kept the block";
  EXPECT_TRUE(shm->Flush().ok());
}

// A block read from G3 is not in the arena: its bytes come inline in the SHM_GET reply.
TEST(DaemonShmTest, BlockFromBelowG2ComesInline) {
  Daemon d("[admission]\nfrequency_gate = false\n");
  std::unique_ptr<ShmClient> shm = ConnectShm(d);
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(shm && native);
  std::vector<std::byte> v = PatternValue(11, 300000);
  ASSERT_TRUE(native->Put(TestKey(11), v).ok());
  // Push it out of the 256 MiB of G2 into G3 (demotion is asynchronous: poll for it).
  std::vector<std::byte> filler = PatternValue(12, 4 << 20);
  uint32_t next = 2000;
  auto tier_of_11 = [&] {
    Result<std::vector<std::optional<TierLevel>>> t =
        native->Exists(std::vector<BlockKey>{TestKey(11)});
    return t.ok() ? (*t)[0] : std::nullopt;
  };
  for (int i = 0; i < 96; ++i) {  // 384 MiB, untouched block 11 first in line for eviction.
    filler[0] = static_cast<std::byte>(next);
    ASSERT_TRUE(shm->Put(TestKey(next++), filler).ok());
  }
  EXPECT_TRUE(Eventually([&] { return tier_of_11() == TierLevel::kG3; }))
      << "block 11 never reached G3";
  const double g3_hits = Metric(d, "kvtier_tier_hits_total{tier=\"g3\"}");
  Result<ShmBlocks> blocks = shm->Get(std::vector<BlockKey>{TestKey(11), TestKey(next - 1)});
  EXPECT_EQ(Metric(d, "kvtier_tier_hits_total{tier=\"g3\"}"), g3_hits + 1);
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  ASSERT_TRUE(blocks->status(0).ok()) << blocks->status(0).ToString();
  EXPECT_EQ(Gather(*blocks, 0), v);
  ASSERT_TRUE(blocks->status(1).ok());
  EXPECT_EQ(Gather(*blocks, 1), filler);
}

TEST(DaemonShmTest, LeaseLimitIsAClearErrorAndReleasingLiftsIt) {
  Daemon d;
  std::unique_ptr<ShmClient> shm = ConnectShm(d);
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(shm && native);
  ASSERT_TRUE(native->Put(TestKey(7), PatternValue(7, 4096)).ok());
  // The same block leased max_leases times (each SHM_GET item is a lease of its own).
  std::vector<BlockKey> keys(shm->max_leases(), TestKey(7));
  Result<ShmBlocks> all = shm->Get(keys);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (size_t i = 0; i < all->size(); ++i) ASSERT_TRUE(all->status(i).ok()) << i;
  Result<ShmBlocks> over = shm->Get(std::vector<BlockKey>{TestKey(7)});
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->status(0).code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over->status(0).message().find("max_leases"), std::string_view::npos);
  all->Release();
  Result<ShmBlocks> again = shm->Get(std::vector<BlockKey>{TestKey(7)});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->status(0).ok()) << again->status(0).ToString();
  again->Release();

  // ReadMany takes more keys than a lease request may: it asks in batches, each released
  // before the next, and answers per key (a miss, a buffer too small, a key without a buffer).
  keys.resize(shm->max_leases() + 3, TestKey(7));
  keys[shm->max_leases() + 1] = TestKey(8);
  std::vector<std::vector<std::byte>> bufs(keys.size() - 1, std::vector<std::byte>(4096));
  bufs.back().resize(10);
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  std::vector<Result<size_t>> got = shm->ReadMany(keys, outs);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i <= shm->max_leases(); ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    ASSERT_EQ(bufs[i], PatternValue(7, 4096)) << i;
  }
  EXPECT_EQ(got[shm->max_leases() + 1].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(got[shm->max_leases() + 2].status().code(), StatusCode::kInvalidArgument);
  outs.push_back(bufs.back());
  got = shm->ReadMany(keys, outs);
  EXPECT_EQ(got.back().status().code(), StatusCode::kOutOfRange);
}

TEST(DaemonShmTest, ForgedIdsAndMalformedRequestsAreErrorsNotCrashes) {
  Daemon d;
  RawUnix raw(d, protocol::kFeatureSharedMemory);
  ASSERT_NE(raw.granted() & protocol::kFeatureSharedMemory, 0u);
  // Nothing before SHM_ATTACH.
  EXPECT_EQ(raw.CallIds(Opcode::kShmRelease, {1}).status.code(), StatusCode::kFailedPrecondition);
  RawReply attach = raw.Call(Opcode::kShmAttach, "");  // recv() drops the descriptor.
  ASSERT_TRUE(attach.ok && attach.status.ok()) << attach.status.ToString();

  for (Opcode op : {Opcode::kShmRelease, Opcode::kShmCommit, Opcode::kShmAbort}) {
    RawReply r = raw.CallIds(op, {0, 999, UINT64_MAX});
    ASSERT_TRUE(r.ok && r.status.ok()) << r.status.ToString();
    for (const Status& s : ItemStatuses(r)) EXPECT_EQ(s.code(), StatusCode::kNotFound);
  }
  // An allocation id is not a lease id, and an id is good once.
  std::string body;
  protocol::EncodePutDirectory(
      std::vector<protocol::PutEntry>{{TestKey(8), std::nullopt, 100, 0, {}}}, &body);
  RawReply alloc = raw.Call(Opcode::kShmAlloc, body);
  Result<std::vector<protocol::ShmAllocItem>> items = protocol::DecodeShmAllocReply(
      {reinterpret_cast<const std::byte*>(alloc.body.data()), alloc.body.size()});
  ASSERT_TRUE(items.ok() && (*items)[0].status.ok());
  uint64_t id = (*items)[0].allocation;
  EXPECT_EQ(ItemStatuses(raw.CallIds(Opcode::kShmRelease, {id}))[0].code(), StatusCode::kNotFound);
  EXPECT_TRUE(ItemStatuses(raw.CallIds(Opcode::kShmAbort, {id}))[0].ok());
  EXPECT_EQ(ItemStatuses(raw.CallIds(Opcode::kShmCommit, {id}))[0].code(), StatusCode::kNotFound);

  // Malformed bodies: INVALID_ARGUMENT, and the connection stays usable.
  EXPECT_EQ(raw.Call(Opcode::kShmGet, std::string("\xff\xff\xff\xff", 4)).status.code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(raw.Call(Opcode::kShmAlloc, body.substr(0, body.size() - 1)).status.code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(raw.Call(Opcode::kShmRelease, "abc").status.code(), StatusCode::kInvalidArgument);
  RawReply ping = raw.Call(Opcode::kPing, "");
  EXPECT_TRUE(ping.ok && ping.status.ok());
}

// SHM_PUT takes only bytes inside a buffer the connection reserved, whatever offsets it names.
TEST(DaemonShmTest, StagingPutsOutsideAReservedBufferAreRefused) {
  Daemon d;
  RawUnix raw(d, protocol::kFeatureSharedMemory);
  ASSERT_NE(raw.granted() & protocol::kFeatureSharedMemory, 0u);
  RawReply attach = raw.Call(Opcode::kShmAttach, "");
  ASSERT_TRUE(attach.ok && attach.status.ok()) << attach.status.ToString();
  std::string body;
  protocol::EncodeShmReserveRequest(10000, &body);
  RawReply r = raw.Call(Opcode::kShmReserve, body);
  Result<protocol::ShmReservation> reserved = protocol::DecodeShmReserveReply(
      {reinterpret_cast<const std::byte*>(r.body.data()), r.body.size()});
  ASSERT_TRUE(reserved.ok()) << reserved.status().ToString();
  const uint64_t at = reserved->offset;
  auto put = [&](uint64_t key, uint64_t size, uint64_t offset) {
    std::string b;
    protocol::EncodeShmPutRequest(
        std::vector<protocol::PutEntry>{{TestKey(key), std::nullopt, size, 0, {}}},
        std::vector<uint64_t>{offset}, &b);
    std::vector<Status> s = ItemStatuses(raw.Call(Opcode::kShmPut, b));
    return s.size() == 1 ? s[0] : Status::Internal("not one item status");
  };
  EXPECT_TRUE(put(40, 10000, at).ok());
  EXPECT_EQ(put(41, 100, at + (512 << 20)).code(), StatusCode::kInvalidArgument);  // Elsewhere.
  EXPECT_EQ(put(42, 4 << 20, at).code(), StatusCode::kInvalidArgument);  // Past its end.
  EXPECT_EQ(put(43, 100, UINT64_MAX - 10).code(), StatusCode::kInvalidArgument);  // Overflow.
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_NE(native, nullptr);
  EXPECT_EQ(native->Get(TestKey(40))->size(), 10000u);
  for (uint64_t key : {41, 42, 43}) {
    EXPECT_EQ(native->Get(TestKey(key)).status().code(), StatusCode::kNotFound);
  }

  // A reservation id is released once, by SHM_RELEASE only; its room is then no buffer.
  EXPECT_EQ(ItemStatuses(raw.CallIds(Opcode::kShmCommit, {reserved->id}))[0].code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(ItemStatuses(raw.CallIds(Opcode::kShmRelease, {reserved->id}))[0].ok());
  EXPECT_EQ(ItemStatuses(raw.CallIds(Opcode::kShmRelease, {reserved->id}))[0].code(),
            StatusCode::kNotFound);
  EXPECT_EQ(put(44, 100, at).code(), StatusCode::kInvalidArgument);

  // Bad sizes and malformed bodies: clear errors, and the connection stays usable.
  body.clear();
  protocol::EncodeShmReserveRequest(0, &body);
  EXPECT_EQ(raw.Call(Opcode::kShmReserve, body).status.code(), StatusCode::kInvalidArgument);
  body.clear();
  protocol::EncodeShmReserveRequest(uint64_t{1} << 50, &body);
  EXPECT_EQ(raw.Call(Opcode::kShmReserve, body).status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(raw.Call(Opcode::kShmReserve, "abc").status.code(), StatusCode::kInvalidArgument);
  body.clear();
  protocol::EncodeShmPutRequest(
      std::vector<protocol::PutEntry>{{TestKey(45), std::nullopt, 100, 0, {}}}, {}, &body);
  EXPECT_EQ(raw.Call(Opcode::kShmPut, body).status.code(), StatusCode::kInvalidArgument);
  RawReply ping = raw.Call(Opcode::kPing, "");
  EXPECT_TRUE(ping.ok && ping.status.ok());
}

TEST(DaemonShmTest, TcpClientsAndClientsThatDidNotAskAreRefused) {
  Daemon d;
  int fd = ConnectTcp(d.native_port());
  protocol::HelloRequest hello;
  hello.features = protocol::kFeatureSharedMemory | protocol::kFeaturePrefetch;
  std::string body;
  protocol::EncodeHello(hello, &body);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kHello), 1, body));
  RawReply r = ReadReply(fd);
  ASSERT_TRUE(r.ok && r.status.ok());
  Result<protocol::HelloResponse> resp = protocol::DecodeHelloResponse(
      {reinterpret_cast<const std::byte*>(r.body.data()), r.body.size()});
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->features & protocol::kFeatureSharedMemory, 0u);
  EXPECT_NE(resp->features & protocol::kFeaturePrefetch, 0u);
  SendAll(fd, NativeFrame(static_cast<uint8_t>(Opcode::kShmAttach), 2, ""));
  RawReply attach = ReadReply(fd);
  ASSERT_TRUE(attach.ok);
  EXPECT_EQ(attach.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(attach.status.message().find("Unix socket"), std::string_view::npos);
  close(fd);

  RawUnix plain(d, 0);
  EXPECT_EQ(plain.granted() & protocol::kFeatureSharedMemory, 0u);
  EXPECT_EQ(plain.Call(Opcode::kShmAttach, "").status.code(), StatusCode::kFailedPrecondition);

  ShmClientOptions o;
  o.socket_path = "/nonexistent/kvtierd.sock";
  EXPECT_EQ(ShmClient::Connect(o).status().code(), StatusCode::kUnavailable);
}

// A client killed with SIGKILL while it holds leases and allocations leaks nothing: the daemon
// gets the space back when it sees the connection close, and other clients carry on.
TEST(DaemonShmTest, KilledClientLeaksNoLeasesOrAllocations) {
  Daemon d(kNoDisk);
  std::unique_ptr<ShmClient> survivor = ConnectShm(d);  // No threads: safe across fork.
  ASSERT_TRUE(survivor);
  constexpr size_t kBlock = 4 << 20;
  std::vector<std::byte> a = PatternValue(9, kBlock);
  ASSERT_TRUE(survivor->Put(TestKey(9), a).ok());
  const uint64_t baseline = G2UsedBytes(d);
  ASSERT_GE(baseline, kBlock);

  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    // Lease the block, then reserve 240 MiB of the 256 MiB arena without committing.
    RawUnix raw(d, protocol::kFeatureSharedMemory);
    bool ok = raw.Call(Opcode::kShmAttach, "").status.ok();
    std::string keys;
    protocol::EncodeKeyList(std::vector<BlockKey>{TestKey(9), TestKey(9)}, &keys);
    ok = ok && raw.Call(Opcode::kShmGet, keys).status.ok();
    std::vector<protocol::PutEntry> entries;
    for (uint32_t i = 0; i < 60; ++i) {
      entries.push_back({TestKey(5000 + i), std::nullopt, kBlock, 0, {}});
    }
    std::string body;
    protocol::EncodePutDirectory(entries, &body);
    RawReply alloc = raw.Call(Opcode::kShmAlloc, body);
    Result<std::vector<protocol::ShmAllocItem>> items = protocol::DecodeShmAllocReply(
        {reinterpret_cast<const std::byte*>(alloc.body.data()), alloc.body.size()});
    ok = ok && items.ok();
    for (size_t i = 0; ok && i < items->size(); ++i) ok = (*items)[i].status.ok();
    char c = ok ? 'y' : 'n';
    ssize_t w = write(ready[1], &c, 1);
    (void)w;
    pause();  // Killed here.
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(c, 'y') << "the child could not take its leases and allocations";
  EXPECT_GE(G2UsedBytes(d), baseline + 60 * kBlock);

  // The block is deleted while the doomed client still leases it.
  std::unique_ptr<Client> native = ConnectNative(d);
  ASSERT_TRUE(native);
  ASSERT_TRUE(native->Delete(TestKey(9)).ok());
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);

  // Everything comes back: the reservations and the deleted block's leased pages.
  EXPECT_TRUE(Eventually([&] { return G2UsedBytes(d) == baseline - kBlock; }))
      << "G2 used bytes stayed at " << G2UsedBytes(d);
  // And the whole arena is usable: 60 new blocks of 4 MiB stay resident (none evicted).
  std::vector<std::byte> v = PatternValue(10, kBlock);
  std::vector<BlockKey> keys;
  for (uint32_t i = 0; i < 60; ++i) {
    keys.push_back(TestKey(7000 + i));
    ASSERT_TRUE(survivor->Put(keys.back(), v).ok()) << i;
  }
  Result<std::vector<std::optional<TierLevel>>> present = native->Exists(keys);
  ASSERT_TRUE(present.ok());
  for (const std::optional<TierLevel>& t : *present) EXPECT_EQ(t, TierLevel::kG2);
  // The surviving client carried on throughout.
  std::vector<std::byte> out(kBlock);
  EXPECT_TRUE(survivor->Read(TestKey(7000), out).ok());
  EXPECT_EQ(out, v);
}

}  // namespace
}  // namespace kvtier::daemon_test
