// Block identity: namespaces, 32-byte block keys and the SHA-256 key chain.
//
// The exact byte layout is specified in docs/block_keys.md, with test vectors, so that any
// language reproduces the same keys. All functions here are pure and thread-safe.

#ifndef KVTIER_BLOCK_KEY_H_
#define KVTIER_BLOCK_KEY_H_

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

inline constexpr size_t kBlockKeySize = 32;

// A 32-byte block identifier. Keys are opaque to the store: it never interprets their bytes.
class BlockKey {
 public:
  BlockKey() = default;  // All zero.
  explicit BlockKey(const std::array<uint8_t, kBlockKeySize>& bytes) : bytes_(bytes) {}

  // Fails with InvalidArgument unless `bytes` is exactly 32 bytes long.
  static Result<BlockKey> FromBytes(std::span<const uint8_t> bytes);
  // Parses 64 hexadecimal digits; InvalidArgument otherwise.
  static Result<BlockKey> FromHex(std::string_view hex);

  const std::array<uint8_t, kBlockKeySize>& bytes() const { return bytes_; }
  const uint8_t* data() const { return bytes_.data(); }
  std::string ToHex() const;

  // A well-mixed 64-bit digest of the key, for hash tables and sketches.
  uint64_t Hash64() const;

  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;

 private:
  std::array<uint8_t, kBlockKeySize> bytes_{};
};

// An engine's own name for a block, carried with a put so that KV events (kvtier/events.h)
// name the block as the engine does: vLLM's block hashes are unsigned integers of at most 64
// bits (`integer`, `bytes` big-endian) or byte strings. 1 to 32 bytes.
struct EngineHash {
  std::array<uint8_t, kBlockKeySize> bytes{};
  uint8_t size = 0;
  bool integer = false;
  std::span<const uint8_t> view() const { return {bytes.data(), size}; }
  friend bool operator==(const EngineHash&, const EngineHash&) = default;
};

struct BlockKeyHasher {
  size_t operator()(const BlockKey& key) const { return static_cast<size_t>(key.Hash64()); }
};

// Element type of the KV cache as the engine stores it.
enum class KvDtype : uint8_t {
  kBf16 = 1,
  kFp16 = 2,
  kFp32 = 3,
  kFp8E4M3 = 4,
  kFp8E5M2 = 5,
};

// Bytes per element of `dtype`; 0 for a value outside the enum.
uint32_t KvDtypeBytes(KvDtype dtype);

// The shape of one engine's KV cache.
struct KvLayout {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  KvDtype dtype = KvDtype::kBf16;
  uint32_t tokens_per_block = 256;

  // Bytes of K and V for one block: 2 x layers x kv_heads x head_dim x dtype x tokens.
  uint64_t BlockBytes() const;
};

// Everything that must match for two blocks to be interchangeable. Blocks of different
// namespaces never share keys.
struct Namespace {
  std::string tenant;  // Non-empty.
  std::string model;   // Model fingerprint: name plus weights revision; non-empty.
  KvLayout layout;
  uint32_t tp_rank = 0;  // REQUIRES: tp_rank < tp_size.
  uint32_t tp_size = 1;

  // InvalidArgument naming the first field that is out of range.
  Status Validate() const;
};

// The 32-byte seed of a namespace's key chain (docs/block_keys.md, "Namespace seed").
Result<BlockKey> NamespaceSeed(const Namespace& ns);

// One step of the chain: SHA256(previous || tokens as u32 little-endian). `previous` is the
// namespace seed for the first block. REQUIRES: tokens is one full block.
BlockKey ChainBlockKey(const BlockKey& previous, std::span<const uint32_t> tokens);

// Keys of every full block of `tokens`; trailing tokens that do not fill a block get no key.
Result<std::vector<BlockKey>> ComputeBlockKeys(const Namespace& ns,
                                               std::span<const uint32_t> tokens);

// Keys of every full block, chained from an already computed seed. Faster when the same
// namespace is used repeatedly. `tokens_per_block` > 0.
std::vector<BlockKey> ComputeBlockKeysFromSeed(const BlockKey& seed, uint32_t tokens_per_block,
                                               std::span<const uint32_t> tokens);

// Maps an engine's own block hash (1 to 1024 bytes) into the namespace's key space, so an
// engine that already hashes its blocks can use kvtier without re-hashing tokens.
inline constexpr size_t kMaxOpaqueKeyBytes = 1024;
Result<BlockKey> OpaqueBlockKey(const Namespace& ns, std::span<const uint8_t> engine_hash);

// The key of a value stored under a name rather than by content: RESP keys, and the string keys
// of LMCache's L2 adapters (docs/block_keys.md, "Named values"):
// SHA256("kvtier/resp/v1" || name). Names are scoped by the tenant that stores them.
BlockKey NamedBlockKey(std::string_view name);

}  // namespace kvtier

#endif  // KVTIER_BLOCK_KEY_H_
