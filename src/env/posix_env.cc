#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "kvtier/env.h"
#include "src/env/io_uring.h"
#include "src/env/posix_file.h"
#include "src/env/sync_io_queue.h"

namespace kvtier {

Status PosixError(std::string_view what, const std::string& path, int err) {
  std::string msg(what);
  if (!path.empty()) msg += " " + path;
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT: return Status::NotFound(msg);
    case ENOSPC:
    case EDQUOT: return Status::ResourceExhausted(msg);
    case EACCES:
    case EPERM: return Status::PermissionDenied(msg);
    case EINVAL: return Status::InvalidArgument(msg);
    default: return Status::Unavailable(msg);
  }
}

Status CheckDirectIo(const std::string& path, uint64_t offset, const void* data, size_t size) {
  if (offset % kDirectIoAlignment != 0 || size % kDirectIoAlignment != 0 ||
      reinterpret_cast<uintptr_t>(data) % kDirectIoAlignment != 0) {
    return Status::InvalidArgument("unaligned direct I/O on " + path + " at offset " +
                                   std::to_string(offset) + ", " + std::to_string(size) +
                                   " bytes");
  }
  return Status::OK();
}

PosixFile::~PosixFile() { ::close(fd_); }

Status PosixFile::Read(uint64_t offset, std::span<std::byte> out, size_t* bytes_read) {
  *bytes_read = 0;
  if (direct_) KVTIER_RETURN_IF_ERROR(CheckDirectIo(path_, offset, out.data(), out.size()));
  while (*bytes_read < out.size()) {
    ssize_t n = ::pread(fd_, out.data() + *bytes_read, out.size() - *bytes_read,
                        static_cast<off_t>(offset + *bytes_read));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError("pread", path_, errno);
    }
    if (n == 0) break;
    *bytes_read += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status PosixFile::Write(uint64_t offset, std::span<const std::byte> data) {
  if (direct_) KVTIER_RETURN_IF_ERROR(CheckDirectIo(path_, offset, data.data(), data.size()));
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::pwrite(fd_, data.data() + written, data.size() - written,
                         static_cast<off_t>(offset + written));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError("pwrite", path_, errno);
    }
    written += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status PosixFile::Sync() {
  if (::fdatasync(fd_) != 0) return PosixError("fdatasync", path_, errno);
  return Status::OK();
}

Status PosixFile::Truncate(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return PosixError("ftruncate", path_, errno);
  return Status::OK();
}

Status PosixFile::Allocate(uint64_t size) {
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(size)) != 0) {
    if (errno == EOPNOTSUPP) return Status::Unimplemented("fallocate unsupported on " + path_);
    return PosixError("fallocate", path_, errno);
  }
  return Status::OK();
}

Result<uint64_t> PosixFile::Size() {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return PosixError("fstat", path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

namespace {

class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  PosixFileLock(const PosixFileLock&) = delete;
  PosixFileLock& operator=(const PosixFileLock&) = delete;

 private:
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  uint64_t NowMicros() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }

  Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                         const FileOptions& options) override {
    int flags = O_RDWR | O_CLOEXEC;
    if (options.create) flags |= O_CREAT;
    if (options.truncate) flags |= O_TRUNC;
    if (options.direct_io) flags |= O_DIRECT;
    int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return PosixError("open", path, errno);
    return std::unique_ptr<File>(new PosixFile(fd, path, options.direct_io));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return PosixError("mkdir", path, errno);
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError("stat", path, errno);
    if (!S_ISDIR(st.st_mode)) return Status::FailedPrecondition(path + " is not a directory");
    return Status::OK();
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return PosixError("opendir", path, errno);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(dir);
    return names;
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("unlink", path, errno);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return PosixError("rename", from, errno);
    return Status::OK();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open", path, errno);
    Status s;
    if (::fsync(fd) != 0) s = PosixError("fsync", path, errno);
    ::close(fd);
    return s;
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError("open", path, errno);
    // flock locks belong to the open file description, so a second open in this process
    // conflicts too, and the kernel drops the lock when the holder dies (even by kill -9).
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return Status::FailedPrecondition(path + " is locked: another process (or another " +
                                          "open in this one) is using the directory");
      }
      return PosixError("flock", path, err);
    }
    return std::unique_ptr<FileLock>(new PosixFileLock(fd));
  }

  Result<std::unique_ptr<IoQueue>> NewIoQueue(uint32_t depth, bool use_io_uring) override {
    if (use_io_uring) {
      Result<std::unique_ptr<IoQueue>> ring = NewIoUringQueue(depth);
      if (ring.ok()) return ring;
      static std::once_flag said;
      std::call_once(said, [&] {
        Log("io_uring unavailable, using pread/pwrite (" + ring.status().ToString() + ")");
      });
    }
    return NewSyncIoQueue(depth);
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();  // Never destroyed: usable during static teardown.
  return env;
}

Result<std::unique_ptr<File>> Env::OpenFile(const std::string& path, const FileOptions& options) {
  return Default()->OpenFile(path, options);
}
Status Env::CreateDir(const std::string& path) { return Default()->CreateDir(path); }
Result<std::vector<std::string>> Env::ListDir(const std::string& path) {
  return Default()->ListDir(path);
}
Status Env::RemoveFile(const std::string& path) { return Default()->RemoveFile(path); }
Status Env::RenameFile(const std::string& from, const std::string& to) {
  return Default()->RenameFile(from, to);
}
Status Env::SyncDir(const std::string& path) { return Default()->SyncDir(path); }
Result<std::unique_ptr<FileLock>> Env::LockFile(const std::string& path) {
  return Default()->LockFile(path);
}
Result<std::unique_ptr<IoQueue>> Env::NewIoQueue(uint32_t depth, bool use_io_uring) {
  return Default()->NewIoQueue(depth, use_io_uring);
}
void Env::Log(std::string_view message) {
  std::fprintf(stderr, "kvtier: %.*s\n", static_cast<int>(message.size()), message.data());
}

}  // namespace kvtier
