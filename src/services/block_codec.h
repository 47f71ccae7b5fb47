// BlockCodec: the data services of a persistent tier (G3, G4), as one decorator around the
// tier's payload I/O. On the way to the device a block is compressed (kv_codec.h: byte planes
// by dtype, then zstd; kept as it is where that does not pay), then sealed under its tenant's
// data key (record_cipher.h: AES-256-GCM, the block key, tenant and the tier's record format
// version bound as associated data). On the way back the tag is checked before anything is
// decompressed, and nothing is returned from a record that fails.
//
// The tier stores the encoded payload and the PayloadInfo next to it (its record header); the
// tier's own checksum covers the stored bytes, so a flipped bit is caught before decryption.
//
// Decode errors, which tiers turn into misses and count:
//   DataLoss            the record does not authenticate (tampered, sealed under another
//                       tenant's key or another format version) or its compressed form is
//                       corrupt or truncated;
//   FailedPrecondition  the tenant's keys were shredded (IsShredded() is true);
//   NotFound            the record names a key version the keystore never had;
//   InvalidArgument     a codec id or flag this build does not know (a newer writer).
//
// Thread safety: thread-safe. Concurrent calls each take a worker (zstd contexts, a cipher)
// from a small pool, so the steady state allocates nothing.

#ifndef KVTIER_SRC_SERVICES_BLOCK_CODEC_H_
#define KVTIER_SRC_SERVICES_BLOCK_CODEC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvtier/block_key.h"
#include "kvtier/options.h"
#include "kvtier/status.h"
#include "src/common/mutex.h"

namespace kvtier {

namespace encryption {
class KeyService;
}

// How a stored payload was produced. Tiers store every field; a tier that does not encrypt
// still stores zeros so that its format does not change when encryption is switched on.
struct PayloadInfo {
  // 0: the payload holds the value's bytes. 1: a KV-codec payload (kv_codec.h, which records
  // the dtype and the plane layout in its own header).
  uint8_t codec = 0;
  bool encrypted = false;
  uint32_t key_version = 0;           // The tenant's data-key version; 0 when not encrypted.
  std::array<uint8_t, 12> nonce{};    // GCM nonce; zero when not encrypted.
  std::array<uint8_t, 16> tag{};      // GCM tag; zero when not encrypted.
};

inline constexpr uint8_t kPayloadCodecNone = 0;
inline constexpr uint8_t kPayloadCodecKv = 1;

class BlockCodec {
 public:
  // `keys` is not owned and must outlive the codec; it is required (InvalidArgument
  // otherwise) when options.encrypt is set.
  [[nodiscard]] static Result<std::unique_ptr<BlockCodec>> Create(const TierDataOptions& options,
                                                                  encryption::KeyService* keys);
  ~BlockCodec();
  BlockCodec(const BlockCodec&) = delete;
  BlockCodec& operator=(const BlockCodec&) = delete;

  const TierDataOptions& options() const { return options_; }

  // The most bytes Encode() writes for a value of `value_bytes`.
  size_t MaxEncodedBytes(size_t value_bytes) const;

  // Encodes `value` into `out` (REQUIRES: out.size() >= MaxEncodedBytes(value.size())) and
  // returns the payload's size; *info describes it. `format_version` is the version of the
  // tier's record format, bound into the associated data. `dtype` nullopt = opaque bytes.
  // Errors: InvalidArgument for a bad tenant name or size; the KeyService's errors.
  [[nodiscard]] Result<size_t> Encode(uint16_t format_version, std::string_view tenant,
                                      const BlockKey& key, std::optional<KvDtype> dtype,
                                      std::span<const std::byte> value, std::span<std::byte> out,
                                      PayloadInfo* info);

  // Decodes `stored` into `out`, which must be exactly the value's size (the tier records it).
  // `stored` may be overwritten (decrypted in place). See the header comment for the errors;
  // on error `out` holds no plaintext.
  [[nodiscard]] Status Decode(uint16_t format_version, std::string_view tenant,
                              const BlockKey& key, const PayloadInfo& info,
                              std::span<std::byte> stored, std::span<std::byte> out);

  // Whether a Decode error means "the tenant's key is gone" rather than "the record is bad".
  static bool IsShredded(const Status& status) {
    return status.code() == StatusCode::kFailedPrecondition;
  }

 private:
  struct Worker;
  BlockCodec(const TierDataOptions& options, encryption::KeyService* keys);
  // Decode without wiping `out` on error.
  Status DecodeUnchecked(uint16_t format_version, std::string_view tenant, const BlockKey& key,
                         const PayloadInfo& info, std::span<std::byte> stored,
                         std::span<std::byte> out);
  Result<std::unique_ptr<Worker>> TakeWorker() ABSL_LOCKS_EXCLUDED(mu_);
  void ReturnWorker(std::unique_ptr<Worker> worker) ABSL_LOCKS_EXCLUDED(mu_);

  const TierDataOptions options_;
  encryption::KeyService* const keys_;
  Mutex mu_;
  std::vector<std::unique_ptr<Worker>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_SRC_SERVICES_BLOCK_CODEC_H_
