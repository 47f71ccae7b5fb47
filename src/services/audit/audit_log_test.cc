#include "src/services/audit/audit_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/env/fault_injection_env.h"
#include "src/env/mem_env.h"

namespace kvtier::audit {
namespace {

constexpr char kPath[] = "/audit/audit.log";

// A clock that reads a fixed, settable time.
class FixedClock final : public Env {
 public:
  uint64_t NowMicros() override { return now.load(); }
  std::atomic<uint64_t> now{1795000000123456};  // 2026-11-18T11:06:40.123456Z
};

std::string ReadAll(Env* env, const std::string& path) {
  Result<std::unique_ptr<File>> file = env->OpenFile(path, FileOptions{});
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return {};
  std::string text(*(*file)->Size(), '\0');
  size_t got = 0;
  EXPECT_TRUE((*file)->Read(0, std::as_writable_bytes(std::span(text)), &got).ok());
  return text;
}

std::vector<nlohmann::json> ParseLines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(parsed.is_discarded()) << line;
    lines.push_back(std::move(parsed));
  }
  return lines;
}

AuditEvent Shred(std::string tenant) {
  AuditEvent event;
  event.op = AuditOp::kShredTenant;
  event.scope = AuditScope::kTenant;
  event.tenant = std::move(tenant);
  event.actor = "admin@ops";
  event.keys = 2;
  return event;
}

class AuditLogTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_->CreateDir("/audit").ok()); }

  std::unique_ptr<AuditLog> MustOpen(AuditLogOptions options = {}, Env* env = nullptr) {
    Result<std::unique_ptr<AuditLog>> log = AuditLog::Open(env ? env : env_.get(), kPath, options);
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return log.ok() ? std::move(*log) : nullptr;
  }

  FixedClock clock_;
  std::unique_ptr<Env> env_ = NewMemEnv(&clock_);
};

TEST_F(AuditLogTest, LinesAreJsonWithTypedFieldsOnly) {
  std::unique_ptr<AuditLog> log = MustOpen();
  ASSERT_TRUE(log->Append(Shred("acme")).ok());
  AuditEvent deletion;
  deletion.op = AuditOp::kDeleteSession;
  deletion.scope = AuditScope::kSession;
  deletion.tenant = "acme";
  deletion.actor = "acme-engine-7";
  deletion.scope_id = "session:42";
  deletion.blocks = 17;
  deletion.bytes = 17 << 20;
  deletion.result = StatusCode::kNotFound;
  ASSERT_TRUE(log->Append(deletion).ok());

  const std::string text = ReadAll(env_.get(), kPath);
  const std::vector<nlohmann::json> lines = ParseLines(text);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            R"({"time":"2026-11-18T11:06:40.123456Z","op":"shred_tenant","tenant":"acme",)"
            R"("actor":"admin@ops","scope":"tenant","blocks":0,"bytes":0,"keys":2,"result":"OK"})");
  EXPECT_EQ(lines[1]["scope_id"], "session:42");
  EXPECT_EQ(lines[1]["blocks"], 17);
  EXPECT_EQ(lines[1]["result"], "NOT_FOUND");
  const std::set<std::string> allowed = {"time",  "op",     "tenant", "actor",       "scope",
                                         "scope_id", "blocks", "bytes", "keys", "key_version",
                                         "result"};
  for (const nlohmann::json& line : lines) {
    for (const auto& [field, value] : line.items()) {
      EXPECT_TRUE(allowed.contains(field)) << field;
      EXPECT_TRUE(value.is_string() || value.is_number_unsigned()) << field;
    }
  }
}

TEST_F(AuditLogTest, NamesThatAreNotIdentifiersAreRefused) {
  std::unique_ptr<AuditLog> log = MustOpen();
  const std::string bad_names[] = {"", "two words", "line\nbreak", std::string(256, 'x'),
                                   "caf\xc3\xa9", std::string("nul\0", 4)};
  for (const std::string& bad : bad_names) {
    AuditEvent event = Shred(bad);
    EXPECT_EQ(log->Append(event).code(), StatusCode::kInvalidArgument);
    event = Shred("acme");
    event.actor = bad;
    EXPECT_EQ(log->Append(event).code(), StatusCode::kInvalidArgument);
  }
  AuditEvent session = Shred("acme");
  session.scope = AuditScope::kSession;  // A session scope needs its id.
  EXPECT_EQ(log->Append(session).code(), StatusCode::kInvalidArgument);
  AuditEvent node;
  node.op = AuditOp::kRotateMasterKey;
  node.scope = AuditScope::kNode;
  node.actor = "root";
  EXPECT_TRUE(log->Append(node).ok());
  EXPECT_EQ(ParseLines(ReadAll(env_.get(), kPath)).size(), 1u);
}

