// The Store's data services across G2 and G3 on a real directory: compression and encryption
// of G3 records, deletion by session and by tenant, crypto-shredding, maximum age and the
// audit trail; and the end-to-end proof on the reference model: KV prefilled by one process
// goes through the Store to G3 compressed and encrypted, and a second process reloads it and
// continues with bit-identical logits.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/store.h"
#include "src/model/llama2c.h"
#include "src/model/model_files.h"
#include "src/model/model_test_util.h"
#include "src/model/tokenizer.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlock = 64 * kKiB;
constexpr char kMasterKeyHex[] =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

class ManualClockEnv final : public Env {
 public:
  uint64_t NowMicros() override { return now_us.load(); }
  std::atomic<uint64_t> now_us{1'700'000'000'000'000};
};

BlockKey Key(uint64_t v) {
  std::array<uint8_t, kBlockKeySize> b{};
  std::memcpy(b.data(), &v, sizeof(v));
  b[31] = 0x5d;
  return BlockKey(b);
}

// bf16 values shaped like KV activations, so that compression has something to find.
std::vector<std::byte> Value(uint64_t k) {
  std::mt19937 rng(static_cast<uint32_t>(k));
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<std::byte> v(kBlock);
  for (size_t i = 0; i + 1 < v.size(); i += 2) {
    const float f = dist(rng);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    const uint16_t b = static_cast<uint16_t>(bits >> 16);
    std::memcpy(v.data() + i, &b, 2);
  }
  return v;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether any regular file under `dir` contains `needle`.
bool AnyFileContains(const fs::path& dir, std::string_view needle) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && ReadAll(entry.path()).find(needle) != std::string::npos) {
      return true;
    }
  }
  return false;
}

class StoreDataServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvtier_services_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    key_file_ = dir_ / "master.key";
    std::ofstream(key_file_) << kMasterKeyHex << "\n";
    fs::permissions(key_file_, fs::perms::owner_read | fs::perms::owner_write);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }

  // G2 holds `memory_blocks` blocks; everything evicted goes to G3 (no admission filter).
  Options MakeOptions(uint64_t memory_blocks, bool encrypt) {
    Options o;
    o.memory.capacity_bytes = memory_blocks * kBlock;
    o.max_block_bytes = kBlock;
    o.disk.dir = (dir_ / "disk").string();
    o.disk.capacity_bytes = 64 * kMiB;
    o.disk.segment_bytes = 4 * kMiB;
    o.disk_admission = {.frequency_gate = false};
    o.disk_data = {.compress = true, .encrypt = encrypt};
    if (encrypt) {
      o.security.master_key = "file:" + key_file_.string();
      o.security.keystore_dir = (dir_ / "keys").string();
    }
    o.security.audit_log_path = (dir_ / "audit.log").string();
    o.tenants = {TenantOptions{"acme"}, TenantOptions{"globex"}};
    o.env = &env_;
    return o;
  }

  void Open(const Options& o) {
    store_.reset();
    Result<std::unique_ptr<Store>> s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    acme_ = *store_->FindTenant("acme");
    globex_ = *store_->FindTenant("globex");
  }

  Status Put(TenantId t, uint64_t k, SessionId session = 0) {
    PutOptions po;
    po.session = session;
    po.dtype = KvDtype::kBf16;
    return store_->Put(t, Key(k), Value(k), po);
  }

  bool Has(TenantId t, uint64_t k) {
    std::vector<std::byte> out(kBlock);
    Result<size_t> n = store_->Read(t, Key(k), out);
    if (!n.ok()) return false;
    EXPECT_EQ(out, Value(k)) << "block " << k << " came back with wrong bytes";
    return true;
  }

  // Pushes the blocks of `t` out of G2 (into G3) by filling G2 with more of that tenant's
  // blocks (another tenant's would not do: a full arena evicts from the fuller tenant).
  void Flush(TenantId t, uint64_t memory_blocks) {
    for (uint64_t i = 0; i < 2 * memory_blocks; ++i) {
      ASSERT_TRUE(store_->Put(t, Key(1'000'000 + i), Value(i)).ok());
    }
  }

  std::string AuditLog() { return ReadAll(dir_ / "audit.log"); }

  fs::path dir_;
  fs::path key_file_;
  ManualClockEnv env_;
  std::unique_ptr<Store> store_;
  TenantId acme_;
  TenantId globex_;
};

