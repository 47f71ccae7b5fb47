// Env: kvtier's window on the operating system. Every clock read goes through an Env so that
// tests and trace replays can run on simulated time.
//
// Thread safety: implementations must be safe to call from any thread.

#ifndef KVTIER_ENV_H_
#define KVTIER_ENV_H_

#include <cstdint>

namespace kvtier {

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide default Env, backed by the operating system. Never deleted.
  static Env* Default();

  // Wall-clock time in microseconds since the Unix epoch. Used for TTLs, which must mean the
  // same thing after a restart, so this is not a monotonic clock.
  virtual uint64_t NowMicros() = 0;
};

}  // namespace kvtier

#endif  // KVTIER_ENV_H_
