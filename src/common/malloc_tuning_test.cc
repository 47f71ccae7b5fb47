#include "src/common/malloc_tuning.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

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

}  // namespace
}  // namespace kvtier