TEST_F(StoreDataServicesTest, G3RecordsAreCompressedAndEncryptedAndReadBackExactly) {
  const Options o = MakeOptions(4, /*encrypt=*/true);
  Open(o);
  for (uint64_t k = 0; k < 12; ++k) ASSERT_TRUE(Put(acme_, k).ok());
  Flush(acme_, 4);
  Open(o);  // A restart: G2 is empty, every block comes from G3.
  for (uint64_t k = 0; k < 12; ++k) EXPECT_TRUE(Has(acme_, k)) << k;
  StoreStats stats = store_->Stats();
  EXPECT_GT(stats.disk_blocks, 0u);
  EXPECT_LT(stats.disk_stored_bytes * 5, stats.disk_logical_bytes * 4)
      << "bf16 KV should be stored at least 1.25:1 smaller";
  // No plaintext reaches the disk: a run of the first block's bytes appears in no file.
  const std::vector<std::byte> plain = Value(0);
  EXPECT_FALSE(AnyFileContains(dir_ / "disk", std::string_view(
                                                  reinterpret_cast<const char*>(plain.data()) + 4096, 64)));
}

TEST_F(StoreDataServicesTest, DeleteSessionRemovesEveryCopyOnEveryTierForGood) {
  const Options o = MakeOptions(4, /*encrypt=*/false);
  Open(o);
  for (uint64_t k = 0; k < 12; ++k) ASSERT_TRUE(Put(acme_, k, k % 2 == 0 ? 7 : 9).ok());
  ASSERT_TRUE(store_->Pin(acme_, Key(10)).ok());  // Pinned blocks go too.
  Result<DeletionReport> report = store_->DeleteSession(acme_, 7, "ops");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->memory_blocks + report->disk_blocks, 6u);
  EXPECT_GT(report->disk_blocks, 0u);
  for (uint64_t k = 0; k < 12; ++k) EXPECT_EQ(Has(acme_, k), k % 2 == 1) << k;
  Open(o);
  for (uint64_t k = 0; k < 12; ++k) EXPECT_EQ(Has(acme_, k), k % 2 == 1) << "after reopen " << k;
  // Another tenant's session of the same number is its own.
  EXPECT_EQ(store_->DeleteSession(globex_, 9, "ops")->memory_blocks, 0u);
  EXPECT_EQ(store_->DeleteSession(acme_, 0, "ops").status().code(),
            StatusCode::kInvalidArgument);
  const std::string log = AuditLog();
  EXPECT_NE(log.find("\"op\":\"delete_session\",\"tenant\":\"acme\",\"actor\":\"ops\""),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("\"scope_id\":\"7\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"blocks\":6"), std::string::npos) << log;
}

TEST_F(StoreDataServicesTest, DeleteTenantLeavesOtherTenantsAlone) {
  const Options o = MakeOptions(4, /*encrypt=*/false);
  Open(o);
  for (uint64_t k = 0; k < 8; ++k) {
    ASSERT_TRUE(Put(acme_, k).ok());
    ASSERT_TRUE(Put(globex_, 100 + k).ok());
  }
  Flush(globex_, 4);
  Result<DeletionReport> report = store_->DeleteTenant(acme_, "admin");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->memory_blocks + report->disk_blocks, 8u);
  Open(o);
  for (uint64_t k = 0; k < 8; ++k) {
    EXPECT_FALSE(Has(acme_, k)) << k;
    EXPECT_TRUE(Has(globex_, 100 + k)) << k;
  }
  EXPECT_NE(AuditLog().find("\"op\":\"delete_tenant\",\"tenant\":\"acme\",\"actor\":\"admin\""),
            std::string::npos);
}

