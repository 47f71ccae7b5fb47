#include "src/services/encryption/keystore_format.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "src/common/checksum.h"
#include "src/services/encryption/kdf.h"

namespace kvtier::encryption {
namespace {

constexpr size_t kHeaderBytes = 4 + 2 + 2 + kMasterKeyIdBytes + 8 + 4;
constexpr size_t kTrailerBytes = kSha256Bytes + 8;
constexpr size_t kDekBytes = 4 + 8 + 8 + kGcmNonceBytes + kSecretKeyBytes + kGcmTagBytes;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<uint8_t>& out() { return out_; }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// Bounds-checked reader; every failed read latches ok() to false.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  uint8_t U8() { return static_cast<uint8_t>(Le(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Le(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Le(4)); }
  uint64_t U64() { return Le(8); }
  void Bytes(std::span<uint8_t> out) {
    if (!Have(out.size())) return;
    std::copy_n(in_.begin() + static_cast<ptrdiff_t>(pos_), out.size(), out.begin());
    pos_ += out.size();
  }
  std::string String(size_t n) {
    if (!Have(n)) return {};
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  size_t remaining() const { return in_.size() - pos_; }
  bool ok() const { return ok_; }

 private:
  bool Have(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  uint64_t Le(int n) {
    if (!Have(static_cast<size_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{in_[pos_ + static_cast<size_t>(i)]} << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

uint64_t Checksum(std::span<const uint8_t> bytes) {
  return Checksum64(std::as_bytes(bytes));
}

Status CheckOrder(const KeystoreContents& contents) {
  for (size_t t = 0; t < contents.tenants.size(); ++t) {
    const KeystoreTenant& tenant = contents.tenants[t];
    if (tenant.name.empty() || tenant.name.size() > 255) return Status::DataLoss("tenant name size");
    if (t > 0 && !(contents.tenants[t - 1].name < tenant.name)) {
      return Status::DataLoss("tenants not sorted and unique");
    }
    uint32_t previous = tenant.shredded_through;
    for (const WrappedDataKey& dek : tenant.versions) {
      if (dek.version <= previous) return Status::DataLoss("key versions out of order");
      previous = dek.version;
    }
  }
  return Status::OK();
}

}  // namespace

std::vector<uint8_t> WrappedKeyAad(const std::string& tenant, uint32_t version) {
  Writer w;
  w.Bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("KVDK"), 4));
  w.U8(static_cast<uint8_t>(tenant.size()));
  w.Bytes({reinterpret_cast<const uint8_t*>(tenant.data()), tenant.size()});
  w.U32(version);
  return std::move(w.out());
}

Result<std::vector<uint8_t>> EncodeKeystore(const KeystoreContents& contents,
                                            const SecretKey& mac_key) {
  if (Status s = CheckOrder(contents); !s.ok()) {
    return Status::InvalidArgument("keystore contents: " + std::string(s.message()));
  }
  Writer w;
  w.U32(kKeystoreMagic);
  w.U16(kKeystoreFormatVersion);
  w.U16(0);
  w.Bytes(contents.master_key_id);
  w.U64(contents.generation);
  w.U32(static_cast<uint32_t>(contents.tenants.size()));
  for (const KeystoreTenant& tenant : contents.tenants) {
    w.U8(static_cast<uint8_t>(tenant.name.size()));
    w.Bytes({reinterpret_cast<const uint8_t*>(tenant.name.data()), tenant.name.size()});
    w.U32(tenant.shredded_through);
    w.U32(static_cast<uint32_t>(tenant.versions.size()));
    for (const WrappedDataKey& dek : tenant.versions) {
      w.U32(dek.version);
      w.U64(dek.created_micros);
      w.U64(dek.seals_reserved);
      w.Bytes(dek.nonce);
      w.Bytes(dek.wrapped_key);
      w.Bytes(dek.tag);
    }
  }
  std::array<uint8_t, kSha256Bytes> mac{};
  KVTIER_RETURN_IF_ERROR(HmacSha256(mac_key.bytes(), w.out(), &mac));
  w.Bytes(mac);
  w.U64(Checksum(w.out()));
  return std::move(w.out());
}

Result<KeystoreContents> DecodeKeystore(std::span<const uint8_t> bytes,
                                        const MasterKeyId& master_key_id,
                                        const SecretKey& mac_key) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return Status::DataLoss("keystore corrupt: file too short");
  }
  const std::span<const uint8_t> checked = bytes.first(bytes.size() - 8);
  Reader checksum_reader(bytes.last(8));
  if (checksum_reader.U64() != Checksum(checked)) {
    return Status::DataLoss("keystore corrupt: checksum mismatch");
  }
  Reader r(checked);
  if (r.U32() != kKeystoreMagic) return Status::DataLoss("keystore corrupt: bad magic");
  const uint16_t format_version = r.U16();
  if (format_version > kKeystoreFormatVersion) {
    return Status::FailedPrecondition("keystore written by a newer kvtier (format version " +
                                      std::to_string(format_version) + ")");
  }
  r.U16();
  KeystoreContents contents;
  r.Bytes(contents.master_key_id);
  if (CRYPTO_memcmp(contents.master_key_id.data(), master_key_id.data(), kMasterKeyIdBytes) !=
      0) {
    return Status::FailedPrecondition(
        "wrong master key: the keystore was written under a different master key");
  }
  const std::span<const uint8_t> authenticated = checked.first(checked.size() - kSha256Bytes);
  std::array<uint8_t, kSha256Bytes> mac{};
  KVTIER_RETURN_IF_ERROR(HmacSha256(mac_key.bytes(), authenticated, &mac));
  if (CRYPTO_memcmp(mac.data(), checked.data() + authenticated.size(), kSha256Bytes) != 0) {
    return Status::DataLoss("keystore authentication failed: the file was altered");
  }
  // Authenticated: parse the body. The header fields before the generation are known.
  Reader body(authenticated.subspan(kHeaderBytes - 8 - 4));
  contents.generation = body.U64();
  const uint32_t tenant_count = body.U32();
  for (uint32_t t = 0; t < tenant_count && body.ok(); ++t) {
    KeystoreTenant tenant;
    tenant.name = body.String(body.U8());
    tenant.shredded_through = body.U32();
    const uint32_t version_count = body.U32();
    if (!body.ok() || body.remaining() / kDekBytes < version_count) break;
    tenant.versions.resize(version_count);
    for (WrappedDataKey& dek : tenant.versions) {
      dek.version = body.U32();
      dek.created_micros = body.U64();
      dek.seals_reserved = body.U64();
      body.Bytes(dek.nonce);
      body.Bytes(dek.wrapped_key);
      body.Bytes(dek.tag);
    }
    contents.tenants.push_back(std::move(tenant));
  }
  if (!body.ok() || body.remaining() != 0 || contents.tenants.size() != tenant_count) {
    return Status::DataLoss("keystore corrupt: malformed body");
  }
  if (Status s = CheckOrder(contents); !s.ok()) {
    return Status::DataLoss("keystore corrupt: " + std::string(s.message()));
  }
  return contents;
}

}  // namespace kvtier::encryption
