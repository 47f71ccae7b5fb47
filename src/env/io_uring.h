// An IoQueue on io_uring (liburing): up to depth() reads and writes in flight on PosixFiles.

#ifndef KVTIER_ENV_IO_URING_H_
#define KVTIER_ENV_IO_URING_H_

#include <cstdint>
#include <memory>

#include "kvtier/env.h"

namespace kvtier {

// Unavailable when the kernel refuses to set up a ring (old kernel, seccomp, sysctl
// kernel.io_uring_disabled). Operations must name PosixFiles (from the posix Env); any other
// File is rejected with InvalidArgument.
Result<std::unique_ptr<IoQueue>> NewIoUringQueue(uint32_t depth);

}  // namespace kvtier

#endif  // KVTIER_ENV_IO_URING_H_
