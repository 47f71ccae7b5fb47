#include "src/services/block_codec.h"

#include <cstring>
#include <string>
#include <utility>

#include "src/services/compression/kv_codec.h"
#include "src/services/encryption/record_cipher.h"

namespace kvtier {
namespace {

// What a record's ciphertext is bound to besides its block: the codec that produced the
// plaintext and the length of the block, so that a header altered to "not compressed" or to
// another length fails authentication instead of serving the wrong bytes.
std::array<std::byte, 9> SealContext(uint8_t codec, uint64_t value_bytes) {
  std::array<std::byte, 9> c;
  c[0] = static_cast<std::byte>(codec);
  for (int i = 0; i < 8; ++i) c[1 + i] = static_cast<std::byte>(value_bytes >> (8 * i));
  return c;
}

}  // namespace

struct BlockCodec::Worker {
  compression::KvCodec kv;
  std::unique_ptr<encryption::RecordCipher> cipher;  // Null when the tier does not encrypt.
};

Result<std::unique_ptr<BlockCodec>> BlockCodec::Create(const TierDataOptions& options,
                                                       encryption::KeyService* keys) {
  if (options.encrypt && keys == nullptr) {
    return Status::InvalidArgument("encryption needs a master key (security.master_key)");
  }
  return std::unique_ptr<BlockCodec>(new BlockCodec(options, keys));
}

BlockCodec::BlockCodec(const TierDataOptions& options, encryption::KeyService* keys)
    : options_(options), keys_(keys) {}

BlockCodec::~BlockCodec() = default;

size_t BlockCodec::MaxEncodedBytes(size_t value_bytes) const {
  return options_.compress ? compression::KvCodec::MaxCompressedSize(value_bytes) : value_bytes;
}

Result<std::unique_ptr<BlockCodec::Worker>> BlockCodec::TakeWorker() {
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Worker> worker = std::move(idle_.back());
      idle_.pop_back();
      return worker;
    }
  }
  auto worker = std::make_unique<Worker>();
  if (options_.encrypt) {
    Result<std::unique_ptr<encryption::RecordCipher>> cipher =
        encryption::RecordCipher::Create(keys_);
    if (!cipher.ok()) return cipher.status();
    worker->cipher = std::move(cipher).value();
  }
  return worker;
}

void BlockCodec::ReturnWorker(std::unique_ptr<Worker> worker) {
  MutexLock lock(&mu_);
  idle_.push_back(std::move(worker));
}

Result<size_t> BlockCodec::Encode(uint16_t format_version, std::string_view tenant,
                                  const BlockKey& key, std::optional<KvDtype> dtype,
                                  std::span<const std::byte> value, std::span<std::byte> out,
                                  PayloadInfo* info) {
  if (out.size() < MaxEncodedBytes(value.size())) {
    return Status::InvalidArgument("encode buffer smaller than MaxEncodedBytes()");
  }
  *info = PayloadInfo();
  if (!options_.compress && !options_.encrypt) {
    if (!value.empty()) std::memcpy(out.data(), value.data(), value.size());
    return value.size();
  }
  Result<std::unique_ptr<Worker>> worker = TakeWorker();
  if (!worker.ok()) return worker.status();
  // The bytes to seal: the compressed payload in `out`, or the value itself when compression
  // is off or does not pay (a stored KV payload would only add its header).
  std::span<const std::byte> plain = value;
  if (options_.compress) {
    Result<size_t> size =
        (*worker)->kv.Compress(dtype.value_or(compression::kOpaqueBytes), value, out);
    if (!size.ok()) {
      ReturnWorker(std::move(worker).value());
      return size.status();
    }
    Result<compression::KvPayloadInfo> kv = compression::KvCodec::Inspect(out.first(*size));
    if (kv.ok() && kv->codec != compression::KvCodecId::kStored) {
      info->codec = kPayloadCodecKv;
      plain = out.first(*size);
    }
  }
  Status status;
  if (options_.encrypt) {
    Result<encryption::SealedRecordInfo> sealed =
        (*worker)->cipher->Seal(format_version, tenant, key, plain, out.first(plain.size()),
                                SealContext(info->codec, value.size()));
    if (sealed.ok()) {
      info->encrypted = true;
      info->key_version = sealed->key_version;
      info->nonce = sealed->nonce;
      info->tag = sealed->tag;
    } else {
      status = sealed.status();
    }
  } else if (plain.data() != out.data() && !plain.empty()) {
    std::memcpy(out.data(), plain.data(), plain.size());
  }
  ReturnWorker(std::move(worker).value());
  if (!status.ok()) return status;
  return plain.size();
}

Status BlockCodec::Decode(uint16_t format_version, std::string_view tenant, const BlockKey& key,
                          const PayloadInfo& info, std::span<std::byte> stored,
                          std::span<std::byte> out) {
  Status status = DecodeUnchecked(format_version, tenant, key, info, stored, out);
  if (!status.ok() && !out.empty()) std::memset(out.data(), 0, out.size());
  return status;
}

Status BlockCodec::DecodeUnchecked(uint16_t format_version, std::string_view tenant,
                                   const BlockKey& key, const PayloadInfo& info,
                                   std::span<std::byte> stored, std::span<std::byte> out) {
  if (info.codec > kPayloadCodecKv) {
    return Status::InvalidArgument("payload codec " + std::to_string(info.codec) +
                                   " is not known to this build");
  }
  if (info.codec == kPayloadCodecNone && stored.size() != out.size()) {
    return Status::DataLoss("payload is " + std::to_string(stored.size()) +
                            " bytes, the block " + std::to_string(out.size()));
  }
  if (!info.encrypted && info.codec == kPayloadCodecNone) {
    if (!out.empty()) std::memcpy(out.data(), stored.data(), out.size());
    return Status::OK();
  }
  if (info.encrypted && keys_ == nullptr) {
    return Status::FailedPrecondition("record is encrypted and this store has no master key");
  }
  Result<std::unique_ptr<Worker>> worker = TakeWorker();
  if (!worker.ok()) return worker.status();
  Status status;
  if (info.encrypted) {
    std::unique_ptr<encryption::RecordCipher>& cipher = (*worker)->cipher;
    if (cipher == nullptr) {
      // A tier that no longer encrypts still reads the records it sealed before.
      Result<std::unique_ptr<encryption::RecordCipher>> created =
          encryption::RecordCipher::Create(keys_);
      if (created.ok()) cipher = std::move(created).value();
      status = created.status();
    }
    if (status.ok()) {
      encryption::SealedRecordInfo sealed{info.key_version, info.nonce, info.tag};
      // Uncompressed: straight into `out`; compressed: in place, then decompressed.
      std::span<std::byte> target = info.codec == kPayloadCodecNone ? out : stored;
      status = cipher->Open(format_version, tenant, key, sealed, stored, target,
                            SealContext(info.codec, out.size()));
    }
  }
  if (status.ok() && info.codec == kPayloadCodecKv) {
    status = (*worker)->kv.Decompress(stored, out);
    if (status.code() == StatusCode::kInvalidArgument) {
      // Decompress reports a size mismatch as InvalidArgument; for a stored record that is
      // corruption, not a caller error.
      Result<compression::KvPayloadInfo> kv = compression::KvCodec::Inspect(stored);
      if (kv.ok()) status = Status::DataLoss(status.message());
    }
  }
  ReturnWorker(std::move(worker).value());
  return status;
}

}  // namespace kvtier