// The key, not the deletion, is what makes the copies unreadable: a copy of the segments taken
// before the shred is opened afterwards with the shredded keystore and yields nothing.
TEST_F(StoreDataServicesTest, ShreddingMakesEveryEncryptedCopyUnreadable) {
  Options o = MakeOptions(4, /*encrypt=*/true);
  Open(o);
  for (uint64_t k = 0; k < 12; ++k) ASSERT_TRUE(Put(acme_, k).ok());
  Flush(acme_, 4);
  store_.reset();
  fs::copy(dir_ / "disk", dir_ / "disk-copy", fs::copy_options::recursive);
  fs::remove(dir_ / "disk-copy" / "LOCK");
  Open(o);
  for (uint64_t k = 0; k < 12; ++k) ASSERT_TRUE(Has(acme_, k)) << k;
  Result<DeletionReport> report = store_->ShredTenant(acme_, "admin");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  for (uint64_t k = 0; k < 12; ++k) EXPECT_FALSE(Has(acme_, k)) << k;

  store_.reset();
  o.disk.dir = (dir_ / "disk-copy").string();
  Open(o);
  for (uint64_t k = 0; k < 12; ++k) EXPECT_FALSE(Has(acme_, k)) << "copy " << k;
  EXPECT_GT(store_->Stats().disk_unreadable_records, 0u);
  // New writes get a fresh key and read back.
  ASSERT_TRUE(Put(acme_, 500).ok());
  Flush(acme_, 4);
  EXPECT_TRUE(Has(acme_, 500));
  const std::string log = AuditLog();
  EXPECT_NE(log.find("\"op\":\"shred_tenant\",\"tenant\":\"acme\""), std::string::npos) << log;
}

TEST_F(StoreDataServicesTest, ShredWithoutAMasterKeyIsRefused) {
  Open(MakeOptions(4, /*encrypt=*/false));
  EXPECT_EQ(store_->ShredTenant(acme_, "admin").status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(StoreDataServicesTest, WrongOrMissingMasterKeyIsAClearError) {
  Options o = MakeOptions(4, /*encrypt=*/true);
  Open(o);
  ASSERT_TRUE(Put(acme_, 1).ok());
  store_.reset();
  std::ofstream(key_file_) << std::string(64, 'f') << "\n";
  Result<std::unique_ptr<Store>> wrong = Store::Open(o);
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition) << wrong.status().ToString();
  EXPECT_EQ(wrong.status().ToString().find(kMasterKeyHex), std::string::npos);
  o.security.master_key = "file:" + (dir_ / "absent.key").string();
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kNotFound);
  o.security.master_key = "env:KVTIER_TEST_UNSET_VARIABLE";
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kNotFound);
  o.security.master_key = "hunter2";
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.security.master_key.clear();
  EXPECT_EQ(Store::Open(o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreDataServicesTest, MaximumAgeExpiresBlocksOnEveryTierHoweverOftenRead) {
  Options o = MakeOptions(4, /*encrypt=*/false);
  o.tenants[0].max_age_seconds = 100;
  Open(o);
  for (uint64_t k = 0; k < 8; ++k) ASSERT_TRUE(Put(acme_, k).ok());
  for (int step = 0; step < 9; ++step) {
    env_.now_us += 10'000'000;
    EXPECT_TRUE(Has(acme_, 0));  // Reads keep a TTL alive, not a maximum age.
  }
  env_.now_us += 20'000'000;
  // At least the 8 blocks; a block promoted by the reads has a copy on each tier.
  EXPECT_GE(store_->PurgeExpired(), 8u);
  for (uint64_t k = 0; k < 8; ++k) EXPECT_FALSE(Has(acme_, k)) << k;
  Open(o);
  for (uint64_t k = 0; k < 8; ++k) EXPECT_FALSE(Has(acme_, k)) << "after reopen " << k;
  EXPECT_NE(AuditLog().find("\"op\":\"expire\""), std::string::npos);
}

TEST_F(StoreDataServicesTest, PromotionKeepsTheSessionAndTheAge) {
  Options o = MakeOptions(4, /*encrypt=*/false);
  o.tenants[0].max_age_seconds = 100;
  Open(o);
  ASSERT_TRUE(Put(acme_, 1, 5).ok());
  Flush(acme_, 4);
  env_.now_us += 60'000'000;
  EXPECT_TRUE(Has(acme_, 1));  // Promoted back into G2 with its age and session.
  env_.now_us += 60'000'000;
  EXPECT_FALSE(Has(acme_, 1)) << "a promoted block must keep its creation time";
  ASSERT_TRUE(Put(acme_, 2, 5).ok());
  Flush(acme_, 4);
  EXPECT_TRUE(Has(acme_, 2));
  Result<DeletionReport> report = store_->DeleteSession(acme_, 5, "ops");
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(Has(acme_, 2));
}

// ---- End to end on the reference model ----

constexpr size_t kTokensPerBlock = 16;
constexpr SessionId kSession = 42;

// The KV of positions [b*B, (b+1)*B) as one block: for each layer, K rows then V rows (fp32).
std::vector<std::byte> KvBlock(const model::Llama2cConfig& c, const std::vector<float>& k,
                               const std::vector<float>& v, size_t positions, size_t b) {
  const size_t row = static_cast<size_t>(c.kv_dim());
  std::vector<std::byte> out;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (const std::vector<float>* src : {&k, &v}) {
      const float* first = src->data() + (l * positions + b * kTokensPerBlock) * row;
      const auto* bytes = reinterpret_cast<const std::byte*>(first);
      out.insert(out.end(), bytes, bytes + kTokensPerBlock * row * sizeof(float));
    }
  }
  return out;
}

