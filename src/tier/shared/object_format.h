// The G4 object format, version 1, shared by SharedFsTier and S3Tier, and the naming of
// objects under a root/bucket. docs/shared_tier.md is the specification; this is its only
// encoder and decoder. All integers are little-endian.
//
// An object is a header followed by the stored payload (the value, or what BlockCodec made of
// it: compressed and/or sealed with AES-256-GCM under the tenant's data key):
//
//   header  := magic:u32 "KVG4" | version:u16 | header_bytes:u16 | flags:u8 | codec:u8 |
//              dtype:u8 | tenant_bytes:u8 | key_version:u32 | key:32 | session:u64 |
//              created_us:u64 | value_bytes:u64 | stored_bytes:u64 | nonce:12 | tag:16 |
//              payload_checksum:u64 | tenant:tenant_bytes | zero padding to a multiple of 8 |
//              header_checksum:u64
//   object  := header | payload:stored_bytes
//
// header_checksum is XXH3-64 of every header byte before it; payload_checksum is XXH3-64 of
// the payload. Decoders take untrusted bytes: anything malformed is DataLoss; a header whose
// version is newer than this build's is FailedPrecondition (it is never interpreted).
//
// Thread safety: pure functions, except SealObject/OpenObject, which are as thread-safe as
// the BlockCodec they are given (it is).

#ifndef KVTIER_SRC_TIER_SHARED_OBJECT_FORMAT_H_
#define KVTIER_SRC_TIER_SHARED_OBJECT_FORMAT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/services/block_codec.h"

namespace kvtier::g4 {

inline constexpr uint16_t kObjectFormatVersion = 1;
inline constexpr uint32_t kObjectMagic = 0x3447564B;  // "KVG4" little-endian
inline constexpr size_t kMaxTenantNameBytes = 255;
inline constexpr uint8_t kFlagEncrypted = 0x01;
// Fixed part of the header, before the tenant name.
inline constexpr size_t kObjectFixedHeaderBytes = 116;
// The largest header (tenant of 255 bytes); a reader that fetches this many leading bytes
// always holds the whole header.
inline constexpr size_t kMaxObjectHeaderBytes = 384;
// The largest value accepted (1 GiB, as Store's max_block_bytes).
inline constexpr uint64_t kMaxValueBytes = uint64_t{1} << 30;

struct ObjectHeader {
  std::string tenant;  // 1 to 255 bytes.
  BlockKey key;
  SessionId session = 0;
  uint64_t created_us = 0;
  std::optional<KvDtype> dtype;
  uint64_t value_bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t payload_checksum = 0;
  PayloadInfo payload;  // codec, encrypted, key_version, nonce, tag.
};

// Length of the header for a tenant name of `tenant_bytes`: a multiple of 8.
size_t ObjectHeaderBytes(size_t tenant_bytes);

// REQUIRES: out.size() >= ObjectHeaderBytes(h.tenant.size()); 1 <= tenant size <= 255.
void EncodeObjectHeader(const ObjectHeader& h, std::span<std::byte> out);

// Decodes the header at the start of `in` (which may hold more: the payload); *header_bytes
// receives its length. DataLoss when malformed; FailedPrecondition for a newer version.
Result<ObjectHeader> DecodeObjectHeader(std::span<const std::byte> in, size_t* header_bytes);

// An object as its header and its payload held apart, so that a value stored as it is can be
// sent from the caller's buffer without being copied behind the header.
struct SealedObject {
  SealedObject() = default;
  // Moves keep `payload` valid (a vector's buffer moves with it); a copy would not.
  SealedObject(SealedObject&&) = default;
  SealedObject& operator=(SealedObject&&) = default;
  SealedObject(const SealedObject&) = delete;
  SealedObject& operator=(const SealedObject&) = delete;

  std::vector<std::byte> header;
  std::vector<std::byte> encoded;  // The payload, when a codec encoded the value.
  // `encoded`, or the value itself (which must then outlive this object).
  std::span<const std::byte> payload;

