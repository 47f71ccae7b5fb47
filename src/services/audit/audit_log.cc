#include "src/services/audit/audit_log.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvtier::audit {
namespace {

// How far back Open() looks for the end of the last whole line, per read.
constexpr uint64_t kTailChunkBytes = 4096;

bool IsIdentifier(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7F; });
}

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

void SplitPath(const std::string& path, std::string* dir, std::string* base) {
  const size_t slash = path.rfind('/');
  *dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  *base = slash == std::string::npos ? path : path.substr(slash + 1);
}

// Returns the size of the prefix of `file` (of `size` bytes) that ends with a newline.
Result<uint64_t> WholeLinesSize(File* file, uint64_t size) {
  std::vector<std::byte> chunk(kTailChunkBytes);
  uint64_t end = size;
  while (end > 0) {
    const uint64_t start = end > kTailChunkBytes ? end - kTailChunkBytes : 0;
    size_t got = 0;
    const std::span<std::byte> want(chunk.data(), end - start);
    KVTIER_RETURN_IF_ERROR(file->Read(start, want, &got));
    if (got != want.size()) return Status::DataLoss("audit log shrank while being opened");
    for (size_t i = want.size(); i > 0; --i) {
      if (want[i - 1] == std::byte{'\n'}) return start + i;
    }
    end = start;
  }
  return uint64_t{0};
}

// The largest n of existing "<base>.<n>" files, plus one.
Result<uint64_t> NextRotation(Env* env, const std::string& dir, const std::string& base) {
  Result<std::vector<std::string>> names = env->ListDir(dir);
  if (!names.ok()) return names.status();
  uint64_t next = 1;
  const std::string prefix = base + ".";
  for (const std::string& name : *names) {
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string_view digits = std::string_view(name).substr(prefix.size());
    uint64_t n = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (error != std::errc() || end != digits.data() + digits.size() || n == UINT64_MAX) continue;
    next = std::max<uint64_t>(next, n + 1);
  }
  return next;
}

}  // namespace

std::string_view AuditOpName(AuditOp op) {
  switch (op) {
    case AuditOp::kDeleteBlocks: return "delete_blocks";
    case AuditOp::kDeleteSession: return "delete_session";
    case AuditOp::kDeleteTenant: return "delete_tenant";
    case AuditOp::kExpire: return "expire";
    case AuditOp::kShredTenant: return "shred_tenant";
    case AuditOp::kCreateTenantKey: return "create_tenant_key";
    case AuditOp::kRotateTenantKey: return "rotate_tenant_key";
    case AuditOp::kRotateMasterKey: return "rotate_master_key";
    case AuditOp::kSetQuota: return "set_quota";
    case AuditOp::kSetRetention: return "set_retention";
    case AuditOp::kAdminChange: return "admin_change";
    case AuditOp::kAuthFailure: return "auth_failure";
    case AuditOp::kAuthLockout: return "auth_lockout";
  }
  return "unknown";
}

std::string_view AuditScopeName(AuditScope scope) {
  switch (scope) {
    case AuditScope::kBlocks: return "blocks";
    case AuditScope::kSession: return "session";
    case AuditScope::kTenant: return "tenant";
    case AuditScope::kNode: return "node";
  }
  return "unknown";
}

std::string AuditLog::FormatTime(uint64_t micros_since_epoch) {
  const time_t seconds = static_cast<time_t>(micros_since_epoch / 1000000);
  struct tm utc {};
  gmtime_r(&seconds, &utc);
  char text[96];  // Room for any int the compiler can imagine in each field.
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%06uZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<unsigned>(micros_since_epoch % 1000000));
  return text;
}

