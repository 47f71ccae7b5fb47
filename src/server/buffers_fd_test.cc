// OutputQueue on a real socket: a descriptor passed with the first byte of its piece, in order
// with the bytes queued before and after it; writes bounded by a byte budget.

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "src/server/buffers.h"

namespace kvtier::server {
namespace {

// Reads n bytes with recvmsg, collecting a passed descriptor (-1 when none came).
std::string Receive(int fd, size_t n, int* passed) {
  std::string out(n, '\0');
  iovec iov{out.data(), n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r = recvmsg(fd, &msg, MSG_WAITALL);
  out.resize(r > 0 ? static_cast<size_t>(r) : 0);
  *passed = -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c != nullptr && c->cmsg_type == SCM_RIGHTS) std::memcpy(passed, CMSG_DATA(c), sizeof(int));
  return out;
}

TEST(OutputQueueFdTest, DescriptorTravelsWithItsFirstByte) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  int file = memfd_create("buffers_fd_test", MFD_CLOEXEC);
  ASSERT_GE(file, 0);
  ASSERT_EQ(ftruncate(file, 12345), 0);

  OutputQueue out;
  out.Append("before");
  out.AppendWithFds("with-fd", {file});
  out.Append("after");
  while (!out.empty()) ASSERT_TRUE(out.WriteTo(fds[0]).ok());

  int passed = -1;
  // The bytes before the descriptor arrive without it...
  EXPECT_EQ(Receive(fds[1], 6, &passed), "before");
  EXPECT_EQ(passed, -1);
  // ...and it comes with the piece it was queued with.
  EXPECT_EQ(Receive(fds[1], 12, &passed), "with-fdafter");
  ASSERT_GE(passed, 0);
  struct stat st{};
  ASSERT_EQ(fstat(passed, &st), 0);
  EXPECT_EQ(st.st_size, 12345);
  close(passed);
  close(file);
  close(fds[0]);
  close(fds[1]);
}

TEST(OutputQueueFdTest, AWriteStopsAtItsBudget) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  OutputQueue q;
  q.Append("hello ");
  q.Append(std::string(1000, 'x'));
  Result<size_t> n = q.WriteTo(fds[0], 8);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 8u);
  EXPECT_EQ(q.pending_bytes(), 1006u - 8);
  EXPECT_EQ(*q.WriteTo(fds[0], 0), 0u);
  n = q.WriteTo(fds[0]);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 998u);
  EXPECT_TRUE(q.empty());
  int passed;
  EXPECT_EQ(Receive(fds[1], 1006, &passed), "hello " + std::string(1000, 'x'));
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace kvtier::server
