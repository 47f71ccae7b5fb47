#include "src/tier/shared/object_format.h"

#include <unistd.h>

#include <cstring>

#include "src/common/byte_codec.h"
#include "src/common/checksum.h"
#include "src/common/sha256.h"

namespace kvtier::g4 {
namespace {

bool ValidDtype(uint8_t d) {
  return d >= static_cast<uint8_t>(KvDtype::kBf16) && d <= static_cast<uint8_t>(KvDtype::kFp8E5M2);
}

constexpr char kHex[] = "0123456789abcdef";

}  // namespace

size_t ObjectHeaderBytes(size_t tenant_bytes) {
  return Align8(kObjectFixedHeaderBytes + tenant_bytes) + 8;
}

void EncodeObjectHeader(const ObjectHeader& h, std::span<std::byte> out) {
  const size_t header_bytes = ObjectHeaderBytes(h.tenant.size());
  ByteWriter w(out);
  w.U32(kObjectMagic);
  w.U16(kObjectFormatVersion);
  w.U16(static_cast<uint16_t>(header_bytes));
  w.U8(h.payload.encrypted ? kFlagEncrypted : 0);
  w.U8(h.payload.codec);
  w.U8(h.dtype ? static_cast<uint8_t>(*h.dtype) : 0);
  w.U8(static_cast<uint8_t>(h.tenant.size()));
  w.U32(h.payload.key_version);
  w.Raw(h.key.data(), kBlockKeySize);
  w.U64(h.session);
  w.U64(h.created_us);
  w.U64(h.value_bytes);
  w.U64(h.stored_bytes);
  w.Raw(h.payload.nonce.data(), h.payload.nonce.size());
  w.Raw(h.payload.tag.data(), h.payload.tag.size());
  w.U64(h.payload_checksum);
  w.Raw(h.tenant.data(), h.tenant.size());
  w.PadTo(header_bytes - 8);
  w.U64(Checksum64(out.first(header_bytes - 8)));
}

Result<ObjectHeader> DecodeObjectHeader(std::span<const std::byte> in, size_t* header_bytes) {
  ByteReader r(in);
  const uint32_t magic = r.U32();
  const uint16_t version = r.U16();
  const uint16_t length = r.U16();
  if (!r.ok() || magic != kObjectMagic) return Status::DataLoss("not a kvtier G4 object");
  if (version > kObjectFormatVersion) {
    return Status::FailedPrecondition("G4 object written by newer format version " +
                                      std::to_string(version) + " (this build reads " +
                                      std::to_string(kObjectFormatVersion) + ")");
  }
  if (version == 0) return Status::DataLoss("G4 object with format version 0");
  if (length < ObjectHeaderBytes(1) || length > ObjectHeaderBytes(kMaxTenantNameBytes) ||
      length > in.size()) {
    return Status::DataLoss("G4 object header has a bad length or is truncated");
  }
  uint64_t stored_checksum = 0;
  {
    ByteReader c(in.subspan(length - 8, 8));
    stored_checksum = c.U64();
  }
  if (Checksum64(in.first(length - 8)) != stored_checksum) {
    return Status::DataLoss("G4 object header checksum mismatch");
  }
  ObjectHeader h;
  const uint8_t flags = r.U8();
  h.payload.codec = r.U8();
  const uint8_t dtype = r.U8();
  const uint8_t tenant_bytes = r.U8();
  h.payload.key_version = r.U32();
  std::array<uint8_t, kBlockKeySize> key;
  r.Raw(key.data(), key.size());
  h.key = BlockKey(key);
  h.session = r.U64();
  h.created_us = r.U64();
  h.value_bytes = r.U64();
  h.stored_bytes = r.U64();
  r.Raw(h.payload.nonce.data(), h.payload.nonce.size());
  r.Raw(h.payload.tag.data(), h.payload.tag.size());
  h.payload_checksum = r.U64();
  if (!r.ok() || tenant_bytes == 0 || length != ObjectHeaderBytes(tenant_bytes)) {
    return Status::DataLoss("G4 object header length disagrees with its tenant name");
  }
  h.tenant.resize(tenant_bytes);
  r.Raw(h.tenant.data(), tenant_bytes);
  if (!r.ok()) return Status::DataLoss("truncated G4 object header");
  if ((flags & ~kFlagEncrypted) != 0) return Status::DataLoss("G4 object has unknown flags");
  h.payload.encrypted = (flags & kFlagEncrypted) != 0;
  if (h.payload.codec > kPayloadCodecKv) return Status::DataLoss("G4 object has an unknown codec");
  if (dtype != 0) {
    if (!ValidDtype(dtype)) return Status::DataLoss("G4 object has an unknown dtype");
    h.dtype = static_cast<KvDtype>(dtype);
  }
  if (h.value_bytes > kMaxValueBytes || h.stored_bytes > 2 * kMaxValueBytes) {
    return Status::DataLoss("G4 object header has an implausible size");
  }
  if (!h.payload.encrypted && h.payload.codec == kPayloadCodecNone &&
      h.stored_bytes != h.value_bytes) {
    return Status::DataLoss("G4 object lengths disagree for a plain payload");
  }
  *header_bytes = length;
  return h;
}

Result<SealedObject> SealObjectParts(BlockCodec* codec, std::string_view tenant,
                                     const BlockKey& key, SessionId session, uint64_t created_us,
                                     std::optional<KvDtype> dtype,
                                     std::span<const std::byte> value) {
  if (tenant.empty() || tenant.size() > kMaxTenantNameBytes) {
    return Status::InvalidArgument("tenant name must be 1 to 255 bytes");
  }
  if (value.size() > kMaxValueBytes) return Status::InvalidArgument("block larger than 1 GiB");
  ObjectHeader h;
  h.tenant = std::string(tenant);
  h.key = key;
  h.session = session;
  h.created_us = created_us;
  h.dtype = dtype;
  h.value_bytes = value.size();
  SealedObject object;
  if (codec == nullptr) {
    object.payload = value;
  } else {
    object.encoded.resize(codec->MaxEncodedBytes(value.size()));
    Result<size_t> n = codec->Encode(kObjectFormatVersion, tenant, key, dtype, value,
                                     std::span(object.encoded), &h.payload);
    if (!n.ok()) return n.status();
    object.encoded.resize(*n);
    object.payload = object.encoded;
  }
  h.stored_bytes = object.payload.size();
  h.payload_checksum = Checksum64(object.payload);
  object.header.resize(ObjectHeaderBytes(tenant.size()));
  EncodeObjectHeader(h, object.header);
  return object;
}

Result<std::vector<std::byte>> SealObject(BlockCodec* codec, std::string_view tenant,
                                          const BlockKey& key, SessionId session,
                                          uint64_t created_us, std::optional<KvDtype> dtype,
                                          std::span<const std::byte> value) {
  Result<SealedObject> parts = SealObjectParts(codec, tenant, key, session, created_us, dtype,
                                               value);
  if (!parts.ok()) return parts.status();
  std::vector<std::byte> object(parts->header);
  object.insert(object.end(), parts->payload.begin(), parts->payload.end());
  return object;
}

Result<ObjectHeader> VerifyHeader(std::string_view tenant, const BlockKey& key,
                                  std::span<const std::byte> head, uint64_t object_bytes,
                                  size_t* header_bytes, bool* stored_bad) {
  *stored_bad = false;
  Result<ObjectHeader> h = DecodeObjectHeader(head, header_bytes);
  if (!h.ok()) {
    *stored_bad = h.status().code() == StatusCode::kDataLoss;
    return h.status();
  }
  if (object_bytes < *header_bytes || object_bytes - *header_bytes != h->stored_bytes) {
    *stored_bad = true;
    return Status::DataLoss("G4 object is truncated or has trailing bytes");
  }
  if (h->tenant != tenant || h->key != key) {
    *stored_bad = true;
    return Status::DataLoss("G4 object names another tenant or key");
  }
  return h;
}

Result<std::vector<std::byte>> OpenPayload(BlockCodec* codec, std::string_view tenant,
                                           const BlockKey& key, const ObjectHeader& header,
                                           std::vector<std::byte> payload,
                                           std::optional<uint64_t> payload_checksum,
                                           bool* stored_bad) {
  *stored_bad = false;
  const uint64_t checksum =
      payload_checksum.has_value() ? *payload_checksum : Checksum64(payload);
  if (payload.size() != header.stored_bytes || checksum != header.payload_checksum) {
    *stored_bad = true;
    return Status::DataLoss("G4 object payload checksum mismatch");
  }
  if (!header.payload.encrypted && header.payload.codec == kPayloadCodecNone) return payload;
  if (codec == nullptr) {
    return Status::FailedPrecondition(
        "G4 object is encoded (compressed or encrypted) and this tier has no data services");
  }
  std::vector<std::byte> value(header.value_bytes);
  KVTIER_RETURN_IF_ERROR(codec->Decode(kObjectFormatVersion, tenant, key, header.payload,
                                       payload, std::span(value)));
  return value;
}

Result<std::vector<std::byte>> OpenObject(BlockCodec* codec, std::string_view tenant,
                                          const BlockKey& key, std::span<std::byte> object,
                                          bool* stored_bad) {
  bool bad_ignored = false;
  bool* bad = stored_bad != nullptr ? stored_bad : &bad_ignored;
  size_t header_bytes = 0;
  Result<ObjectHeader> h = VerifyHeader(tenant, key, object, object.size(), &header_bytes, bad);
  if (!h.ok()) return h.status();
  std::vector<std::byte> payload(object.begin() + static_cast<ptrdiff_t>(header_bytes),
                                 object.end());
  return OpenPayload(codec, tenant, key, *h, std::move(payload), std::nullopt, bad);
}

Result<std::string> TenantComponent(std::string_view tenant) {
  if (tenant.empty() || tenant.size() > kMaxTenantNameBytes) {
    return Status::InvalidArgument("tenant name must be 1 to 255 bytes");
  }
  bool plain = tenant.size() <= 64;
  for (char c : tenant) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) plain = false;
  }
  if (plain) return std::string(tenant);
  Sha256 sha;
  sha.Update(tenant.data(), tenant.size());
  const Sha256::Digest d = sha.Final();
  std::string out = "~";
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string NoticesPrefix() { return std::string(kPrefix) + "/notices/"; }

