#include "src/common/malloc_tuning.h"

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

}  // namespace kvtier
