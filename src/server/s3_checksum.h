// The body checksums S3 clients send: the flexible checksums (x-amz-checksum-crc32, -crc32c,
// -crc64nvme, -sha1, -sha256; in a header or an aws-chunked trailer) and Content-MD5, computed
// over the bytes as they arrive so that a mismatch is found before anything is stored.
//
// Thread safety: an S3Checksum belongs to one request; the functions are pure.

#ifndef KVTIER_SERVER_S3_CHECKSUM_H_
#define KVTIER_SERVER_S3_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::server {

enum class S3ChecksumAlgorithm : uint8_t { kCrc32, kCrc32c, kCrc64Nvme, kSha1, kSha256, kMd5 };

// The algorithm of a header or trailer name ("x-amz-checksum-crc32", any case); nullopt for
// another name. Content-MD5 is not one of them: it has its own header.
std::optional<S3ChecksumAlgorithm> ChecksumOfHeader(std::string_view name);
// The algorithm an x-amz-checksum-algorithm or x-amz-sdk-checksum-algorithm value names
// ("CRC32", any case).
std::optional<S3ChecksumAlgorithm> ChecksumOfName(std::string_view name);
// "x-amz-checksum-crc32" etc.; "content-md5" for kMd5.
std::string_view ChecksumHeader(S3ChecksumAlgorithm algorithm);

// One checksum of a body that arrives in pieces.
class S3Checksum {
 public:
  explicit S3Checksum(S3ChecksumAlgorithm algorithm);
  ~S3Checksum();
  S3Checksum(S3Checksum&&) noexcept;
  S3Checksum& operator=(S3Checksum&&) noexcept;

  S3ChecksumAlgorithm algorithm() const { return algorithm_; }
  void Update(std::span<const std::byte> data);
  // The digest, big-endian for the CRCs. Ends the checksum.
  std::vector<uint8_t> Finish();
  // Finish(), base64-encoded as S3 sends it.
  std::string FinishBase64();

 private:
  struct Digest;
  S3ChecksumAlgorithm algorithm_;
  uint64_t crc_ = 0;
  std::unique_ptr<Digest> digest_;  // SHA-1, SHA-256, MD5 (OpenSSL).
};

// Standard base64 with padding (RFC 4648 section 4).
std::string Base64Encode(std::span<const uint8_t> data);
// Lower-case hex MD5 of `data`: an object's ETag.
std::string Md5Hex(std::span<const std::byte> data);

// The CRCs on their own, for tests against published check values: each returns the CRC of
// `data` continuing from `crc` (0 to start).
uint32_t Crc32(uint32_t crc, std::span<const std::byte> data);
uint32_t Crc32c(uint32_t crc, std::span<const std::byte> data);
uint64_t Crc64Nvme(uint64_t crc, std::span<const std::byte> data);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_S3_CHECKSUM_H_
