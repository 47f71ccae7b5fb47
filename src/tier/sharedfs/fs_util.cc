#include "src/tier/sharedfs/fs_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace kvtier::sharedfs {
namespace {

uint64_t MtimeUs(const struct stat& st) {
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000u +
         static_cast<uint64_t>(st.st_mtim.tv_nsec) / 1000u;
}

FileInfo InfoOf(const struct stat& st) {
  FileInfo info;
  info.size = static_cast<uint64_t>(st.st_size);
  info.mtime_us = MtimeUs(st);
  info.inode = static_cast<uint64_t>(st.st_ino);
  info.is_dir = S_ISDIR(st.st_mode);
  return info;
}

struct timespec ToTimespec(uint64_t us) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(us / 1000000u);
  ts.tv_nsec = static_cast<long>((us % 1000000u) * 1000u);
  return ts;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // close(2) reports deferred write errors on NFS; returns its errno (0 = OK).
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace

Status ErrnoStatus(int err, std::string_view op, const std::string& path) {
  std::string msg = std::string(op) + " " + path + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::NotFound(msg);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return Status::ResourceExhausted(msg);
    case EROFS:
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(msg);
    case EEXIST:
      return Status::AlreadyExists(msg);
    case ETIMEDOUT:
      return Status::DeadlineExceeded(msg);
    default:
      return Status::Unavailable(msg);
  }
}

Result<FileInfo> Stat(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  return InfoOf(st);
}

Status MakeDirs(const std::string& path) {
  if (path.empty() || path == "/") return Status::OK();
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::OK();
  if (errno != ENOENT) return ErrnoStatus(errno, "mkdir", path);
  KVTIER_RETURN_IF_ERROR(MakeDirs(Dirname(path)));
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::OK();
  return ErrnoStatus(errno, "mkdir", path);
}

Result<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoStatus(errno, "opendir", path);
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
    errno = 0;
  }
  const int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoStatus(err, "readdir", path);
  return names;
}

Status WriteNewFile(const std::string& path, std::span<const std::byte> data, bool sync,
                    std::optional<uint64_t> mtime_us, std::span<const std::byte> tail) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoStatus(errno, "create", path);
  auto fail = [&](int err, std::string_view op) {
    ::unlink(path.c_str());
    return ErrnoStatus(err, op, path);
  };
  const size_t total = data.size() + tail.size();
  size_t done = 0;
  while (done < total) {
    // What is left of data, then of tail.
    iovec iov[2];
    int count = 0;
    size_t offset = done;
    for (std::span<const std::byte> part : {data, tail}) {
      if (offset >= part.size()) {
        offset -= part.size();
        continue;
      }
      iov[count].iov_base = const_cast<std::byte*>(part.data() + offset);
      iov[count].iov_len = part.size() - offset;
      ++count;
      offset = 0;
    }
    const ssize_t n = ::pwritev(fd.get(), iov, count, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno, "write");
    }
    done += static_cast<size_t>(n);
  }
  if (mtime_us) {
    const struct timespec times[2] = {ToTimespec(*mtime_us), ToTimespec(*mtime_us)};
    if (::futimens(fd.get(), times) != 0) return fail(errno, "futimens");
  }
  if (sync && ::fsync(fd.get()) != 0) return fail(errno, "fsync");
  if (const int err = fd.Close(); err != 0) return fail(err, "close");
  return Status::OK();
}

Result<std::vector<std::byte>> ReadFile(const std::string& path, size_t max_bytes,
                                        FileInfo* info) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, "open", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "fstat", path);
  *info = InfoOf(st);
  const size_t want = std::min<uint64_t>(info->size, max_bytes);
  std::vector<std::byte> out(want);
  size_t done = 0;
  while (done < want) {
    const ssize_t n =
        ::pread(fd.get(), out.data() + done, want - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path);
    }
    if (n == 0) break;  // Shrank since fstat: the decoder reports the truncation.
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

Result<std::unique_ptr<ReadOnlyFile>> ReadOnlyFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "fstat", path);
  }
  return std::unique_ptr<ReadOnlyFile>(new ReadOnlyFile(fd, path, InfoOf(st)));
}

ReadOnlyFile::~ReadOnlyFile() { ::close(fd_); }

Result<size_t> ReadOnlyFile::ReadAt(uint64_t offset, std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done,
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path_);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Status Touch(const std::string& path, std::optional<uint64_t> mtime_us) {
  int rc;
  if (mtime_us) {
    const struct timespec times[2] = {ToTimespec(*mtime_us), ToTimespec(*mtime_us)};
    rc = ::utimensat(AT_FDCWD, path.c_str(), times, 0);
  } else {
    rc = ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  }
  if (rc != 0) return ErrnoStatus(errno, "utimensat", path);
  return Status::OK();
}

Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return Status::OK();
  return ErrnoStatus(errno, "unlink", path);
}

Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return Status::OK();
  return ErrnoStatus(errno, "rename", from);
}

Status RemoveDir(const std::string& path) {
  if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return Status::OK();
  return ErrnoStatus(errno, "rmdir", path);
}

Status Publish(const std::string& from, const std::string& to, bool* published) {
  *published = false;
  if (::link(from.c_str(), to.c_str()) == 0) {
    *published = true;
    return Status::OK();
  }
  const int err = errno;
  if (err == EEXIST) return Status::OK();
  if (err == EPERM || err == EOPNOTSUPP || err == EMLINK) {
    if (::rename(from.c_str(), to.c_str()) == 0) {
      *published = true;
      return Status::OK();
    }
    return ErrnoStatus(errno, "rename", to);
  }
  return ErrnoStatus(err, "link", to);
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace kvtier::sharedfs