namespace {
bool ValidName(std::string_view name, std::string_view extra) {
  if (name.empty() || name.size() > 200) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    extra.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}
}  // namespace

bool ValidNoticeName(std::string_view name) { return ValidName(name, "._-"); }

std::string RecordsPrefix() { return std::string(kPrefix) + "/records/"; }

bool ValidRecordName(std::string_view name) { return ValidName(name, "._~-"); }

Status CheckRecordName(std::string_view name) {
  if (ValidRecordName(name)) return Status::OK();
  return Status::InvalidArgument("bad record name \"" + std::string(name) + "\"");
}

std::string ObjectName(std::string_view tenant_component, const BlockKey& key) {
  const std::string hex = key.ToHex();
  return TenantObjectsPrefix(tenant_component) + hex.substr(0, 2) + "/" + hex;
}

Result<BlockKey> ObjectKey(std::string_view object_name) {
  const size_t slash = object_name.rfind('/');
  return BlockKey::FromHex(slash == std::string_view::npos ? object_name
                                                           : object_name.substr(slash + 1));
}

std::string TenantObjectsPrefix(std::string_view tenant_component) {
  return std::string(kPrefix) + "/objects/" + std::string(tenant_component) + "/";
}

std::string TenantSessionsPrefix(std::string_view tenant_component) {
  return std::string(kPrefix) + "/sessions/" + std::string(tenant_component) + "/";
}

