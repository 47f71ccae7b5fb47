#include "src/server/s3_body.h"

#include <strings.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "src/common/sigv4.h"
#include "src/server/aws_chunked.h"

namespace kvtier::server {

std::optional<uint64_t> DecodedLength(const HttpRequest& request, uint64_t max_bytes) {
  const std::string* text = request.Header("x-amz-decoded-content-length");
  if (text == nullptr || text->empty() || text->size() > 19 ||
      text->find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const uint64_t n = std::stoull(*text);
  if (n > max_bytes) return std::nullopt;
  return n;
}

std::optional<S3Error> DecodeS3Body(const HttpRequest& request,
                                    std::vector<std::span<std::byte>> http_pieces,
                                    const S3Auth& auth, S3Body* out) {
  std::vector<std::pair<std::string, std::string>> trailers;  // Of an aws-chunked body.
  const std::string* encoding = request.Header("content-encoding");
  const bool streaming = auth.payload == S3Payload::kStreamingSigned ||
                         auth.payload == S3Payload::kStreamingSignedTrailer ||
                         auth.payload == S3Payload::kStreamingUnsignedTrailer;
  if (streaming || (encoding != nullptr && encoding->find("aws-chunked") != std::string::npos)) {
    std::optional<ChunkSignatures> signatures;
    if (auth.payload == S3Payload::kStreamingSigned ||
        auth.payload == S3Payload::kStreamingSignedTrailer) {
      signatures.emplace(auth);
    }
    AwsChunkedBody decoded;
    if (std::optional<S3Error> e =
            DecodeAwsChunked(http_pieces, signatures ? &*signatures : nullptr,
                             auth.payload == S3Payload::kStreamingSignedTrailer, &decoded)) {
      return e;
    }
    if (const std::string* n = request.Header("x-amz-decoded-content-length");
        n != nullptr && *n != std::to_string(decoded.size)) {
      return S3Error{400, "IncompleteBody", "x-amz-decoded-content-length is " + *n +
                                                ", the body " + std::to_string(decoded.size) +
                                                " bytes"};
    }
    out->pieces = std::move(decoded.data);
    out->size = decoded.size;
    trailers = std::move(decoded.trailers);
  } else {
    out->pieces = std::move(http_pieces);
    out->size = 0;
    for (std::span<const std::byte> p : out->pieces) out->size += p.size();
  }
  return ExpectChecks(request, auth, trailers, out);
}

std::optional<S3Error> ExpectChecks(const HttpRequest& request, const S3Auth& auth,
                                    std::span<const std::pair<std::string, std::string>> trailers,
                                    S3Body* out) {
  if (auth.payload == S3Payload::kSha256) out->payload_sha256 = auth.payload_sha256;
  using Header = std::pair<std::string, std::string>;
  for (std::span<const Header> list : {std::span<const Header>(request.headers), trailers}) {
    for (const auto& [name, value] : list) {
      if (std::optional<S3ChecksumAlgorithm> a = ChecksumOfHeader(name)) out->expected.emplace_back(*a, value);
      if (name == "content-md5") out->expected.emplace_back(S3ChecksumAlgorithm::kMd5, value);
    }
  }
  if (const std::string* t = request.Header("x-amz-trailer"); t != nullptr) {
    std::optional<S3ChecksumAlgorithm> a = ChecksumOfHeader(*t);
    bool sent = false;
    for (const auto& [name, value] : trailers) sent = sent || name == *t;
    if (!a || !sent) {
      return S3Error{400, "InvalidRequest", "x-amz-trailer names '" + *t + "', which the body does "
                                            "not end with (or which is not a checksum)"};
    }
  }
  return std::nullopt;
}

S3BodyChecks::S3BodyChecks(const S3Body& body, bool digest) : body_(body) {
  checksums_.reserve(body.expected.size());
  for (const auto& [algorithm, value] : body.expected) checksums_.emplace_back(algorithm);
  if (!body.payload_sha256.empty()) sha256_.emplace(S3ChecksumAlgorithm::kSha256);
  if (digest) digest_stream_ = std::make_unique<Digest128Stream>();
}

void S3BodyChecks::Update(std::span<const std::byte> bytes) {
  for (S3Checksum& c : checksums_) c.Update(bytes);
  if (sha256_) sha256_->Update(bytes);
  if (digest_stream_) digest_stream_->Update(bytes);
}

std::optional<S3Error> S3BodyChecks::Finish() {
  if (digest_stream_) digest_ = digest_stream_->Value();
  if (sha256_ && s3::HexEncode(sha256_->Finish()) != body_.payload_sha256) {
    return S3Error{400, "XAmzContentSHA256Mismatch",
                   "The provided 'x-amz-content-sha256' header does not match what was computed."};
  }
  for (size_t i = 0; i < checksums_.size(); ++i) {
    const S3ChecksumAlgorithm algorithm = body_.expected[i].first;
    if (checksums_[i].FinishBase64() == body_.expected[i].second) continue;
    return algorithm == S3ChecksumAlgorithm::kMd5
               ? S3Error{400, "BadDigest", "The Content-MD5 you specified did not match what we received."}
               : S3Error{400, "BadDigest", "The " + std::string(ChecksumHeader(algorithm)) +
                                               " you specified did not match the calculated checksum."};
  }
  return std::nullopt;
}

std::optional<S3Error> JoinChecked(const S3Body& body, std::span<std::byte>* joined,
                                   std::array<uint8_t, 16>* digest) {
  *joined = JoinInPlace(body.pieces);
  S3BodyChecks checks(body, digest != nullptr);
  checks.Update(*joined);
  std::optional<S3Error> e = checks.Finish();
  if (!e && digest != nullptr) *digest = checks.digest();
  return e;
}

void CopyInto(std::span<const std::span<std::byte>> out, size_t offset,
              std::span<const std::byte> bytes, S3BodyChecks* checks) {
  // Small enough that a stretch copied is still in L1/L2 when the checks read it.
  constexpr size_t kStretch = 64 << 10;
  size_t o = 0;  // out[o], from byte `offset` of it on.
  while (o < out.size() && offset >= out[o].size()) offset -= out[o++].size();
  while (!bytes.empty()) {
    const size_t n = std::min({kStretch, bytes.size(), out[o].size() - offset});
    std::memcpy(out[o].data() + offset, bytes.data(), n);
    if (checks != nullptr) checks->Update(bytes.first(n));
    bytes = bytes.subspan(n);
    offset += n;
    if (offset == out[o].size()) {
      ++o;
      offset = 0;
    }
  }
}

void CopyChecked(const S3Body& body, std::span<const std::span<std::byte>> out, size_t offset,
                 S3BodyChecks* checks) {
  for (std::span<const std::byte> piece : body.pieces) {
    CopyInto(out, offset, piece, checks);
    offset += piece.size();
  }
}

}  // namespace kvtier::server