// The inverse: writes block b into k and v (sized for `positions`).
void UnpackKvBlock(const model::Llama2cConfig& c, std::span<const std::byte> block,
                   size_t positions, size_t b, std::vector<float>* k, std::vector<float>* v) {
  const size_t row = static_cast<size_t>(c.kv_dim());
  const size_t bytes = kTokensPerBlock * row * sizeof(float);
  size_t at = 0;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (std::vector<float>* dst : {k, v}) {
      std::memcpy(dst->data() + (l * positions + b * kTokensPerBlock) * row, block.data() + at,
                  bytes);
      at += bytes;
    }
  }
}

class EndToEndTest : public StoreDataServicesTest {
 protected:
  void SetUp() override {
    StoreDataServicesTest::SetUp();
    model_dir_ = model::testing::TestModelDir();
    if (model_dir_.empty()) GTEST_SKIP() << model::testing::kNoModelMessage;
    auto m = model::Llama2cModel::Load(model_dir_ + "/" + model::kCheckpointFile);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    auto tok = model::Tokenizer::Load(model_dir_ + "/" + model::kTokenizerFile,
                                      model_->config().vocab_size);
    ASSERT_TRUE(tok.ok());
    tokenizer_ = std::move(*tok);
  }

  Namespace Ns() const {
    const model::Llama2cConfig& c = model_->config();
    Namespace ns;
    ns.tenant = "acme";
    ns.model = "stories260K";
    ns.layout.num_layers = static_cast<uint32_t>(c.n_layers);
    ns.layout.num_kv_heads = static_cast<uint32_t>(c.n_kv_heads);
    ns.layout.head_dim = static_cast<uint32_t>(c.head_dim());
    ns.layout.dtype = KvDtype::kFp32;
    ns.layout.tokens_per_block = kTokensPerBlock;
    return ns;
  }

  std::string model_dir_;
  std::unique_ptr<model::Llama2cModel> model_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
};

