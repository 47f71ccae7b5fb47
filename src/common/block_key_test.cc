#include "kvtier/block_key.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kvtier {
namespace {

// The vectors of docs/block_keys.md, computed independently with Python's hashlib.
Namespace DocNamespace(std::string tenant = "acme") {
  Namespace ns;
  ns.tenant = std::move(tenant);
  ns.model = "llama-3.1-8b-instruct@0e9e39f";
  ns.layout = {.num_layers = 32, .num_kv_heads = 8, .head_dim = 128,
               .dtype = KvDtype::kBf16, .tokens_per_block = 4};
  return ns;
}

TEST(BlockKeyTest, NamespaceSeedMatchesDocumentedVector) {
  Result<BlockKey> seed = NamespaceSeed(DocNamespace());
  ASSERT_TRUE(seed.ok());
  EXPECT_EQ(seed->ToHex(), "6168987b00b57303f0782aa758a86c83ca3b1974b1c3bb976337eda7d9041922");
}

TEST(BlockKeyTest, ChainMatchesDocumentedVectorsAndSkipsPartialBlock) {
  std::vector<uint32_t> tokens(10);
  std::iota(tokens.begin(), tokens.end(), 0);
  Result<std::vector<BlockKey>> keys = ComputeBlockKeys(DocNamespace(), tokens);
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 2u);  // Tokens 8 and 9 do not fill a block.
  EXPECT_EQ((*keys)[0].ToHex(), "1710bad8fce2903e92c90cdf5a919e7a29a32df64990441fe7fb500b2026ff33");
  EXPECT_EQ((*keys)[1].ToHex(), "b2bd66f0ca3303edab5b38c445d3ea6d3b13cd3cb0e2d058d53c78932f40b36a");
}

TEST(BlockKeyTest, TokensAreLittleEndianU32) {
  std::vector<uint32_t> tokens = {0xffffffffu, 1, 0x80000000u, 128000};
  Result<std::vector<BlockKey>> keys = ComputeBlockKeys(DocNamespace(), tokens);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ((*keys)[0].ToHex(), "cff754c541618749228bafbdc8e17675e2be7f3e4c20423a9f3d4ee23859a333");
}

TEST(BlockKeyTest, StepFunctionReproducesTheChain) {
  std::vector<uint32_t> tokens(8);
  std::iota(tokens.begin(), tokens.end(), 100);
  Result<std::vector<BlockKey>> keys = ComputeBlockKeys(DocNamespace(), tokens);
  ASSERT_TRUE(keys.ok());
  BlockKey k0 = ChainBlockKey(*NamespaceSeed(DocNamespace()), std::span(tokens).first(4));
  EXPECT_EQ(k0, (*keys)[0]);
  EXPECT_EQ(ChainBlockKey(k0, std::span(tokens).subspan(4, 4)), (*keys)[1]);
}

TEST(BlockKeyTest, OtherTenantGetsOtherKeysForTheSameTokens) {
  std::vector<uint32_t> tokens(8, 7);
  Result<std::vector<BlockKey>> a = ComputeBlockKeys(DocNamespace("acme"), tokens);
  Result<std::vector<BlockKey>> b = ComputeBlockKeys(DocNamespace("other"), tokens);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)[0], (*b)[0]);
  EXPECT_EQ(NamespaceSeed(DocNamespace("other"))->ToHex(),
            "f2290f151205f0e07ab270e379dbffa9067795ce75e67c3acfe94f62de529f6c");
}

TEST(BlockKeyTest, EveryLayoutFieldChangesTheSeed) {
  const BlockKey base = *NamespaceSeed(DocNamespace());
  std::vector<Namespace> variants(8, DocNamespace());
  variants[0].model += "x";
  variants[1].layout.num_layers = 33;
  variants[2].layout.num_kv_heads = 4;
  variants[3].layout.head_dim = 64;
  variants[4].layout.dtype = KvDtype::kFp8E4M3;
  variants[5].layout.tokens_per_block = 8;
  variants[6].tp_size = 2;
  variants[7].tp_size = 2;
  variants[7].tp_rank = 1;
  for (const Namespace& ns : variants) EXPECT_NE(*NamespaceSeed(ns), base);
  EXPECT_NE(*NamespaceSeed(variants[6]), *NamespaceSeed(variants[7]));
}

TEST(BlockKeyTest, OpaqueKeysAreNamespaced) {
  const uint8_t engine_hash[] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
  Result<BlockKey> a = OpaqueBlockKey(DocNamespace("acme"), engine_hash);
  Result<BlockKey> b = OpaqueBlockKey(DocNamespace("other"), engine_hash);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ToHex(), "a54e7dc6c26775b26439510394a7b863a69ea6661ed97f8125a05994c59d27e9");
  EXPECT_NE(*a, *b);
  EXPECT_EQ(OpaqueBlockKey(DocNamespace(), {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> huge(kMaxOpaqueKeyBytes + 1);
  EXPECT_EQ(OpaqueBlockKey(DocNamespace(), huge).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockKeyTest, RejectsWrongSizesAndBadHex) {
  std::vector<uint8_t> short_key(31), exact(32, 0xab), long_key(33);
  EXPECT_EQ(BlockKey::FromBytes(short_key).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockKey::FromBytes(long_key).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(BlockKey::FromBytes(exact).ok());
  const std::string hex = BlockKey::FromBytes(exact)->ToHex();
  EXPECT_EQ(*BlockKey::FromHex(hex), *BlockKey::FromBytes(exact));
  EXPECT_FALSE(BlockKey::FromHex(hex.substr(1)).ok());
  EXPECT_FALSE(BlockKey::FromHex(std::string(64, 'g')).ok());
}

TEST(BlockKeyTest, InvalidNamespacesAreRejected) {
  Namespace ns = DocNamespace();
  ns.tenant.clear();
  EXPECT_EQ(NamespaceSeed(ns).status().code(), StatusCode::kInvalidArgument);
  ns = DocNamespace();
  ns.layout.tokens_per_block = 0;
  EXPECT_FALSE(ComputeBlockKeys(ns, std::vector<uint32_t>(8)).ok());
  ns = DocNamespace();
  ns.tp_rank = 1;  // tp_size is 1.
  EXPECT_FALSE(NamespaceSeed(ns).ok());
  ns = DocNamespace();
  ns.layout.dtype = static_cast<KvDtype>(99);
  EXPECT_FALSE(NamespaceSeed(ns).ok());
}

TEST(BlockKeyTest, LayoutBlockBytes) {
  KvLayout l = DocNamespace().layout;
  l.tokens_per_block = 256;
  // Llama 3.1 8B in bf16: 128 KiB per token, 32 MiB per 256-token block.
  EXPECT_EQ(l.BlockBytes(), 32ull * 1024 * 1024);
}

TEST(NamedBlockKeyTest, MatchesTheVectorOfBlockKeysMd) {
  EXPECT_EQ(NamedBlockKey("mykey").ToHex(),
            "19643ecc4f48e8dae41b93e052d5fb34864ec2dac8b3ccd72f292152dc3efc32");
  EXPECT_NE(NamedBlockKey("mykey"), NamedBlockKey("mykey2"));
}

}  // namespace
}  // namespace kvtier
