// Process-wide allocator settings for a process that moves multi-megabyte KV blocks.
//
// glibc serves allocations above its mmap threshold (128 KiB, raised dynamically up to 32 MiB)
// with a fresh mmap and unmaps them on free, and trims the heap top eagerly. A 2 MiB block
// buffer then costs 512 page faults and the kernel zeroing 2 MiB every time one is allocated:
// on the development VM that was 40% of the S3 tier's CPU in a GET of 2 MiB blocks. Setting
// the thresholds explicitly keeps such buffers in the heap, where freed ones are reused.

#ifndef KVTIER_SRC_COMMON_MALLOC_TUNING_H_
#define KVTIER_SRC_COMMON_MALLOC_TUNING_H_

#include <cstdint>

namespace kvtier {

// Serves allocations up to 32 MiB from the heap and keeps up to 256 MiB of freed memory at
// the heap top. Call once, early in main(), before threads start; a library never calls it
// (it changes the whole process). No-op on C libraries other than glibc.
void KeepLargeBuffersInHeap();

// What the allocator holds: the bytes allocated and not freed (mmapped ones included), and the
// free space it keeps for reuse (resident where its pages were touched since the last
// ReleaseFreeHeapPages). Walks every arena under its lock: for /metrics, not for a hot path.
// Zeros on C libraries other than glibc.
struct HeapStats {
  uint64_t allocated_bytes = 0;
  uint64_t free_bytes = 0;
};
HeapStats ReadHeapStats();

// Returns to the kernel the pages of freed heap memory (malloc_trim): what KeepLargeBuffersInHeap
// keeps for reuse, and the free space fragmentation leaves between live allocations, which the
// allocator never gives back by itself. The address space stays; the next allocation there
// faults its pages in again. Locks each arena in turn for the walk (milliseconds for tens of
// MiB): call it every few seconds, not per request. No-op on C libraries other than glibc.
void ReleaseFreeHeapPages();

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_MALLOC_TUNING_H_
