#include "src/tier/disk/disk_format.h"

#include <cstring>
#include <string>

#include "src/common/byte_codec.h"
#include "src/common/checksum.h"

namespace kvtier::disk {
namespace {

// Fixed part of a record header, before the tenant name.
constexpr size_t kRecordFixedBytes = 136;
constexpr size_t kFooterFixedBytes = 16;
constexpr size_t kFooterEntryBytes = 88;
constexpr size_t kTrailerUsedBytes = 48;

uint64_t Hash(std::span<const std::byte> in, size_t n) { return Checksum64(in.first(n)); }

}  // namespace

bool ParseSegmentFileName(std::string_view name, uint32_t* id) {
  if (name.size() != 14 || name.substr(10) != ".seg") return false;
  uint64_t v = 0;
  for (size_t i = 0; i < 10; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  if (v == 0 || v >= UINT32_MAX) return false;
  *id = static_cast<uint32_t>(v);
  return true;
}

size_t RecordHeaderBytes(size_t tenant_bytes) {
  return Align8(kRecordFixedBytes + tenant_bytes) + 8;
}

uint64_t RecordBytes(size_t tenant_bytes, uint64_t stored_bytes) {
  return AlignUp(RecordHeaderBytes(tenant_bytes) + stored_bytes);
}

void EncodeRecordHeader(const RecordHeader& h, std::span<std::byte> out) {
  const size_t header_bytes = RecordHeaderBytes(h.tenant.size());
  ByteWriter w(out);
  w.U32(kRecordMagic);
  w.U16(kFormatVersion);
  w.U8(static_cast<uint8_t>(h.kind));
  w.U8(h.flags);
  w.U8(h.codec);
  w.U8(static_cast<uint8_t>(h.tenant.size()));
  w.U16(static_cast<uint16_t>(header_bytes));
  w.U32(h.key_version);
  w.Raw(h.key.data(), kBlockKeySize);
  w.U64(h.sequence);
  w.U64(h.timestamp_us);
  w.U64(h.value_bytes);
  w.U64(h.stored_bytes);
  w.U64(h.payload_checksum);
  w.Raw(h.nonce.data(), h.nonce.size());
  w.Raw(h.tag.data(), h.tag.size());
  w.U8(h.dtype);
  w.U8(0);
  w.U16(0);
  w.U64(h.session);
  w.U64(h.created_us);
  w.Raw(h.tenant.data(), h.tenant.size());
  w.PadTo(header_bytes - 8);
  w.U64(Hash(out, header_bytes - 8));
}

Result<RecordHeader> DecodeRecordHeader(std::span<const std::byte> in, size_t* header_bytes) {
  ByteReader r(in);
  if (r.U32() != kRecordMagic || !r.ok()) return Status::DataLoss("no record header");
  const uint16_t version = r.U16();
  RecordHeader h;
  const uint8_t kind = r.U8();
  h.flags = r.U8();
  h.codec = r.U8();
  const uint8_t tenant_bytes = r.U8();
  const uint16_t length = r.U16();
  h.key_version = r.U32();
  if (!r.ok() || length != RecordHeaderBytes(tenant_bytes) || tenant_bytes == 0 ||
      length > in.size()) {
    return Status::DataLoss("record header has a bad length");
  }
  uint64_t stored_checksum = 0;
  std::memcpy(&stored_checksum, in.data() + length - 8, 8);
  if (Hash(in, length - 8) != stored_checksum) {
    return Status::DataLoss("record header checksum mismatch");
  }
  // A valid checksum over a newer version's header: this build cannot interpret it.
  if (version != kFormatVersion) return Status::DataLoss("record of an unknown format version");
  if (kind > kMaxRecordKind) return Status::DataLoss("record of an unknown kind");
  h.kind = static_cast<RecordKind>(kind);
  if ((h.flags & ~kKnownFlags) != 0) return Status::DataLoss("record has unknown flags");
  std::array<uint8_t, kBlockKeySize> key;
  r.Raw(key.data(), key.size());
  h.key = BlockKey(key);
  h.sequence = r.U64();
  h.timestamp_us = r.U64();
  h.value_bytes = r.U64();
  h.stored_bytes = r.U64();
  h.payload_checksum = r.U64();
  r.Raw(h.nonce.data(), h.nonce.size());
  r.Raw(h.tag.data(), h.tag.size());
  h.dtype = r.U8();
  r.Skip(3);
  h.session = r.U64();
  h.created_us = r.U64();
  h.tenant.resize(tenant_bytes);
  r.Raw(h.tenant.data(), tenant_bytes);
  if (!r.ok()) return Status::DataLoss("truncated record header");
  if (h.dtype > kMaxDtype) return Status::DataLoss("record of an unknown dtype");
  if ((h.flags & kFlagEncrypted) == 0 && h.key_version != 0) {
    return Status::DataLoss("unencrypted record names a key version");
  }
  if (h.codec == kCodecNone && h.stored_bytes != h.value_bytes) {
    return Status::DataLoss("record lengths disagree for an uncompressed payload");
  }
  if (h.kind != RecordKind::kBlock &&
      (h.stored_bytes != 0 || h.value_bytes != 0 || h.flags != 0 || h.codec != kCodecNone)) {
    return Status::DataLoss("tombstone with a payload");
  }
  if (h.kind == RecordKind::kEraseSession && h.session == 0) {
    return Status::DataLoss("session tombstone without a session");
  }
  *header_bytes = length;
  return h;
}

void EncodeSegmentHeader(const SegmentHeader& h, std::span<std::byte> out) {
  ByteWriter w(out);
  w.U32(kSegmentMagic);
  w.U16(kFormatVersion);
  w.U16(0);
  w.U64(h.segment_id);
  w.U64(h.created_us);
  w.U64(Hash(out, 24));
  w.PadTo(kSegmentHeaderBytes);
}

Result<SegmentHeader> DecodeSegmentHeader(std::span<const std::byte> in) {
  ByteReader r(in);
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  r.Skip(2);
  SegmentHeader h;
  h.segment_id = r.U64();
  h.created_us = r.U64();
  const uint64_t checksum = r.U64();
  if (!r.ok() || magic != kSegmentMagic) return Status::DataLoss("not a kvtier segment");
  // The magic and version fields are fixed in every format version, so this check is
  // meaningful even when the rest of the header changed.
  if (version > kFormatVersion) {
    return Status::FailedPrecondition(
        "segment written by disk format version " + std::to_string(version) +
        "; this build reads up to version " + std::to_string(kFormatVersion) +
        ": upgrade kvtier or use another directory");
  }
  if (version != 0 && version < kFormatVersion) {
    return Status::FailedPrecondition(
        "segment written by disk format version " + std::to_string(version) +
        "; this build reads only version " + std::to_string(kFormatVersion) +
        " and does not migrate older directories: remove it or use another directory");
  }
  if (version == 0 || Hash(in, 24) != checksum) {
    return Status::DataLoss("segment header is corrupt");
  }
  return h;
}

size_t TenantTableBytes(const std::vector<std::string>& names) {
  size_t n = 0;
  for (const std::string& name : names) n += 1 + name.size();
  return n;
}

size_t FooterBodyBytes(size_t tenant_table_bytes, size_t entries) {
  return Align8(kFooterFixedBytes + tenant_table_bytes) + kFooterEntryBytes * entries;
}

AlignedBuffer EncodeFooter(const Footer& footer, uint64_t segment_id, uint64_t footer_offset) {
  const size_t body_bytes = FooterBodyBytes(TenantTableBytes(footer.tenants),
                                            footer.entries.size());
  const size_t padded = static_cast<size_t>(AlignUp(body_bytes));
  AlignedBuffer buf(padded + kTrailerBytes);
  if (buf.size() == 0) return buf;
  ByteWriter w(buf.span());
  w.U32(kFooterMagic);
  w.U16(kFormatVersion);
  w.U16(0);
  w.U32(static_cast<uint32_t>(footer.tenants.size()));
  w.U32(static_cast<uint32_t>(footer.entries.size()));
  for (const std::string& name : footer.tenants) {
    w.U8(static_cast<uint8_t>(name.size()));
    w.Raw(name.data(), name.size());
  }
  w.PadTo(Align8(w.pos()));
  for (const FooterEntry& e : footer.entries) {
    w.U8(static_cast<uint8_t>(e.kind));
    w.U8(e.dtype);
    w.U16(e.tenant);
    w.U32(e.offset_pages);
    w.U32(e.record_pages);
    w.U32(e.stored_bytes);
    w.U64(e.value_bytes);
    w.U64(e.sequence);
    w.U64(e.timestamp_us);
    w.Raw(e.key.data(), kBlockKeySize);
    w.U64(e.session);
    w.U64(e.created_us);
  }
  const uint64_t body_checksum = Hash(buf.span(), body_bytes);
  std::span<std::byte> trailer = buf.span().subspan(padded);
  ByteWriter t(trailer);
  t.U32(kTrailerMagic);
  t.U16(kFormatVersion);
  t.U16(0);
  t.U64(segment_id);
  t.U64(footer_offset);
  t.U64(body_bytes);
  t.U64(body_checksum);
  t.U64(Hash(trailer, kTrailerUsedBytes - 8));
  return buf;
}

Result<Trailer> DecodeTrailer(std::span<const std::byte> in) {
  ByteReader r(in);
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  r.Skip(2);
  Trailer t;
  t.segment_id = r.U64();
  t.footer_offset = r.U64();
  t.footer_bytes = r.U64();
  t.footer_checksum = r.U64();
  const uint64_t checksum = r.U64();
  if (!r.ok() || magic != kTrailerMagic || version != kFormatVersion ||
      Hash(in, kTrailerUsedBytes - 8) != checksum) {
    return Status::DataLoss("no valid segment trailer");
  }
  if (t.footer_offset % kPageBytes != 0 || t.footer_offset < kSegmentHeaderBytes) {
    return Status::DataLoss("segment trailer points outside the segment");
  }
  return t;
}

Result<Footer> DecodeFooter(std::span<const std::byte> body, const Trailer& trailer) {
  if (body.size() < trailer.footer_bytes || Hash(body, trailer.footer_bytes) != trailer.footer_checksum) {
    return Status::DataLoss("segment footer checksum mismatch");
  }
  ByteReader r(body.first(trailer.footer_bytes));
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  r.Skip(2);
  const uint32_t tenants = r.U32();
  const uint32_t entries = r.U32();
  if (!r.ok() || magic != kFooterMagic || version != kFormatVersion) {
    return Status::DataLoss("segment footer is corrupt");
  }
  Footer f;
  for (uint32_t i = 0; i < tenants && r.ok(); ++i) {
    std::string name(r.U8(), '\0');
    r.Raw(name.data(), name.size());
    if (name.empty()) return Status::DataLoss("segment footer names an empty tenant");
    f.tenants.push_back(std::move(name));
  }
  r.Skip(Align8(r.pos()) - r.pos());
  if (!r.ok() || (trailer.footer_bytes - r.pos()) / kFooterEntryBytes < entries) {
    return Status::DataLoss("segment footer is truncated");
  }
  const uint64_t limit_pages = trailer.footer_offset / kPageBytes;
  f.entries.reserve(entries);
  for (uint32_t i = 0; i < entries; ++i) {
    FooterEntry e;
    const uint8_t kind = r.U8();
    e.dtype = r.U8();
    e.tenant = r.U16();
    e.offset_pages = r.U32();
    e.record_pages = r.U32();
    e.stored_bytes = r.U32();
    e.value_bytes = r.U64();
    e.sequence = r.U64();
    e.timestamp_us = r.U64();
    std::array<uint8_t, kBlockKeySize> key;
    r.Raw(key.data(), key.size());
    e.key = BlockKey(key);
    e.session = r.U64();
    e.created_us = r.U64();
    // value_bytes is not bounded by the record: a compressed payload is smaller than its value.
    // It must fit the index's 32-bit length, like every value the tier accepts.
    if (kind > kMaxRecordKind || e.dtype > kMaxDtype || e.tenant >= f.tenants.size() ||
        e.offset_pages < kSegmentHeaderBytes / kPageBytes || e.record_pages == 0 ||
        uint64_t{e.offset_pages} + e.record_pages > limit_pages ||
        e.stored_bytes > uint64_t{e.record_pages} * kPageBytes || e.value_bytes > UINT32_MAX ||
        (kind == static_cast<uint8_t>(RecordKind::kEraseSession) && e.session == 0)) {
      return Status::DataLoss("segment footer entry out of range");
    }
    e.kind = static_cast<RecordKind>(kind);
    f.entries.push_back(e);
  }
  if (!r.ok()) return Status::DataLoss("segment footer is truncated");
  return f;
}

}  // namespace kvtier::disk
