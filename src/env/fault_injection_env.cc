#include "src/env/fault_injection_env.h"

#include <algorithm>
#include <utility>

#include "src/env/sync_io_queue.h"

namespace kvtier {
namespace {

std::string ParentDir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

class FaultFile final : public File {
 public:
  FaultFile(FaultInjectionEnv* env, std::unique_ptr<File> base)
      : env_(env), base_(std::move(base)) {}

  Status Read(uint64_t offset, std::span<std::byte> out, size_t* bytes_read) override {
    *bytes_read = 0;
    KVTIER_RETURN_IF_ERROR(env_->MaybeFail(FaultInjectionEnv::Op::kRead, path()));
    return base_->Read(offset, out, bytes_read);
  }
  Status Write(uint64_t offset, std::span<const std::byte> data) override {
    KVTIER_RETURN_IF_ERROR(env_->MaybeFail(FaultInjectionEnv::Op::kWrite, path()));
    KVTIER_RETURN_IF_ERROR(base_->Write(offset, data));
    env_->RecordWrite(path(), offset, data.size());
    return Status::OK();
  }
  Status Sync() override {
    KVTIER_RETURN_IF_ERROR(env_->MaybeFail(FaultInjectionEnv::Op::kSync, path()));
    KVTIER_RETURN_IF_ERROR(base_->Sync());
    Result<uint64_t> size = base_->Size();
    if (!size.ok()) return size.status();
    env_->RecordSync(path(), *size);
    return Status::OK();
  }
  Status Truncate(uint64_t size) override {
    KVTIER_RETURN_IF_ERROR(env_->MaybeFail(FaultInjectionEnv::Op::kWrite, path()));
    return base_->Truncate(size);
  }
  Status Allocate(uint64_t size) override {
    KVTIER_RETURN_IF_ERROR(env_->MaybeFail(FaultInjectionEnv::Op::kWrite, path()));
    return base_->Allocate(size);
  }
  Result<uint64_t> Size() override { return base_->Size(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<File> base_;
};

}  // namespace

void FaultInjectionEnv::AddFault(Fault fault) {
  MutexLock l(&mu_);
  faults_.push_back(std::move(fault));
}

void FaultInjectionEnv::ClearFaults() {
  MutexLock l(&mu_);
  faults_.clear();
}

void FaultInjectionEnv::SetFilesystemFull(bool full) {
  MutexLock l(&mu_);
  full_ = full;
}

void FaultInjectionEnv::SetActive(bool active) {
  MutexLock l(&mu_);
  active_ = active;
}

uint64_t FaultInjectionEnv::injected_failures() const {
  MutexLock l(&mu_);
  return injected_;
}

Status FaultInjectionEnv::MaybeFail(Op op, const std::string& path) {
  MutexLock l(&mu_);
  if (!active_ && op != Op::kRead) return Status::Unavailable("simulated crash: " + path);
  if (full_ && op == Op::kWrite) {
    ++injected_;
    return Status::ResourceExhausted("injected ENOSPC: " + path);
  }
  for (Fault& f : faults_) {
    if (f.op != op || f.count == 0) continue;
    if (f.path_filter && !f.path_filter(path)) continue;
    if (f.skip > 0) {
      --f.skip;
      continue;
    }
    if (f.count != UINT64_MAX) --f.count;
    ++injected_;
    return Status(f.error.code(), std::string(f.error.message()) + ": " + path);
  }
  return Status::OK();
}

void FaultInjectionEnv::RecordWrite(const std::string& path, uint64_t offset, uint64_t length) {
  MutexLock l(&mu_);
  files_[path].unsynced.emplace_back(offset, length);
}

void FaultInjectionEnv::RecordSync(const std::string& path, uint64_t size) {
  MutexLock l(&mu_);
  FileState& state = files_[path];
  state.synced_size = size;
  state.unsynced.clear();
}

Result<std::unique_ptr<File>> FaultInjectionEnv::OpenFile(const std::string& path,
                                                          const FileOptions& options) {
  {
    MutexLock l(&mu_);
    if (!files_.contains(path)) {
      Result<std::unique_ptr<File>> existing = base_->OpenFile(path, FileOptions{});
      if (existing.ok()) {
        Result<uint64_t> size = (*existing)->Size();
        files_[path] = FileState{size.ok() ? *size : 0, true, {}};
      } else if (options.create) {
        if (!active_) return Status::Unavailable("simulated crash: " + path);
        if (full_) {
          ++injected_;
          return Status::ResourceExhausted("injected ENOSPC: " + path);
        }
        files_[path] = FileState{0, false, {}};
      }
    }
    if (options.truncate && !active_) return Status::Unavailable("simulated crash: " + path);
  }
  Result<std::unique_ptr<File>> file = base_->OpenFile(path, options);
  if (!file.ok()) return file.status();
  return std::unique_ptr<File>(new FaultFile(this, std::move(file).value()));
}

Status FaultInjectionEnv::CreateDir(const std::string& path) { return base_->CreateDir(path); }

Result<std::vector<std::string>> FaultInjectionEnv::ListDir(const std::string& path) {
  return base_->ListDir(path);
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  {
    MutexLock l(&mu_);
    if (!active_) return Status::Unavailable("simulated crash: " + path);
    files_.erase(path);
  }
  return base_->RemoveFile(path);
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  {
    MutexLock l(&mu_);
    if (!active_) return Status::Unavailable("simulated crash: " + from);
    auto it = files_.find(from);
    if (it != files_.end()) {
      FileState state = it->second;
      state.dir_synced = false;
      files_.erase(it);
      files_[to] = state;
    }
  }
  return base_->RenameFile(from, to);
}

Status FaultInjectionEnv::SyncDir(const std::string& path) {
  KVTIER_RETURN_IF_ERROR(MaybeFail(Op::kSync, path));
  KVTIER_RETURN_IF_ERROR(base_->SyncDir(path));
  MutexLock l(&mu_);
  for (auto& [p, state] : files_) {
    if (ParentDir(p) == path) state.dir_synced = true;
  }
  return Status::OK();
}

Result<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(const std::string& path) {
  return base_->LockFile(path);
}

Result<std::unique_ptr<IoQueue>> FaultInjectionEnv::NewIoQueue(uint32_t depth, bool) {
  return NewSyncIoQueue(depth);
}

Status FaultInjectionEnv::DropUnsyncedData() {
  std::map<std::string, FileState> files;
  {
    MutexLock l(&mu_);
    files.swap(files_);
    active_ = true;
  }
  for (const auto& [path, state] : files) {
    if (!state.dir_synced) {
      Status s = base_->RemoveFile(path);
      if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
      continue;
    }
    Result<std::unique_ptr<File>> file = base_->OpenFile(path, FileOptions{});
    if (!file.ok()) {
      if (file.status().code() == StatusCode::kNotFound) continue;
      return file.status();
    }
    Result<uint64_t> size = (*file)->Size();
    if (!size.ok()) return size.status();
    if (*size > state.synced_size) KVTIER_RETURN_IF_ERROR((*file)->Truncate(state.synced_size));
    for (const auto& [offset, length] : state.unsynced) {
      if (offset >= state.synced_size) continue;
      const std::vector<std::byte> zeros(std::min(length, state.synced_size - offset));
      KVTIER_RETURN_IF_ERROR((*file)->Write(offset, zeros));
    }
  }
  return Status::OK();
}

}  // namespace kvtier
