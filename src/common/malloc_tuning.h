// Process-wide allocator settings for a process that moves multi-megabyte KV blocks.
//
// glibc serves allocations above its mmap threshold (128 KiB, raised dynamically up to 32 MiB)
// with a fresh mmap and unmaps them on free, and trims the heap top eagerly. A 2 MiB block
// buffer then costs 512 page faults and the kernel zeroing 2 MiB every time one is allocated:
// on the development VM that was 40% of the S3 tier's CPU in a GET of 2 MiB blocks. Setting
// the thresholds explicitly keeps such buffers in the heap, where freed ones are reused.

#ifndef KVTIER_SRC_COMMON_MALLOC_TUNING_H_
#define KVTIER_SRC_COMMON_MALLOC_TUNING_H_

namespace kvtier {

// Serves allocations up to 32 MiB from the heap and keeps up to 256 MiB of freed memory at
// the heap top. Call once, early in main(), before threads start; a library never calls it
// (it changes the whole process). No-op on C libraries other than glibc.
void KeepLargeBuffersInHeap();

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_MALLOC_TUNING_H_
