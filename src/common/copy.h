// Copying blocks at memory's speed: out of shared memory into a caller's buffer (CopyBytes), and
// from a shared-memory client's staging file into G2 (CopyBytesUncached).
//
// glibc's memcpy copies between about 2 KiB and the L2 cache's size with `rep movsb`. On AMD
// CPUs (measured on this project's EPYC VM, glibc 2.36) that instruction runs at a fifth of its
// speed when the destination sits 1-31 bytes past the source modulo 64: 2.6 GiB/s against 13.9
// for 256 KiB. A block in G2 starts on a page, and a malloc'd buffer (numpy's, a std::vector's)
// 16 bytes past one, which is that case.

#ifndef KVTIER_SRC_COMMON_COPY_H_
#define KVTIER_SRC_COMMON_COPY_H_

#include <cstddef>

namespace kvtier {

// memcpy(dst, src, n) for buffers that do not overlap, avoiding the slow case above: there it
// copies in pieces under glibc's `rep movsb` threshold, which glibc copies with vector loads and
// stores (11-12 GiB/s for 256 KiB on the VM). Elsewhere, and on other CPUs, it is memcpy.
void CopyBytes(std::byte* dst, const std::byte* src, size_t n);

// memcpy(dst, src, n) for buffers that do not overlap, into memory that is not read again soon
// (a block being stored): on x86-64, from 4 KiB, with non-temporal stores, which write whole
// cache lines without reading them first and leave the caches to what is in use. Into memory
// that is not in the caches (G2's arena) they run at 1.6-1.8x memcpy's speed from 64 KiB to
// 2 MiB on the project's EPYC VM (17-19 GiB/s against 10-11; docs/store.md, "How a
// shared-memory put's bytes land in G2", says why only that commit uses it). The bytes are
// ordered before any later store of the thread when it returns. memcpy elsewhere.
void CopyBytesUncached(std::byte* dst, const std::byte* src, size_t n);

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_COPY_H_