Result<std::unique_ptr<AuditLog>> AuditLog::Open(Env* env, const std::string& path,
                                                 const AuditLogOptions& options) {
  std::string dir, base;
  SplitPath(path, &dir, &base);
  Result<uint64_t> next_rotation = NextRotation(env, dir, base);
  if (!next_rotation.ok()) return next_rotation.status();
  FileOptions file_options;
  file_options.create = true;
  Result<std::unique_ptr<File>> file = env->OpenFile(path, file_options);
  if (!file.ok()) return file.status();
  Result<uint64_t> size = (*file)->Size();
  if (!size.ok()) return size.status();
  Result<uint64_t> whole = WholeLinesSize(file->get(), *size);
  if (!whole.ok()) return whole.status();
  if (*whole != *size) {
    // A torn line from a crash: never acknowledged, so it goes.
    KVTIER_RETURN_IF_ERROR((*file)->Truncate(*whole));
    KVTIER_RETURN_IF_ERROR((*file)->Sync());
  }
  KVTIER_RETURN_IF_ERROR(env->SyncDir(dir));  // The file's creation is durable.
  return std::unique_ptr<AuditLog>(
      new AuditLog(env, path, options, std::move(*file), *whole, *next_rotation));
}

AuditLog::AuditLog(Env* env, std::string path, const AuditLogOptions& options,
                   std::unique_ptr<File> file, uint64_t size, uint64_t next_rotation)
    : env_(env),
      path_(std::move(path)),
      options_(options),
      file_(std::move(file)),
      size_(size),
      next_rotation_(next_rotation) {}

Status AuditLog::Rotate() {
  std::string dir, base;
  SplitPath(path_, &dir, &base);
  KVTIER_RETURN_IF_ERROR(file_->Sync());
  const std::string rotated = path_ + "." + std::to_string(next_rotation_);
  KVTIER_RETURN_IF_ERROR(env_->RenameFile(path_, rotated));
  ++next_rotation_;
  FileOptions file_options;
  file_options.create = true;
  file_options.truncate = true;
  Result<std::unique_ptr<File>> file = env_->OpenFile(path_, file_options);
  if (!file.ok()) return file.status();
  KVTIER_RETURN_IF_ERROR(env_->SyncDir(dir));
  file_ = std::move(*file);
  size_ = 0;
  return Status::OK();
}

Status AuditLog::Append(const AuditEvent& event) {
  const bool node_scope = event.scope == AuditScope::kNode;
  if (!IsIdentifier(event.actor) || (!node_scope && !IsIdentifier(event.tenant)) ||
      (node_scope && !event.tenant.empty() && !IsIdentifier(event.tenant)) ||
      (!event.scope_id.empty() && !IsIdentifier(event.scope_id)) ||
      (event.scope == AuditScope::kSession && event.scope_id.empty())) {
    return Status::InvalidArgument(
        "audit event: tenant, actor and scope id must be identifiers (1 to 255 printable "
        "ASCII characters, no spaces)");
  }
  nlohmann::ordered_json line;
  line["time"] = FormatTime(env_->NowMicros());
  line["op"] = AuditOpName(event.op);
  if (!event.tenant.empty()) line["tenant"] = event.tenant;
  line["actor"] = event.actor;
  line["scope"] = AuditScopeName(event.scope);
  if (!event.scope_id.empty()) line["scope_id"] = event.scope_id;
  line["blocks"] = event.blocks;
  line["bytes"] = event.bytes;
  line["keys"] = event.keys;
  if (event.key_version.has_value()) line["key_version"] = *event.key_version;
  line["result"] = StatusCodeName(event.result);
  const std::string text = line.dump() + "\n";

  MutexLock lock(&mu_);
  Status status;
  if (torn_) {
    status = file_->Truncate(size_);
    if (status.ok()) torn_ = false;
  }
  if (status.ok() && options_.max_file_bytes != 0 && size_ > 0 && size_ + text.size() > options_.max_file_bytes) {
    status = Rotate();
  }
  if (status.ok()) status = file_->Write(size_, AsBytes(text));
  if (status.ok() && options_.sync_every_record) status = file_->Sync();
  if (!status.ok()) {
    // Whatever part of this line reached the file is cut off before the next line.
    torn_ = true;
    ++failed_;
    return status;
  }
  size_ += text.size();
  return Status::OK();
}

uint64_t AuditLog::failed_appends() const {
  MutexLock lock(&mu_);
  return failed_;
}

}  // namespace kvtier::audit
