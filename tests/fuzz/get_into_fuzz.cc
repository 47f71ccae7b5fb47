// libFuzzer target: the C++ client's streaming GET_MANY decoder (src/client/get_into.h), which
// writes values from an untrusted reply straight into caller buffers. The first input byte picks
// the number of buffers, the next ones their sizes; the rest is the reply body.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "src/client/get_into.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier;
  if (size < 1) return 0;
  size_t n = data[0] % 8;
  if (size < 1 + n) return 0;
  std::vector<std::vector<std::byte>> bufs;
  for (size_t i = 0; i < n; ++i) bufs.emplace_back(data[1 + i] % 64);
  const uint8_t* body = data + 1 + n;
  size_t length = size - 1 - n;
  size_t pos = 0;
  client::BodyRead read = [&](std::byte* out, size_t k) -> Status {
    if (k > length - pos) return Status::Unavailable("short");
    std::memcpy(out, body + pos, k);
    pos += k;
    return Status::OK();
  };
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  std::vector<Result<size_t>> results;
  Status s = client::ReadGetManyInto(length, read, outs, &results);
  // Without a read error the whole body is consumed, and sizes never exceed their buffers.
  if (!s.ok() || pos != length || results.size() != n) std::abort();
  for (size_t i = 0; i < n; ++i) {
    if (results[i].ok() && *results[i] > bufs[i].size()) std::abort();
  }
  return 0;
}
