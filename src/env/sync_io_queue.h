// A synchronous IoQueue: every operation runs to completion inside Submit through
// File::Read / File::Write. Used where io_uring is unavailable or not wanted, and by the
// in-memory and fault-injection Envs.

#ifndef KVTIER_ENV_SYNC_IO_QUEUE_H_
#define KVTIER_ENV_SYNC_IO_QUEUE_H_

#include <cstdint>
#include <memory>

#include "kvtier/env.h"

namespace kvtier {

std::unique_ptr<IoQueue> NewSyncIoQueue(uint32_t depth);

}  // namespace kvtier

#endif  // KVTIER_ENV_SYNC_IO_QUEUE_H_
