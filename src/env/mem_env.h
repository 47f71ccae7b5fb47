// An Env whose files live in memory, for unit tests (a unit test never needs a real disk).
// Direct-I/O files enforce the same alignment rules as O_DIRECT. The clock comes from `clock`.
//
// Thread safety: thread-safe.

#ifndef KVTIER_ENV_MEM_ENV_H_
#define KVTIER_ENV_MEM_ENV_H_

#include <memory>

#include "kvtier/env.h"

namespace kvtier {

// `clock` supplies NowMicros; not owned, must outlive the returned Env.
std::unique_ptr<Env> NewMemEnv(Env* clock);

}  // namespace kvtier

#endif  // KVTIER_ENV_MEM_ENV_H_