  size_t size() const { return header.size() + payload.size(); }
};

// Builds the object for `value`: encodes it with `codec` (nullptr = stored as is) and makes
// its header. InvalidArgument for a bad tenant name or size; the codec's errors.
Result<SealedObject> SealObjectParts(BlockCodec* codec, std::string_view tenant,
                                     const BlockKey& key, SessionId session, uint64_t created_us,
                                     std::optional<KvDtype> dtype,
                                     std::span<const std::byte> value);

// SealObjectParts as one buffer: the header followed by the payload.
Result<std::vector<std::byte>> SealObject(BlockCodec* codec, std::string_view tenant,
                                          const BlockKey& key, SessionId session,
                                          uint64_t created_us, std::optional<KvDtype> dtype,
                                          std::span<const std::byte> value);

// Verifies a whole object read for (tenant, key) and returns its value. DataLoss when the
// object is malformed, truncated, has trailing bytes, fails a checksum or names another
// tenant or key; the codec's errors (DataLoss: the AES-GCM tag fails; FailedPrecondition:
// tenant keys shredded). An encoded object read without a codec is FailedPrecondition.
// `object` may be modified (decrypted in place). *stored_bad (optional) is set true only when
// the stored bytes themselves are wrong (structure, lengths, checksums): such an object can
// be removed. A tag failure over intact bytes may mean this node holds another key for the
// tenant (a misconfigured keystore); the object is then a miss but is not removed.
Result<std::vector<std::byte>> OpenObject(BlockCodec* codec, std::string_view tenant,
                                          const BlockKey& key, std::span<std::byte> object,
                                          bool* stored_bad = nullptr);

// The two halves of OpenObject, for readers that fetch the header and the payload
// separately (the payload then lands in the buffer that is returned, with no copy):
// VerifyHeader decodes the header at the start of `head` and checks it against the object's
// total size and the (tenant, key) asked for; OpenPayload checks the payload checksum (or
// `payload_checksum`, the payload's Checksum64 when the reader computed it as the bytes
// arrived) and decodes it. Errors and *stored_bad as for OpenObject.
Result<ObjectHeader> VerifyHeader(std::string_view tenant, const BlockKey& key,
                                  std::span<const std::byte> head, uint64_t object_bytes,
                                  size_t* header_bytes, bool* stored_bad);
Result<std::vector<std::byte>> OpenPayload(BlockCodec* codec, std::string_view tenant,
                                           const BlockKey& key, const ObjectHeader& header,
                                           std::vector<std::byte> payload,
                                           std::optional<uint64_t> payload_checksum,
                                           bool* stored_bad);

// --- Naming -------------------------------------------------------------------------------

// The path/URL-safe component for a tenant name: the name itself when it is 1 to 64 bytes of
// [A-Za-z0-9_-]; otherwise "~" followed by the hex SHA-256 of the name (64 digits), which no
// plain name can equal. InvalidArgument for an empty name or one over 255 bytes.
Result<std::string> TenantComponent(std::string_view tenant);

// Relative names under a root or bucket (always '/' separators):
//   kvtier-g4/v1/objects/<tenant>/<key hex[0:2]>/<key hex>
//   kvtier-g4/v1/sessions/<tenant>/<session as 16 hex>/<key hex>   (empty marker)
//   kvtier-g4/v1/tmp/<node>.<unique>.tmp                           (shared FS only)
//   kvtier-g4/v1/lease/janitor
//   kvtier-g4/v1/notices/<notice name>                              (deletion notices)
//   kvtier-g4/v1/records/<record name>                              (cluster records: keys)
//   kvtier-g4/v1/access/...                                         (S3 only, see below)
inline constexpr std::string_view kPrefix = "kvtier-g4/v1";
std::string ObjectName(std::string_view tenant_component, const BlockKey& key);
// The key an object name (or its last component) names; InvalidArgument for any other name.
Result<BlockKey> ObjectKey(std::string_view object_name);
std::string TenantObjectsPrefix(std::string_view tenant_component);  // ends with '/'
std::string SessionPrefix(std::string_view tenant_component, SessionId session);  // ends '/'
std::string TenantSessionsPrefix(std::string_view tenant_component);  // ends with '/'
std::string SessionMarkerName(std::string_view tenant_component, SessionId session,
                              const BlockKey& key);
//   kvtier-g4/v1/access/<tenant>/<key hex[0:2]>/<key hex>   (S3 only: empty access marker)
std::string AccessMarkerName(std::string_view tenant_component, const BlockKey& key);
std::string TenantAccessPrefix(std::string_view tenant_component);  // ends with '/'

std::string NoticesPrefix();  // ends with '/'
// Notice names: 1 to 200 of [A-Za-z0-9._-].
bool ValidNoticeName(std::string_view name);

std::string RecordsPrefix();  // ends with '/'
// Record names: 1 to 200 of [A-Za-z0-9._~-].
bool ValidRecordName(std::string_view name);
// OK for a valid record name, else InvalidArgument naming it.
Status CheckRecordName(std::string_view name);

// Node ids name temp files and lease holders: 1 to 64 of [A-Za-z0-9_-].
bool ValidNodeId(std::string_view id);
// "<hostname>-<pid>", sanitized to a valid node id.
std::string DefaultNodeId();

}  // namespace kvtier::g4

#endif  // KVTIER_SRC_TIER_SHARED_OBJECT_FORMAT_H_