std::string SessionPrefix(std::string_view tenant_component, SessionId session) {
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i) {
    s[static_cast<size_t>(i)] = kHex[session & 15];
    session >>= 4;
  }
  return TenantSessionsPrefix(tenant_component) + s + "/";
}

std::string SessionMarkerName(std::string_view tenant_component, SessionId session,
                              const BlockKey& key) {
  return SessionPrefix(tenant_component, session) + key.ToHex();
}

std::string AccessMarkerName(std::string_view tenant_component, const BlockKey& key) {
  const std::string hex = key.ToHex();
  return TenantAccessPrefix(tenant_component) + hex.substr(0, 2) + "/" + hex;
}

std::string TenantAccessPrefix(std::string_view tenant_component) {
  return std::string(kPrefix) + "/access/" + std::string(tenant_component) + "/";
}

namespace {
bool NodeIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-';
}
}  // namespace

bool ValidNodeId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!NodeIdChar(c)) return false;
  }
  return true;
}

std::string DefaultNodeId() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string id;
  for (const char* p = host; *p != '\0' && id.size() < 40; ++p) {
    id.push_back(NodeIdChar(*p) ? *p : '_');
  }
  if (id.empty()) id = "node";
  return id + "-" + std::to_string(::getpid());
}

}  // namespace kvtier::g4
