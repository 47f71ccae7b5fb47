// libFuzzer target: the RESP2 parser and the server's RESP command handler.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "src/protocol/resp.h"
#include "tests/fuzz/fuzz_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* server = new kvtier::fuzz::FuzzServer();
  std::string_view in(reinterpret_cast<const char*>(data), size);

  kvtier::protocol::RespLimits limits;
  limits.max_bulk_bytes = 1 << 16;
  limits.max_args = 64;
  limits.max_command_bytes = 1 << 20;
  limits.max_inline_bytes = 1024;
  std::vector<std::string_view> args;
  for (;;) {
    kvtier::protocol::RespParse r = kvtier::protocol::ParseRespCommand(in, limits, &args);
    if (r.state != kvtier::protocol::RespParse::State::kCommand) break;
    if (r.consumed == 0 || r.consumed > in.size()) __builtin_trap();
    in.remove_prefix(r.consumed);
  }

  auto* b = reinterpret_cast<const std::byte*>(data);
  auto handler = kvtier::server::NewRespHandler(server->ctx(), kvtier::fuzz::FuzzServer::LocalPeer(false));
  kvtier::fuzz::FuzzServer::Drive(handler.get(), std::vector<std::byte>(b, b + size));
  return 0;
}
