// What the replay tests share: small traces written out in the test, and their block size.

#ifndef KVTIER_TOOLS_PLANNING_REPLAY_TEST_UTIL_H_
#define KVTIER_TOOLS_PLANNING_REPLAY_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "tools/planning/trace.h"

namespace kvtier::planning {

// Llama 3.1 8B, BF16: 131,072 bytes per token, so a 4-token block is 512 KiB.
inline constexpr uint64_t kBlockBytes = 4 * 131'072;

inline Trace ParseOrDie(const std::string& text) {
  std::istringstream in(text);
  Result<Trace> t = ParseTrace(in, {});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return *t;
}

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_REPLAY_TEST_UTIL_H_
