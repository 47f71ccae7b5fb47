// PosixFile: a File on a file descriptor, shared by the posix Env and its io_uring queue.

#ifndef KVTIER_ENV_POSIX_FILE_H_
#define KVTIER_ENV_POSIX_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "kvtier/env.h"

namespace kvtier {

// A Status for the failed system call `what` on `path` with errno `err`: NotFound for ENOENT,
// ResourceExhausted for ENOSPC/EDQUOT, PermissionDenied for EACCES/EPERM, InvalidArgument for
// EINVAL, Unavailable for EIO and everything else.
Status PosixError(std::string_view what, const std::string& path, int err);

// InvalidArgument unless offset, length and address suit O_DIRECT.
Status CheckDirectIo(const std::string& path, uint64_t offset, const void* data, size_t size);

class PosixFile final : public File {
 public:
  // Takes ownership of `fd`.
  PosixFile(int fd, std::string path, bool direct) : fd_(fd), path_(std::move(path)), direct_(direct) {}
  ~PosixFile() override;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  Status Read(uint64_t offset, std::span<std::byte> out, size_t* bytes_read) override;
  Status Write(uint64_t offset, std::span<const std::byte> data) override;
  Status Sync() override;
  Status Truncate(uint64_t size) override;
  Status Allocate(uint64_t size) override;
  Result<uint64_t> Size() override;
  const std::string& path() const override { return path_; }

  int fd() const { return fd_; }
  bool direct() const { return direct_; }

 private:
  const int fd_;
  const std::string path_;
  const bool direct_;
};

}  // namespace kvtier

#endif  // KVTIER_ENV_POSIX_FILE_H_
