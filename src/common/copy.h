// Copying a block out of shared memory into a caller's buffer at memcpy's best speed.
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

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_COPY_H_
