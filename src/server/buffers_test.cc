#include "src/server/buffers.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

TEST(InputBufferTest, ReserveKeepsUnconsumedBytes) {
  InputBuffer in;
  in.Reserve(4);
  std::memcpy(in.write_ptr(), "abcd", 4);
  in.Commit(4);
  in.Consume(2);
  in.Reserve(1 << 20);
  EXPECT_GE(in.writable_size(), 1u << 20);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(std::memcmp(in.data().data(), "cd", 2), 0);
}

TEST(InputBufferTest, ARequestThatFitsTheRetainedCapacityLeavesTheBufferForTheNext) {
  // A request known to be at least 3 MiB (an S3 PUT's decoded length), then its framing.
  InputBuffer in;
  in.Reserve(3 << 20);
  in.Commit(3 << 20);
  in.Reserve(100 << 10);
  in.Commit(100 << 10);
  in.Consume(in.size());
  EXPECT_EQ(in.writable_size(), InputBuffer::kRetainedCapacity)
      << "grown to the retained capacity, not past it, and kept";
  // A request larger than that still gets its room, and its buffer is released after it.
  in.Reserve(5 << 20);
  EXPECT_GE(in.writable_size(), 5u << 20);
  in.Commit(5 << 20);
  in.Consume(in.size());
  EXPECT_EQ(in.writable_size(), 0u);
}

// Writes an owned reply and a leased block through a socket pair; checks bytes and order.
TEST(OutputQueueTest, GathersOwnedBytesAndLeasesInOrder) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  OutputQueue out;
  out.Append("head:");
  std::string block = "BLOCKDATA";
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(block.data()),
                               reinterpret_cast<const std::byte*>(block.data()) + block.size());
  out.AppendLease(BlockHandle(std::move(bytes)));
  out.Append(":tail");
  EXPECT_EQ(out.pending_bytes(), 19u);
  while (!out.empty()) {
    Result<size_t> n = out.WriteTo(fds[0]);
    ASSERT_TRUE(n.ok());
  }
  char buf[32] = {};
  ASSERT_EQ(read(fds[1], buf, sizeof(buf)), 19);
  EXPECT_EQ(std::string(buf, 19), "head:BLOCKDATA:tail");
  close(fds[0]);
  close(fds[1]);
}

TEST(OutputQueueTest, WriteToAClosedPeerIsUnavailable) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  close(fds[1]);
  OutputQueue out;
  out.Append("x");
  EXPECT_EQ(out.WriteTo(fds[0]).status().code(), StatusCode::kUnavailable);
  close(fds[0]);
}

}  // namespace
}  // namespace kvtier::server
