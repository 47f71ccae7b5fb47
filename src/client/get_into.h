// Receives a GET_MANY reply (docs/protocol.md) straight into the caller's buffers: the item
// list goes through a small scratch buffer, each value from the socket into its destination.

#ifndef KVTIER_CLIENT_GET_INTO_H_
#define KVTIER_CLIENT_GET_INTO_H_

#include <cstddef>
#include <span>
#include <vector>

#include "kvtier/status.h"
#include "src/client/client_connection.h"

namespace kvtier::client {

// Reads a GET_MANY reply body of `length` bytes for `outs.size()` keys through `read`, writing
// the i-th value into outs[i] and its outcome into (*results)[i]: the size, NotFound for a
// miss, OutOfRange (outs[i] not written) for a value larger than outs[i], the server's error,
// or Internal for a malformed reply. Reads exactly `length` bytes unless a read fails, whose
// error it returns (the connection is then unusable); OK otherwise, whatever the items say.
Status ReadGetManyInto(size_t length, const BodyRead& read,
                       std::span<const std::span<std::byte>> outs,
                       std::vector<Result<size_t>>* results);

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_GET_INTO_H_
