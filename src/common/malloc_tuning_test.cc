#include "src/common/malloc_tuning.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvtier {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVTIER_OWN_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVTIER_OWN_ALLOCATOR 1
#endif
#endif

// A block-sized buffer must come from the heap (reused when freed) rather than from a mapping
// of its own, which costs a page fault per 4 KiB every time one is allocated.
TEST(MallocTuningTest, BlockSizedBuffersComeFromTheHeap) {
#if !defined(__GLIBC__) || defined(KVTIER_OWN_ALLOCATOR)
  GTEST_SKIP() << "glibc's allocator only";
#else
  KeepLargeBuffersInHeap();
  constexpr size_t kBlock = 8u << 20;  // Above glibc's default mmap threshold at any time.
  const size_t mapped_before = mallinfo2().hblkhd;
  std::unique_ptr<char[]> buffer(new char[kBlock]);
  std::memset(buffer.get(), 1, kBlock);
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "an 8 MiB buffer was mmapped on its own";
#endif
}

// What /metrics says the heap holds follows a buffer's life: allocated while it lives, kept
// free for reuse once freed.
TEST(MallocTuningTest, HeapStatsSeeABufferAllocatedThenKeptFree) {
#if !defined(__GLIBC__) || defined(KVTIER_OWN_ALLOCATOR)
  GTEST_SKIP() << "glibc's allocator only";
#else
  KeepLargeBuffersInHeap();
  constexpr size_t kBlock = 8u << 20;
  const HeapStats before = ReadHeapStats();
  auto buffer = std::make_unique<char[]>(kBlock);
  std::memset(buffer.get(), 1, kBlock);
  const HeapStats holding = ReadHeapStats();
  EXPECT_GE(holding.allocated_bytes, before.allocated_bytes + kBlock);
  buffer.reset();
  const HeapStats freed = ReadHeapStats();
  EXPECT_LE(freed.allocated_bytes + kBlock, holding.allocated_bytes);
  EXPECT_GE(freed.free_bytes, kBlock) << "below the trim threshold, a freed buffer stays";
#endif
}

// Freed buffers the heap keeps (KeepLargeBuffersInHeap) stay resident until released.
TEST(MallocTuningTest, ReleasingFreeHeapPagesGivesTheirMemoryBack) {
#if !defined(__GLIBC__) || defined(KVTIER_OWN_ALLOCATOR)
  GTEST_SKIP() << "glibc's allocator only";
#else
  const auto resident_bytes = [] {
    std::ifstream statm("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  };
  KeepLargeBuffersInHeap();
  constexpr size_t kBuffer = 16u << 20;  // Below the mmap threshold: from the heap.
  constexpr int kBuffers = 4;
  {
    std::vector<std::unique_ptr<char[]>> buffers;
    for (int i = 0; i < kBuffers; ++i) {
      buffers.push_back(std::make_unique<char[]>(kBuffer));
      std::memset(buffers.back().get(), 1, kBuffer);
    }
  }
  const uint64_t kept = resident_bytes();
  ReleaseFreeHeapPages();
  const uint64_t released = resident_bytes();
  EXPECT_GE(kept, released + (kBuffers - 1) * kBuffer)
      << "resident " << (kept >> 20) << " MiB before, " << (released >> 20) << " MiB after";
#endif
}

}  // namespace
}  // namespace kvtier
