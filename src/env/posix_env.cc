#include <chrono>

#include "kvtier/env.h"

namespace kvtier {
namespace {

class PosixEnv final : public Env {
 public:
  uint64_t NowMicros() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();  // Never destroyed: usable during static teardown.
  return env;
}

}  // namespace kvtier
