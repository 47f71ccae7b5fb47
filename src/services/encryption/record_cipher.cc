#include "src/services/encryption/record_cipher.h"

#include <openssl/crypto.h>

#include <algorithm>

#include "src/services/encryption/kdf.h"

namespace kvtier::encryption {

Result<RecordAad> RecordAad::Build(uint16_t format_version, std::string_view tenant,
                                   const BlockKey& key, std::span<const std::byte> context) {
  if (tenant.empty() || tenant.size() > 255) {
    return Status::InvalidArgument("tenant name must be 1 to 255 bytes");
  }
  if (context.size() > kMaxContextBytes) {
    return Status::InvalidArgument("record context over 16 bytes");
  }
  RecordAad aad;
  std::byte* out = aad.bytes_.data();
  for (char c : std::string_view("KVA1")) *out++ = static_cast<std::byte>(c);
  *out++ = static_cast<std::byte>(format_version & 0xFF);
  *out++ = static_cast<std::byte>(format_version >> 8);
  *out++ = static_cast<std::byte>(tenant.size());
  out = std::transform(tenant.begin(), tenant.end(), out,
                       [](char c) { return static_cast<std::byte>(c); });
  out = std::transform(key.bytes().begin(), key.bytes().end(), out,
                       [](uint8_t b) { return static_cast<std::byte>(b); });
  out = std::copy(context.begin(), context.end(), out);
  aad.size_ = static_cast<size_t>(out - aad.bytes_.data());
  return aad;
}

Result<std::unique_ptr<RecordCipher>> RecordCipher::Create(KeyService* keys) {
  Result<std::unique_ptr<AesGcm>> gcm = AesGcm::Create();
  if (!gcm.ok()) return gcm.status();
  return std::unique_ptr<RecordCipher>(new RecordCipher(keys, std::move(*gcm)));
}

Result<SealedRecordInfo> RecordCipher::Seal(uint16_t format_version, std::string_view tenant,
                                            const BlockKey& key,
                                            std::span<const std::byte> plaintext,
                                            std::span<std::byte> ciphertext,
                                            std::span<const std::byte> context) {
  Result<RecordAad> aad = RecordAad::Build(format_version, tenant, key, context);
  if (!aad.ok()) return aad.status();
  if (plaintext.size() != ciphertext.size()) {
    return Status::InvalidArgument("record seal: output size differs from input size");
  }
  SealedRecordInfo info;
  SecretKey data_key;
  Result<uint32_t> version = keys_->AcquireSealingKey(tenant, &data_key);
  if (!version.ok()) return version.status();
  info.key_version = *version;
  KVTIER_RETURN_IF_ERROR(FillRandom(info.nonce));
  KVTIER_RETURN_IF_ERROR(
      gcm_->Seal(data_key, info.nonce, aad->bytes(), plaintext, ciphertext, &info.tag));
  return info;
}

Status RecordCipher::Open(uint16_t format_version, std::string_view tenant, const BlockKey& key,
                          const SealedRecordInfo& info, std::span<const std::byte> ciphertext,
                          std::span<std::byte> plaintext, std::span<const std::byte> context) {
  Result<RecordAad> aad = RecordAad::Build(format_version, tenant, key, context);
  Status status = aad.status();
  SecretKey data_key;
  if (status.ok()) status = keys_->GetKey(tenant, info.key_version, &data_key);
  if (status.ok()) {
    return gcm_->Open(data_key, info.nonce, aad->bytes(), ciphertext, info.tag, plaintext);
  }
  OPENSSL_cleanse(plaintext.data(), plaintext.size());
  return status;
}

}  // namespace kvtier::encryption
