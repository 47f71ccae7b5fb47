#include "kvtier/block_key.h"

#include <bit>
#include <cstring>
#include <string>

#include "kvtier/state.h"
#include "src/common/sha256.h"

namespace kvtier {
namespace {

constexpr std::string_view kNamespaceTag = "kvtier/ns/v1";
constexpr std::string_view kOpaqueTag = "kvtier/opaque/v1";
constexpr std::string_view kStateTag = "kvtier/state/v1";

void PutU32(Sha256& h, uint32_t v) {
  const uint8_t b[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                        static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
  h.Update(b, sizeof(b));
}

void PutString(Sha256& h, std::string_view s) {
  PutU32(h, static_cast<uint32_t>(s.size()));
  h.Update(s.data(), s.size());
}

// Feeds u32 tokens in little-endian order.
void PutTokens(Sha256& h, std::span<const uint32_t> tokens) {
  if constexpr (std::endian::native == std::endian::little) {
    h.Update(tokens.data(), tokens.size_bytes());
  } else {
    for (uint32_t t : tokens) PutU32(h, t);
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<BlockKey> BlockKey::FromBytes(std::span<const uint8_t> bytes) {
  if (bytes.size() != kBlockKeySize) {
    return Status::InvalidArgument("block key must be 32 bytes, got " +
                                   std::to_string(bytes.size()));
  }
  std::array<uint8_t, kBlockKeySize> a;
  std::memcpy(a.data(), bytes.data(), kBlockKeySize);
  return BlockKey(a);
}

Result<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 2 * kBlockKeySize) {
    return Status::InvalidArgument("hex block key must be 64 digits, got " +
                                   std::to_string(hex.size()));
  }
  std::array<uint8_t, kBlockKeySize> a;
  for (size_t i = 0; i < kBlockKeySize; ++i) {
    int hi = HexValue(hex[2 * i]);
    int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument("hex block key has a non-hex digit");
    a[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return BlockKey(a);
}

std::string BlockKey::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * kBlockKeySize, '0');
  for (size_t i = 0; i < kBlockKeySize; ++i) {
    out[2 * i] = kDigits[bytes_[i] >> 4];
    out[2 * i + 1] = kDigits[bytes_[i] & 0xf];
  }
  return out;
}

uint64_t BlockKey::Hash64() const {
  // Engine-provided keys may be anything, so all 32 bytes are mixed, not just a prefix.
  uint64_t w[4];
  std::memcpy(w, bytes_.data(), sizeof(w));
  uint64_t h = w[0] ^ (w[1] * 0x9e3779b97f4a7c15ULL) ^ std::rotl(w[2], 21) ^ std::rotl(w[3], 43);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

uint32_t KvDtypeBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBf16:
    case KvDtype::kFp16:
      return 2;
    case KvDtype::kFp32:
      return 4;
    case KvDtype::kFp8E4M3:
    case KvDtype::kFp8E5M2:
      return 1;
  }
  return 0;
}

uint64_t KvLayout::BlockBytes() const {
  return 2ULL * num_layers * num_kv_heads * head_dim * KvDtypeBytes(dtype) * tokens_per_block;
}

Status Namespace::Validate() const {
  if (tenant.empty()) return Status::InvalidArgument("namespace: tenant is empty");
  if (model.empty()) return Status::InvalidArgument("namespace: model fingerprint is empty");
  if (layout.num_layers == 0) return Status::InvalidArgument("namespace: num_layers is 0");
  if (layout.num_kv_heads == 0) return Status::InvalidArgument("namespace: num_kv_heads is 0");
  if (layout.head_dim == 0) return Status::InvalidArgument("namespace: head_dim is 0");
  if (KvDtypeBytes(layout.dtype) == 0) return Status::InvalidArgument("namespace: unknown dtype");
  if (layout.tokens_per_block == 0) {
    return Status::InvalidArgument("namespace: tokens_per_block is 0");
  }
  if (tp_size == 0 || tp_rank >= tp_size) {
    return Status::InvalidArgument("namespace: tp_rank must be below tp_size");
  }
  return Status::OK();
}

Result<BlockKey> NamespaceSeed(const Namespace& ns) {
  KVTIER_RETURN_IF_ERROR(ns.Validate());
  Sha256 h;
  h.Update(kNamespaceTag.data(), kNamespaceTag.size());
  PutString(h, ns.tenant);
  PutString(h, ns.model);
  PutU32(h, ns.layout.num_layers);
  PutU32(h, ns.layout.num_kv_heads);
  PutU32(h, ns.layout.head_dim);
  PutU32(h, static_cast<uint32_t>(ns.layout.dtype));
  PutU32(h, ns.layout.tokens_per_block);
  PutU32(h, ns.tp_rank);
  PutU32(h, ns.tp_size);
  return BlockKey(h.Final());
}

BlockKey ChainBlockKey(const BlockKey& previous, std::span<const uint32_t> tokens) {
  Sha256 h;
  h.Update(previous.data(), kBlockKeySize);
  PutTokens(h, tokens);
  return BlockKey(h.Final());
}

std::vector<BlockKey> ComputeBlockKeysFromSeed(const BlockKey& seed, uint32_t tokens_per_block,
                                               std::span<const uint32_t> tokens) {
  std::vector<BlockKey> keys;
  if (tokens_per_block == 0) return keys;
  const size_t n = tokens.size() / tokens_per_block;
  keys.reserve(n);
  Sha256 h;
  const BlockKey* previous = &seed;
  for (size_t i = 0; i < n; ++i) {
    h.Update(previous->data(), kBlockKeySize);
    PutTokens(h, tokens.subspan(i * tokens_per_block, tokens_per_block));
    keys.emplace_back(h.Final());
    previous = &keys.back();
  }
  return keys;
}

Result<std::vector<BlockKey>> ComputeBlockKeys(const Namespace& ns,
                                               std::span<const uint32_t> tokens) {
  Result<BlockKey> seed = NamespaceSeed(ns);
  if (!seed.ok()) return seed.status();
  return ComputeBlockKeysFromSeed(*seed, ns.layout.tokens_per_block, tokens);
}

Result<BlockKey> OpaqueBlockKey(const Namespace& ns, std::span<const uint8_t> engine_hash) {
  if (engine_hash.empty() || engine_hash.size() > kMaxOpaqueKeyBytes) {
    return Status::InvalidArgument("engine block hash must be 1 to 1024 bytes, got " +
                                   std::to_string(engine_hash.size()));
  }
  Result<BlockKey> seed = NamespaceSeed(ns);
  if (!seed.ok()) return seed.status();
  Sha256 h;
  h.Update(kOpaqueTag.data(), kOpaqueTag.size());
  h.Update(seed->data(), kBlockKeySize);
  PutU32(h, static_cast<uint32_t>(engine_hash.size()));
  h.Update(engine_hash.data(), engine_hash.size());
  return BlockKey(h.Final());
}

BlockKey NamedBlockKey(std::string_view name) {
  static constexpr std::string_view kNamedTag = "kvtier/resp/v1";
  Sha256 h;
  h.Update(kNamedTag.data(), kNamedTag.size());
  h.Update(name.data(), name.size());
  return BlockKey(h.Final());
}

Status ValidateStateGroupName(std::string_view name) {
  if (name.empty() || name.size() > kMaxStateGroupBytes) {
    return Status::InvalidArgument("state group name must be 1 to " +
                                   std::to_string(kMaxStateGroupBytes) + " bytes, got " +
                                   std::to_string(name.size()));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("._-:/@").find(c) != std::string_view::npos;
    if (!ok) {
      return Status::InvalidArgument("state group name '" + std::string(name) +
                                     "' has a byte other than letters, digits and ._-:/@");
    }
  }
  return Status::OK();
}

Result<BlockKey> StateKey(const BlockKey& block, std::string_view group) {
  KVTIER_RETURN_IF_ERROR(ValidateStateGroupName(group));
  Sha256 h;
  h.Update(kStateTag.data(), kStateTag.size());
  h.Update(block.data(), kBlockKeySize);
  PutString(h, group);
  return BlockKey(h.Final());
}

}  // namespace kvtier
