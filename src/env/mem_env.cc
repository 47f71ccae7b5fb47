#include "src/env/mem_env.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "src/common/mutex.h"
#include "src/env/sync_io_queue.h"

namespace kvtier {
namespace {

struct FileData {
  Mutex mu;
  std::vector<std::byte> bytes ABSL_GUARDED_BY(mu);
};

Status CheckAligned(const std::string& path, uint64_t offset, const void* data, size_t size) {
  if (offset % kDirectIoAlignment != 0 || size % kDirectIoAlignment != 0 ||
      reinterpret_cast<uintptr_t>(data) % kDirectIoAlignment != 0) {
    return Status::InvalidArgument("unaligned direct I/O on " + path);
  }
  return Status::OK();
}

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

class MemFile final : public File {
 public:
  MemFile(std::shared_ptr<FileData> data, std::string path, bool direct)
      : data_(std::move(data)), path_(std::move(path)), direct_(direct) {}

  Status Read(uint64_t offset, std::span<std::byte> out, size_t* bytes_read) override {
    *bytes_read = 0;
    if (direct_) KVTIER_RETURN_IF_ERROR(CheckAligned(path_, offset, out.data(), out.size()));
    MutexLock l(&data_->mu);
    if (offset >= data_->bytes.size()) return Status::OK();
    size_t n = std::min<uint64_t>(out.size(), data_->bytes.size() - offset);
    std::memcpy(out.data(), data_->bytes.data() + offset, n);
    *bytes_read = n;
    return Status::OK();
  }

  Status Write(uint64_t offset, std::span<const std::byte> data) override {
    if (direct_) KVTIER_RETURN_IF_ERROR(CheckAligned(path_, offset, data.data(), data.size()));
    MutexLock l(&data_->mu);
    if (data_->bytes.size() < offset + data.size()) data_->bytes.resize(offset + data.size());
    std::memcpy(data_->bytes.data() + offset, data.data(), data.size());
    return Status::OK();
  }

  Status Sync() override { return Status::OK(); }

  Status Truncate(uint64_t size) override {
    MutexLock l(&data_->mu);
    data_->bytes.resize(size);
    return Status::OK();
  }

  Status Allocate(uint64_t size) override {
    MutexLock l(&data_->mu);
    if (data_->bytes.size() < size) data_->bytes.resize(size);
    return Status::OK();
  }

  Result<uint64_t> Size() override {
    MutexLock l(&data_->mu);
    return static_cast<uint64_t>(data_->bytes.size());
  }

  const std::string& path() const override { return path_; }

 private:
  const std::shared_ptr<FileData> data_;
  const std::string path_;
  const bool direct_;
};

class MemEnv;

class MemFileLock final : public FileLock {
 public:
  MemFileLock(MemEnv* env, std::string path) : env_(env), path_(std::move(path)) {}
  ~MemFileLock() override;

 private:
  MemEnv* const env_;
  const std::string path_;
};

class MemEnv final : public Env {
 public:
  explicit MemEnv(Env* clock) : clock_(clock) {}

  uint64_t NowMicros() override { return clock_->NowMicros(); }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    MutexLock l(&mu_);
    if (!dirs_.contains(Parent(path))) return Status::NotFound("open " + path + ": no directory");
    auto it = files_.find(path);
    if (it == files_.end()) {
      if (!options.create) return Status::NotFound("open " + path + ": no such file");
      it = files_.emplace(path, std::make_shared<FileData>()).first;
    } else if (options.truncate) {
      MutexLock fl(&it->second->mu);
      it->second->bytes.clear();
    }
    return std::unique_ptr<File>(new MemFile(it->second, path, options.direct_io));
  }

  Status CreateDir(const std::string& path) override {
    MutexLock l(&mu_);
    if (files_.contains(path)) return Status::FailedPrecondition(path + " is not a directory");
    dirs_.insert(path);
    return Status::OK();
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    MutexLock l(&mu_);
    if (!dirs_.contains(path)) return Status::NotFound("opendir " + path);
    std::vector<std::string> names;
    for (const auto& [p, data] : files_) {
      if (Parent(p) == path) names.push_back(p.substr(p.rfind('/') + 1));
    }
    return names;
  }

  Status RemoveFile(const std::string& path) override {
    MutexLock l(&mu_);
    if (files_.erase(path) == 0) return Status::NotFound("unlink " + path);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    MutexLock l(&mu_);
    auto it = files_.find(from);
    if (it == files_.end()) return Status::NotFound("rename " + from);
    std::shared_ptr<FileData> data = it->second;
    files_.erase(it);
    files_[to] = std::move(data);
    return Status::OK();
  }

  Status SyncDir(const std::string& path) override {
    MutexLock l(&mu_);
    if (!dirs_.contains(path)) return Status::NotFound("fsync " + path);
    return Status::OK();
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    MutexLock l(&mu_);
    if (!locks_.insert(path).second) {
      return Status::FailedPrecondition(path + " is locked: another process (or another " +
                                        "open in this one) is using the directory");
    }
    if (!files_.contains(path)) files_.emplace(path, std::make_shared<FileData>());
    return std::unique_ptr<FileLock>(new MemFileLock(this, path));
  }

  Result<std::unique_ptr<IoQueue>> NewIoQueue(uint32_t depth, bool) override {
    return NewSyncIoQueue(depth);
  }

  void Unlock(const std::string& path) {
    MutexLock l(&mu_);
    locks_.erase(path);
  }

 private:
  Env* const clock_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<FileData>> files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_) = {"/"};
  std::set<std::string> locks_ ABSL_GUARDED_BY(mu_);
};

MemFileLock::~MemFileLock() { env_->Unlock(path_); }

}  // namespace

std::unique_ptr<Env> NewMemEnv(Env* clock) { return std::make_unique<MemEnv>(clock); }

}  // namespace kvtier