// Process 1 prefills a history and stores its KV; it exits. Process 2 (this one) opens the
// store, finds the prefix in G3, reloads it into a fresh session and continues: every logit
// matches a full recompute bit for bit, and greedy decoding yields the same tokens.
TEST_F(EndToEndTest, KvStoredCompressedAndEncryptedSurvivesAProcessRestartBitExactly) {
  const model::Llama2cConfig& c = model_->config();
  Result<std::vector<int32_t>> prompt = tokenizer_->Encode("Once upon a time, there was", true);
  ASSERT_TRUE(prompt.ok());
  model::Llama2cSession reference(*model_);
  Result<std::vector<int32_t>> story = model::GenerateGreedy(reference, *prompt, 120, false);
  ASSERT_TRUE(story.ok());
  std::vector<int32_t> tokens = *prompt;
  tokens.insert(tokens.end(), story->begin(), story->end());
  const size_t blocks = 6;
  const size_t history = blocks * kTokensPerBlock;
  ASSERT_GT(tokens.size(), history + 16);
  std::vector<uint32_t> history_tokens(tokens.begin(), tokens.begin() + history);
  const size_t block_bytes = KvBlock(c, std::vector<float>(history * c.kv_dim() * c.n_layers),
                                     std::vector<float>(history * c.kv_dim() * c.n_layers),
                                     history, 0)
                                 .size();

  Options o = MakeOptions(1, /*encrypt=*/true);
  o.max_block_bytes = block_bytes;
  o.memory.capacity_bytes = 2 * ((block_bytes + 4095) / 4096 * 4096);
  o.env = Env::Default();

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The first process: prefill, export, store. Exit codes say what failed.
    model::Llama2cSession session(*model_);
    for (size_t p = 0; p < history; ++p) {
      if (!session.Forward(tokens[p]).ok()) _exit(10);
    }
    std::vector<float> k, v;
    if (!session.ExportKv(history, &k, &v).ok()) _exit(11);
    Result<std::unique_ptr<Store>> store = Store::Open(o);
    if (!store.ok()) _exit(12);
    TenantId tenant = *(*store)->FindTenant("acme");
    Result<std::vector<BlockKey>> keys = ComputeBlockKeys(Ns(), history_tokens);
    if (!keys.ok() || keys->size() != blocks) _exit(13);
    for (size_t b = 0; b < blocks; ++b) {
      PutOptions po;
      if (b > 0) po.parent = (*keys)[b - 1];
      po.session = kSession;
      po.dtype = KvDtype::kFp32;
      if (!(*store)->Put(tenant, (*keys)[b], KvBlock(c, k, v, history, b), po).ok()) _exit(14);
    }
    // Unrelated blocks push the last KV blocks out of DRAM; closing drains the demotions.
    const std::vector<std::byte> filler(block_bytes, std::byte{1});
    for (uint64_t i = 0; i < 4; ++i) {
      if (!(*store)->Put(tenant, Key(900 + i), filler).ok()) _exit(15);
    }
    if ((*store)->Stats().demotion_failures != 0) _exit(16);
    store->reset();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the storing process failed (see the exit code)";

  Open(o);
  Result<PrefixMatch> match = store_->LookupPrefix(Ns(), history_tokens);
  ASSERT_TRUE(match.ok()) << match.status().ToString();
  ASSERT_EQ(match->num_blocks, blocks);
  for (TierLevel tier : match->tiers) EXPECT_EQ(tier, TierLevel::kG3);
  StoreStats stats = store_->Stats();
  EXPECT_LT(stats.disk_stored_bytes, stats.disk_logical_bytes) << "fp32 KV should compress";

  Result<std::vector<BlockKey>> keys = ComputeBlockKeys(Ns(), history_tokens);
  ASSERT_TRUE(keys.ok());
  std::vector<float> k(history * c.kv_floats_per_pos()), v(k.size());
  for (size_t b = 0; b < blocks; ++b) {
    std::vector<std::byte> block(block_bytes);
    Result<size_t> n = store_->Read(acme_, (*keys)[b], block);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, block_bytes);
    UnpackKvBlock(c, block, history, b, &k, &v);
  }
  // No KV plaintext in any file of the disk tier.
  EXPECT_FALSE(AnyFileContains(
      dir_ / "disk", std::string_view(reinterpret_cast<const char*>(k.data() + 64), 64)));

  model::Llama2cSession full(*model_);
  std::vector<std::vector<float>> full_logits;
  for (int32_t t : tokens) {
    auto logits = full.Forward(t);
    ASSERT_TRUE(logits.ok());
    full_logits.emplace_back(logits->begin(), logits->end());
  }
  model::Llama2cSession reloaded(*model_);
  ASSERT_TRUE(reloaded.ImportKv(history, k, v).ok());
  for (size_t p = history; p < tokens.size(); ++p) {
    auto logits = reloaded.Forward(tokens[p]);
    ASSERT_TRUE(logits.ok());
    ASSERT_EQ(std::memcmp(logits->data(), full_logits[p].data(), logits->size_bytes()), 0)
        << "logits differ at position " << p;
  }
  // And the continuation decodes to the same tokens as the uninterrupted run.
  model::Llama2cSession resumed(*model_);
  ASSERT_TRUE(resumed.ImportKv(history, k, v).ok());
  Result<std::vector<int32_t>> continued = model::GenerateGreedy(
      resumed, std::span(tokens).subspan(history, 1), tokens.size() - history - 1, false);
  ASSERT_TRUE(continued.ok());
  EXPECT_TRUE(std::equal(continued->begin(), continued->end(), tokens.begin() + history + 1));

  // Deleting the session removes the reloaded history everywhere.
  Result<DeletionReport> report = store_->DeleteSession(acme_, kSession, "e2e");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->disk_blocks, blocks);
  EXPECT_EQ(store_->LookupPrefix(Ns(), history_tokens)->num_blocks, 0u);
}

}  // namespace
}  // namespace kvtier
