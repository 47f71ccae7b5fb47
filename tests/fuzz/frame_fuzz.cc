// libFuzzer target: the native protocol's frame decoder, every message decoder, and the
// server's native request handler (after a HELLO when the first input byte is even).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/protocol/messages.h"
#include "src/protocol/wire.h"
#include "tests/fuzz/fuzz_server.h"

namespace {

using namespace kvtier;

void DecodeEverything(std::span<const std::byte> body) {
  (void)protocol::DecodeHelloRequest(body);
  (void)protocol::DecodeHelloResponse(body);
  (void)protocol::DecodeAuthRequest(body);
  (void)protocol::DecodeAuthResponse(body);
  (void)protocol::DecodeKeyList(body, 1024);
  (void)protocol::DecodeDeleteRequest(body, 1024);
  (void)protocol::DecodeDeleteSessionRequest(body);
  (void)protocol::DecodeHintSessionRequest(body);
  (void)protocol::DecodeDeletionReport(body);
  (void)protocol::DecodePutMany(body, 1024, 1 << 20);
  (void)protocol::DecodeItemStatuses(body);
  (void)protocol::DecodePrefixMatch(body);
  (void)protocol::DecodeResumeRequest(body, 1024);
  (void)protocol::DecodeResumeMatch(body);
  (void)protocol::DecodeExists(body);
  (void)protocol::DecodeStats(body);
  (void)protocol::DecodeGetMany(body);
  (void)protocol::DecodeResponseStatus(body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* server = new fuzz::FuzzServer();
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);

  DecodeEverything(in);
  std::span<const std::byte> rest = in;
  for (;;) {
    protocol::DecodedFrame f = protocol::DecodeFrame(rest, 1 << 20);
    if (f.state != protocol::DecodedFrame::State::kFrame) break;
    DecodeEverything(f.body);
    rest = rest.subspan(f.frame_size);
  }

  std::vector<std::byte> input;
  if (size > 0 && data[0] % 2 == 0) {
    std::string hello_body;
    protocol::EncodeHello(protocol::HelloRequest{}, &hello_body);
    protocol::FrameHeader h;
    h.opcode = static_cast<uint8_t>(protocol::Opcode::kHello);
    h.body_length = static_cast<uint32_t>(hello_body.size());
    std::byte head[protocol::kHeaderSize];
    protocol::EncodeHeader(h, head);
    input.insert(input.end(), head, head + protocol::kHeaderSize);
    auto* b = reinterpret_cast<const std::byte*>(hello_body.data());
    input.insert(input.end(), b, b + hello_body.size());
    in = in.subspan(1);
  }
  input.insert(input.end(), in.begin(), in.end());
  auto handler = server::NewNativeHandler(server->ctx(), fuzz::FuzzServer::LocalPeer(false));
  fuzz::FuzzServer::Drive(handler.get(), std::move(input));
  return 0;
}
