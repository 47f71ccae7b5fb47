// The on-disk format of the DiskTier, version 2: segment headers, records, segment footers.
// docs/disk_format.md is the specification; this is its only encoder and decoder. All integers
// are little-endian. Decoders take untrusted bytes: anything malformed is a DataLoss status
// (a segment of another format version is FailedPrecondition), never a crash.
//
// Thread safety: pure functions.

#ifndef KVTIER_TIER_DISK_DISK_FORMAT_H_
#define KVTIER_TIER_DISK_DISK_FORMAT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "src/env/aligned_buffer.h"

namespace kvtier::disk {

// Version 2 added sessions, creation times, dtypes, key versions and session tombstones.
// Version 1 directories are refused (nothing was deployed with them).
inline constexpr uint16_t kFormatVersion = 2;
inline constexpr size_t kPageBytes = kDirectIoAlignment;  // Records and footers are page-aligned.
inline constexpr uint32_t kSegmentMagic = 0x4753564B;     // "KVSG"
inline constexpr uint32_t kRecordMagic = 0x4352564B;      // "KVRC"
inline constexpr uint32_t kFooterMagic = 0x4246564B;      // "KVFB"
inline constexpr uint32_t kTrailerMagic = 0x5446564B;     // "KVFT"
inline constexpr size_t kSegmentHeaderBytes = kPageBytes;
inline constexpr size_t kTrailerBytes = kPageBytes;
inline constexpr size_t kMaxTenantNameBytes = 255;
inline constexpr uint8_t kFlagEncrypted = 0x01;  // Payload sealed with AES-256-GCM.
inline constexpr uint8_t kKnownFlags = kFlagEncrypted;
inline constexpr uint8_t kCodecNone = 0;         // Payload = the value's bytes (maybe sealed).
inline constexpr uint8_t kDtypeUnknown = 0;      // Opaque bytes; otherwise a KvDtype value.
inline constexpr uint8_t kMaxDtype = static_cast<uint8_t>(KvDtype::kFp8E5M2);

enum class RecordKind : uint8_t {
  kBlock = 0,        // A block's bytes.
  kEraseKey = 1,     // Tombstone: the key's older records are deleted.
  kEraseTenant = 2,  // Tombstone: every older record of the tenant is deleted.
  kEraseSession = 3, // Tombstone: every older record of the tenant with that session is deleted.
};
inline constexpr uint8_t kMaxRecordKind = static_cast<uint8_t>(RecordKind::kEraseSession);

struct SegmentHeader {
  uint64_t segment_id = 0;
  uint64_t created_us = 0;
};

struct RecordHeader {
  RecordKind kind = RecordKind::kBlock;
  uint8_t flags = 0;             // kFlagEncrypted or 0.
  uint8_t codec = kCodecNone;    // PayloadInfo::codec (block_codec.h); opaque to the format.
  uint32_t key_version = 0;      // Tenant data-key version when encrypted, else 0.
  BlockKey key;                  // All zero for tenant and session tombstones.
  std::string tenant;            // 1 to 255 bytes.
  uint64_t sequence = 0;         // Logical time of the put or erase; kept by relocation.
  uint64_t timestamp_us = 0;     // Last access known when the record was written.
  uint64_t value_bytes = 0;      // Length of the block as the user sees it.
  uint64_t stored_bytes = 0;     // Length of the payload on disk.
  uint64_t payload_checksum = 0; // XXH3-64 of the stored payload.
  std::array<uint8_t, 12> nonce{};
  std::array<uint8_t, 16> tag{};
  uint8_t dtype = kDtypeUnknown; // KvDtype of the values, or kDtypeUnknown.
  uint64_t session = 0;          // The block's session (0 = none); the erased session.
  uint64_t created_us = 0;       // When the block was first stored; kept by relocation.
};

// One record as listed in a segment footer: everything the index needs, so that recovery
// from a footer alone restores what a scan of the records would.
struct FooterEntry {
  RecordKind kind = RecordKind::kBlock;
  uint16_t tenant = 0;         // Index into Footer::tenants (or the caller's tenant table).
  BlockKey key;
  uint32_t offset_pages = 0;   // Record offset in the segment, in pages.
  uint32_t record_pages = 0;   // Record length, in pages.
  uint64_t value_bytes = 0;
  uint64_t sequence = 0;
  uint64_t timestamp_us = 0;
  uint32_t stored_bytes = 0;   // Payload length (a record never exceeds a 4 GiB segment).
  uint8_t dtype = kDtypeUnknown;
  uint64_t session = 0;
  uint64_t created_us = 0;
};

struct Footer {
  std::vector<std::string> tenants;
  std::vector<FooterEntry> entries;
};

struct Trailer {
  uint64_t segment_id = 0;
  uint64_t footer_offset = 0;  // Page-aligned.
  uint64_t footer_bytes = 0;   // Body length, excluding padding and the trailer page.
  uint64_t footer_checksum = 0;
};

// Parses a segment file name, "0000000042.seg" (10 digits, 1 to 2^32 - 2); false for any other.
bool ParseSegmentFileName(std::string_view name, uint32_t* id);

// Bytes of a record header for a tenant name of `tenant_bytes`: a multiple of 8.
size_t RecordHeaderBytes(size_t tenant_bytes);
// Bytes a record occupies on disk: header plus payload, rounded up to whole pages.
uint64_t RecordBytes(size_t tenant_bytes, uint64_t stored_bytes);

// REQUIRES: out.size() >= RecordHeaderBytes(h.tenant.size()); 1 <= tenant size <= 255.
void EncodeRecordHeader(const RecordHeader& h, std::span<std::byte> out);
// Decodes the header at the start of `in`; *header_bytes receives its length. DataLoss for a
// bad magic, checksum, length, version, unknown kind, flag or dtype, or fields that contradict
// each other (an unsealed raw payload whose length differs from the value's, a tombstone with
// a payload). The codec id is not interpreted here: BlockCodec::Decode rejects unknown ids.
Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> in, size_t* header_bytes);

// REQUIRES: out.size() >= kSegmentHeaderBytes.
void EncodeSegmentHeader(const SegmentHeader& h, std::span<std::byte> out);
// FailedPrecondition when written by another format version (older ones are not migrated);
// DataLoss when not a segment.
Result<SegmentHeader> DecodeSegmentHeader(std::span<const std::byte> in);

// Length of the encoded footer body for these tenant names and `entries` entries.
size_t FooterBodyBytes(size_t tenant_table_bytes, size_t entries);
// Bytes of the tenant table for `names`: one length byte plus the name each.
size_t TenantTableBytes(const std::vector<std::string>& names);
// Footer body, padded to a page, then the trailer page: exactly what follows the last record.
// Empty when memory runs out.
AlignedBuffer EncodeFooter(const Footer& footer, uint64_t segment_id,
                                    uint64_t footer_offset);
// Decodes the last page of a sealed segment. DataLoss when it is not a valid trailer.
Result<Trailer> DecodeTrailer(std::span<const std::byte> in);
// Decodes a footer body whose checksum and extent the trailer gave. Entries must lie in
// [kSegmentHeaderBytes, footer_offset).
Result<Footer> DecodeFooter(std::span<const std::byte> body, const Trailer& trailer);

}  // namespace kvtier::disk

#endif  // KVTIER_TIER_DISK_DISK_FORMAT_H_
