// libFuzzer target: the shared-memory fast path's decoders, and the server's SHM_* handling
// behind a HELLO that was granted SHARED_MEMORY, an SHM_ATTACH (as on the Unix socket) and an
// SHM_RESERVE.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "src/protocol/messages.h"
#include "src/protocol/shm_messages.h"
#include "src/protocol/wire.h"
#include "tests/fuzz/fuzz_server.h"

namespace {

using namespace kvtier;

void Frame(protocol::Opcode op, const std::string& body, std::vector<std::byte>* out) {
  protocol::FrameHeader h;
  h.opcode = static_cast<uint8_t>(op);
  h.body_length = static_cast<uint32_t>(body.size());
  std::byte head[protocol::kHeaderSize];
  protocol::EncodeHeader(h, head);
  out->insert(out->end(), head, head + protocol::kHeaderSize);
  auto* b = reinterpret_cast<const std::byte*>(body.data());
  out->insert(out->end(), b, b + body.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* server = new fuzz::FuzzServer();
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);

  // Decoders of untrusted bytes (either side's).
  (void)protocol::DecodeShmAttachReply(in);
  Result<protocol::ShmGetReply> get = protocol::DecodeShmGetReply(in);
  if (get.ok()) {
    for (const protocol::ShmGetItem& item : get->items) {
      (void)protocol::CheckExtents(item.extents, item.size, 1 << 20);
    }
  }
  (void)protocol::DecodeShmAllocRequest(in, 64, 1 << 16);
  (void)protocol::DecodeShmAllocReply(in);
  (void)protocol::DecodeShmIds(in, 64);
  (void)protocol::DecodeShmReserveRequest(in);
  (void)protocol::DecodeShmReserveReply(in);
  (void)protocol::DecodeShmPutRequest(in, 64, 1 << 16);

  // The handler, as a granted Unix-socket client would reach it.
  std::vector<std::byte> input;
  protocol::HelloRequest hello;
  hello.features = protocol::kFeatureSharedMemory;
  std::string body;
  protocol::EncodeHello(hello, &body);
  Frame(protocol::Opcode::kHello, body, &input);
  Frame(protocol::Opcode::kShmAttach, "", &input);
  body.clear();
  protocol::EncodeShmReserveRequest(1 << 20, &body);  // A buffer for SHM_PUTs to name.
  Frame(protocol::Opcode::kShmReserve, body, &input);
  input.insert(input.end(), in.begin(), in.end());
  auto handler = server::NewNativeHandler(server->ctx(), fuzz::FuzzServer::LocalPeer(true));
  fuzz::FuzzServer::Drive(handler.get(), std::move(input));
  return 0;
}
