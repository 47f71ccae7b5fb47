// libFuzzer target: the S3 endpoint's decoders (HTTP framing, aws-chunked bodies, SigV4
// headers) and its request handler behind them, with unsigned requests let in (allow_anonymous)
// so that the fuzzer reaches every operation.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "src/server/aws_chunked.h"
#include "src/server/http_request.h"
#include "src/server/s3_auth.h"
#include "tests/fuzz/fuzz_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* server = [] {
    auto* s = new kvtier::fuzz::FuzzServer();
    s->EnableS3();
    return s;
  }();
  auto* b = reinterpret_cast<const std::byte*>(data);
  const std::vector<std::byte> input(b, b + size);

  // The framing, fed in two pieces split where the first byte says.
  kvtier::server::HttpRequestParser parser({.max_head_bytes = 4096, .max_headers = 32, .max_body_bytes = 1 << 16});
  const size_t split = size == 0 ? 0 : data[0] % (size + 1);
  parser.Parse(std::span(input).first(split));
  if (parser.Parse(input) == kvtier::server::HttpRequestParser::State::kComplete) {
    if (parser.consumed() > size) __builtin_trap();
    std::vector<std::byte> copy = input;
    (void)parser.Body(copy);
    kvtier::server::S3Keys keys;
    kvtier::server::S3Auth auth;
    (void)kvtier::server::VerifyS3Signature(parser.request(), keys, 1700000000, &auth);
  }

  // The whole input as an aws-chunked body, unsigned and signed, in pieces of as many bytes as
  // the first byte says (a chunked HTTP body's chunks), which the decoder reads across.
  {
    std::vector<std::byte> body = input;
    std::vector<std::span<std::byte>> pieces;
    const size_t piece = size == 0 ? 1 : data[0] % 64 + 1;
    for (size_t at = 0; at < size; at += piece) {
      pieces.push_back(std::span(body).subspan(at, std::min(piece, size - at)));
    }
    kvtier::server::AwsChunkedBody out;
    if (!kvtier::server::DecodeAwsChunked(pieces, nullptr, false, &out)) {
      size_t total = 0;
      for (std::span<std::byte> p : out.data) {
        if (p.data() < body.data() || p.data() + p.size() > body.data() + size) __builtin_trap();
        total += p.size();
      }
      if (total != out.size || total > size) __builtin_trap();
    }
    kvtier::server::S3Auth auth;
    auth.seed_signature = std::string(64, '0');
    kvtier::server::ChunkSignatures signatures(auth);
    kvtier::server::AwsChunkedBody signed_out;
    (void)kvtier::server::DecodeAwsChunked(pieces, &signatures, true, &signed_out);
  }

  auto handler = kvtier::server::NewS3Handler(server->ctx(), kvtier::fuzz::FuzzServer::LocalPeer(false));
  kvtier::fuzz::FuzzServer::Drive(handler.get(), input);
  return 0;
}
