#include "src/common/malloc_tuning.h"

// Any C library header defines __GLIBC__ on glibc; without one, the test below is always false
// and the tuning silently compiles to nothing.
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvtier {

void KeepLargeBuffersInHeap() {
#if defined(__GLIBC__)
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

HeapStats ReadHeapStats() {
  HeapStats stats;
#if defined(__GLIBC__)
  const struct mallinfo2 info = mallinfo2();
  stats.allocated_bytes = info.uordblks + info.hblkhd;
  stats.free_bytes = info.fordblks;
#endif
  return stats;
}

void ReleaseFreeHeapPages() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace kvtier