TEST_F(AuditLogTest, ConcurrentAppendsNeverInterleave) {
  std::unique_ptr<AuditLog> log = MustOpen();
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        AuditEvent event = Shred("tenant-" + std::to_string(t));
        event.blocks = static_cast<uint64_t>(i);
        ASSERT_TRUE(log->Append(event).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::vector<nlohmann::json> lines = ParseLines(ReadAll(env_.get(), kPath));
  ASSERT_EQ(lines.size(), size_t{kThreads} * kPerThread);
  std::set<std::pair<std::string, uint64_t>> seen;
  for (const nlohmann::json& line : lines) {
    seen.emplace(line["tenant"].get<std::string>(), line["blocks"].get<uint64_t>());
  }
  EXPECT_EQ(seen.size(), lines.size());
}

TEST_F(AuditLogTest, RotatesBySizeAndKeepsEveryLine) {
  AuditLogOptions options;
  options.max_file_bytes = 400;
  {
    std::unique_ptr<AuditLog> log = MustOpen(options);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(log->Append(Shred("acme")).ok());
  }
  // Reopening continues the numbering instead of overwriting rotated files.
  std::unique_ptr<AuditLog> log = MustOpen(options);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(log->Append(Shred("acme")).ok());
  size_t lines = 0;
  size_t files = 0;
  Result<std::vector<std::string>> names = env_->ListDir("/audit");
  ASSERT_TRUE(names.ok());
  for (const std::string& name : *names) {
    const std::string text = ReadAll(env_.get(), "/audit/" + name);
    EXPECT_LE(text.size(), options.max_file_bytes) << name;
    lines += ParseLines(text).size();
    ++files;
  }
  EXPECT_EQ(lines, 20u);
  EXPECT_GT(files, 3u);
}

TEST_F(AuditLogTest, TornTailIsCutOnReopen) {
  {
    std::unique_ptr<AuditLog> log = MustOpen();
    ASSERT_TRUE(log->Append(Shred("acme")).ok());
  }
  const std::string whole = ReadAll(env_.get(), kPath);
  {
    Result<std::unique_ptr<File>> file = env_->OpenFile(kPath, FileOptions{});
    ASSERT_TRUE(file.ok());
    const std::string torn = R"({"time":"2026-)";
    ASSERT_TRUE((*file)->Write(whole.size(), std::as_bytes(std::span(torn))).ok());
  }
  std::unique_ptr<AuditLog> log = MustOpen();
  ASSERT_TRUE(log->Append(Shred("beta")).ok());
  const std::vector<nlohmann::json> lines = ParseLines(ReadAll(env_.get(), kPath));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["tenant"], "beta");
}

TEST_F(AuditLogTest, FailedAppendIsReportedAndLeavesNoPartialLine) {
  FaultInjectionEnv faulty(env_.get());
  std::unique_ptr<AuditLog> log = MustOpen({}, &faulty);
  ASSERT_TRUE(log->Append(Shred("one")).ok());
  FaultInjectionEnv::Fault fault;
  fault.op = FaultInjectionEnv::Op::kSync;
  fault.count = 1;
  faulty.AddFault(fault);
  EXPECT_EQ(log->Append(Shred("two-with-a-longer-name")).code(), StatusCode::kUnavailable);
  EXPECT_EQ(log->failed_appends(), 1u);
  ASSERT_TRUE(log->Append(Shred("three")).ok());
  const std::vector<nlohmann::json> lines = ParseLines(ReadAll(env_.get(), kPath));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["tenant"], "three");
}

TEST(AuditTimeTest, Rfc3339Utc) {
  EXPECT_EQ(AuditLog::FormatTime(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(AuditLog::FormatTime(951782400000042), "2000-02-29T00:00:00.000042Z");
}

}  // namespace
}  // namespace kvtier::audit
