// AuditLog: an append-only trail of administrative acts, one JSON object per line.
//
// Each line holds typed fields only (audit_log.cc and docs/security.md, "Audit log"):
//   {"time":"2026-11-30T10:05:21.123456Z","op":"shred_tenant","tenant":"acme","actor":"admin",
//    "scope":"tenant","blocks":0,"bytes":0,"keys":2,"result":"OK"}
// There is no free-form field: names are identifiers (1 to 255 printable ASCII characters,
// no spaces), the rest are enums and counters, so no KV bytes, token ids or key material can
// reach the log through this API.
//
// Durability: with sync_every_record (the default) Append() returns OK only once the line is
// on stable storage (fdatasync): an acknowledged act is never missing after a crash. Acts are
// rare, so the cost is one sync per act. A torn last line left by a crash (never
// acknowledged) is cut off when the log is reopened.
//
// Rotation: when a line would take the file past max_file_bytes, the file is renamed to
// "<path>.<n>" (n = 1, 2, ... never reused) and a new one started. Rotated files are kept;
// their retention is the operator's choice.
//
// Thread safety: thread-safe; lines from concurrent Append() calls never interleave.

#ifndef KVTIER_SRC_SERVICES_AUDIT_AUDIT_LOG_H_
#define KVTIER_SRC_SERVICES_AUDIT_AUDIT_LOG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "src/common/mutex.h"

namespace kvtier::audit {

enum class AuditOp : uint8_t {
  kDeleteBlocks,     // Delete by block key.
  kDeleteSession,    // Delete by session id.
  kDeleteTenant,     // Delete every block of a tenant.
  kExpire,           // Retention (TTL, maximum age) removed blocks.
  kShredTenant,      // Every data key of a tenant destroyed.
  kCreateTenantKey,  // A tenant's first data key.
  kRotateTenantKey,  // A new data key version.
  kRotateMasterKey,  // Every data key re-wrapped under a new master key.
  kSetQuota,         // A tenant's capacity budget changed (bytes = the new budget).
  kSetRetention,     // A tenant's TTL or maximum age changed.
  kAdminChange,      // Any other configuration change by an operator.
  kAuthFailure,      // A peer's first failed authentication (actor: the peer).
  kAuthLockout,      // A peer locked out after failed authentications in a row.
};

// "delete_blocks", "shred_tenant", ...
std::string_view AuditOpName(AuditOp op);

enum class AuditScope : uint8_t { kBlocks, kSession, kTenant, kNode };

std::string_view AuditScopeName(AuditScope scope);

struct AuditEvent {
  AuditOp op = AuditOp::kAdminChange;
  AuditScope scope = AuditScope::kTenant;
  std::string tenant;    // Identifier; empty only when scope is kNode.
  std::string actor;     // Identifier of who asked (authenticated principal, or "kvtier").
  std::string scope_id;  // Identifier: the session id for kSession; otherwise empty.
  uint64_t blocks = 0;   // Blocks affected.
  uint64_t bytes = 0;    // Bytes affected; for kSetQuota the new budget.
  uint64_t keys = 0;     // Data key versions affected.
  std::optional<uint32_t> key_version;  // The version created or concerned.
  StatusCode result = StatusCode::kOk;  // Outcome of the act (the code only, no message).
};

struct AuditLogOptions {
  // fdatasync after every line (see the header comment). Turning it off trades the guarantee
  // that an acknowledged act is logged for one less sync per act.
  bool sync_every_record = true;
  // Rotate the file once it would pass this many bytes; 0 never rotates.
  uint64_t max_file_bytes = uint64_t{64} << 20;
};

class AuditLog {
 public:
  // Opens `path` for appending, creating it when absent. `env` is not owned and must outlive
  // the log.
  [[nodiscard]] static Result<std::unique_ptr<AuditLog>> Open(Env* env, const std::string& path,
                                                              const AuditLogOptions& options);
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // InvalidArgument when a name is not an identifier (nothing written); otherwise the Env's
  // I/O errors. A failed append leaves no partial line behind for readers of later lines.
  [[nodiscard]] Status Append(const AuditEvent& event) ABSL_LOCKS_EXCLUDED(mu_);

  // Appends that returned an error so far.
  uint64_t failed_appends() const ABSL_LOCKS_EXCLUDED(mu_);

  // RFC 3339 UTC with microseconds, e.g. "2026-11-30T10:05:21.000042Z".
  static std::string FormatTime(uint64_t micros_since_epoch);

 private:
  AuditLog(Env* env, std::string path, const AuditLogOptions& options, std::unique_ptr<File> file,
           uint64_t size, uint64_t next_rotation);

  Status Rotate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Env* const env_;
  const std::string path_;
  const AuditLogOptions options_;
  mutable Mutex mu_;
  std::unique_ptr<File> file_ ABSL_GUARDED_BY(mu_);
  uint64_t size_ ABSL_GUARDED_BY(mu_);           // Bytes of whole lines in file_.
  uint64_t next_rotation_ ABSL_GUARDED_BY(mu_);  // Suffix of the next rotated file.
  uint64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  bool torn_ ABSL_GUARDED_BY(mu_) = false;  // A failed append may have left bytes past size_.
};

}  // namespace kvtier::audit

#endif  // KVTIER_SRC_SERVICES_AUDIT_AUDIT_LOG_H_
