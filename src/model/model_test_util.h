// Test helpers for src/model: locating the real model data and building synthetic files.

#ifndef KVTIER_SRC_MODEL_MODEL_TEST_UTIL_H_
#define KVTIER_SRC_MODEL_MODEL_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "src/model/model_files.h"

#ifndef KVTIER_TEST_MODEL_DIR
#define KVTIER_TEST_MODEL_DIR ""
#endif

namespace kvtier::model::testing {

// The directory of the real model ($KVTIER_MODEL_DIR, else the build's default), or "" when
// the data is absent: callers then GTEST_SKIP().
inline std::string TestModelDir() { return FindModelDir("", KVTIER_TEST_MODEL_DIR); }

inline constexpr const char* kNoModelMessage =
    "model data not found: set KVTIER_MODEL_DIR to the folder holding stories260K.bin and "
    "tok512.bin (default " KVTIER_TEST_MODEL_DIR ")";

inline void AppendBytes(std::vector<std::byte>* out, const void* data, size_t size) {
  const size_t at = out->size();
  out->resize(at + size);
  std::memcpy(out->data() + at, data, size);
}

// A legacy checkpoint with the given header and `floats` deterministic small weights.
inline std::vector<std::byte> SyntheticCheckpoint(const int32_t (&header)[7], size_t floats) {
  std::vector<std::byte> bytes;
  AppendBytes(&bytes, header, sizeof(header));
  uint32_t state = 12345;
  for (size_t i = 0; i < floats; ++i) {
    state = state * 1664525u + 1013904223u;
    const float w = static_cast<float>(static_cast<int32_t>(state >> 8) % 2001 - 1000) / 4000.0f;
    AppendBytes(&bytes, &w, sizeof(w));
  }
  return bytes;
}

}  // namespace kvtier::model::testing

#endif  // KVTIER_SRC_MODEL_MODEL_TEST_UTIL_H_
