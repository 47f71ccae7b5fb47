// FaultInjectionEnv: wraps an Env and injects the faults a storage engine must survive
// (LevelDB fault_injection_test.cc, RocksDB fault_injection_fs.h):
//   - chosen reads, writes or syncs fail (by count and/or by path), e.g. with EIO;
//   - the file system is full (every write and file creation fails with ENOSPC);
//   - a crash: DropUnsyncedData() throws away everything not made durable: bytes written to a
//     file since its last Sync() read as zeros afterwards, the file shrinks back to its size at
//     that Sync(), and files created since the last SyncDir() of their directory vanish. Use it on an Env that keeps state across opens (the in-memory Env or real
//     files). SetActive(false) first makes the wrapped Env refuse all writes, as a dead process
//     would, so that destructors cannot write after the simulated crash.
//
// Removals are not undone by a crash. Asynchronous I/O runs synchronously through the wrapped
// files.
//
// Thread safety: thread-safe.

#ifndef KVTIER_ENV_FAULT_INJECTION_ENV_H_
#define KVTIER_ENV_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "kvtier/env.h"
#include "src/common/mutex.h"

namespace kvtier {

class FaultInjectionEnv final : public Env {
 public:
  enum class Op { kRead, kWrite, kSync };

  // A rule: after `skip` matching operations pass, the next `count` matching ones fail with
  // `error`. An empty `path_filter` matches every path.
  struct Fault {
    Op op = Op::kWrite;
    Status error = Status::Unavailable("injected EIO");
    uint64_t skip = 0;
    uint64_t count = UINT64_MAX;
    std::function<bool(const std::string& path)> path_filter;
  };

  // `base` is not owned and must outlive this Env.
  explicit FaultInjectionEnv(Env* base) : base_(base) {}

  void AddFault(Fault fault) ABSL_LOCKS_EXCLUDED(mu_);
  void ClearFaults() ABSL_LOCKS_EXCLUDED(mu_);
  // While full, writes and file creation fail with ResourceExhausted (ENOSPC).
  void SetFilesystemFull(bool full) ABSL_LOCKS_EXCLUDED(mu_);
  // While inactive, every write, sync, creation, removal and rename fails with Unavailable.
  void SetActive(bool active) ABSL_LOCKS_EXCLUDED(mu_);
  // Simulates power loss: see the header comment. Reactivates the Env.
  [[nodiscard]] Status DropUnsyncedData() ABSL_LOCKS_EXCLUDED(mu_);
  // Operations failed by injection so far.
  uint64_t injected_failures() const ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t NowMicros() override { return base_->NowMicros(); }
  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override;
  Status CreateDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;
  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;
  Result<std::unique_ptr<IoQueue>> NewIoQueue(uint32_t depth, bool use_io_uring) override;
  void Log(std::string_view message) override { base_->Log(message); }

  // Used by the wrapped files. OK, or the injected error for this operation.
  Status MaybeFail(Op op, const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);
  void RecordWrite(const std::string& path, uint64_t offset, uint64_t length)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RecordSync(const std::string& path, uint64_t size) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct FileState {
    uint64_t synced_size = 0;
    bool dir_synced = false;  // The file's creation survives a crash.
    std::vector<std::pair<uint64_t, uint64_t>> unsynced;  // (offset, length) since the sync.
  };

  Env* const base_;
  mutable Mutex mu_;
  std::vector<Fault> faults_ ABSL_GUARDED_BY(mu_);
  bool full_ ABSL_GUARDED_BY(mu_) = false;
  bool active_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_ENV_FAULT_INJECTION_ENV_H_
