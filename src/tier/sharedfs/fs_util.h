// Small POSIX helpers for the shared file system tier: errno to Status, whole-file reads and
// writes, directory listing and creation, and the operations the Env interface does not have
// (stat with mtime, hard links, utimensat). Every path is absolute.
//
// Thread safety: stateless functions.

#ifndef KVTIER_SRC_TIER_SHAREDFS_FS_UTIL_H_
#define KVTIER_SRC_TIER_SHAREDFS_FS_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::sharedfs {

// Maps errno `err` for an operation on `path`: ENOENT NotFound, ENOSPC/EDQUOT/EFBIG
// ResourceExhausted, EROFS/EACCES/EPERM PermissionDenied, EEXIST AlreadyExists, anything else
// Unavailable. The message names the operation, the path and the system error.
Status ErrnoStatus(int err, std::string_view op, const std::string& path);

struct FileInfo {
  uint64_t size = 0;
  uint64_t mtime_us = 0;
  uint64_t inode = 0;
  bool is_dir = false;
};

Result<FileInfo> Stat(const std::string& path);

// Creates `path` and every missing parent; OK when it exists.
Status MakeDirs(const std::string& path);

// Names of the entries of a directory, without "." and "..".
Result<std::vector<std::string>> ListDir(const std::string& path);

// Writes `data` followed by `tail` to a new file `path` (O_EXCL; one pwritev, so that a header
// and a payload held apart need not be copied together), sets its mtime to `mtime_us` when
// given, and fsyncs it when `sync`. On error the file is removed.
Status WriteNewFile(const std::string& path, std::span<const std::byte> data, bool sync,
                    std::optional<uint64_t> mtime_us, std::span<const std::byte> tail = {});

// Reads the whole file, or its first `max_bytes` bytes. *info receives fstat of the open file.
Result<std::vector<std::byte>> ReadFile(const std::string& path, size_t max_bytes,
                                        FileInfo* info);

// A file opened for positional reads; closed on destruction.
class ReadOnlyFile {
 public:
  // NotFound when absent; *info-style metadata from fstat of the open file.
  static Result<std::unique_ptr<ReadOnlyFile>> Open(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const FileInfo& info() const { return info_; }
  // Reads up to out.size() bytes at `offset`; fewer only at the end of the file.
  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> out);

 private:
  ReadOnlyFile(int fd, std::string path, FileInfo info)
      : fd_(fd), path_(std::move(path)), info_(info) {}
  const int fd_;
  const std::string path_;
  const FileInfo info_;
};

// Sets the modification (and access) time: to the file system's own clock (on NFS the
// server's) when `mtime_us` is nullopt, else to that time.
Status Touch(const std::string& path, std::optional<uint64_t> mtime_us);

Status RemoveFile(const std::string& path);  // OK when absent.
// rename(2); NotFound when `from` is absent.
Status Rename(const std::string& from, const std::string& to);
Status RemoveDir(const std::string& path);   // Empty directories only; OK when absent.

// Publishes `from` as `to` unless `to` exists: link(2), so exactly one object survives
// concurrent publishers. *published is false when `to` already existed. File systems without
// hard links fall back to rename(2), which replaces an existing `to` (harmless for
// content-addressed, immutable objects: the bytes are the same). `from` still exists after
// a link and must be removed by the caller.
Status Publish(const std::string& from, const std::string& to, bool* published);

// Parent directory of a path ("/a/b/c" -> "/a/b").
std::string Dirname(const std::string& path);

}  // namespace kvtier::sharedfs

#endif  // KVTIER_SRC_TIER_SHAREDFS_FS_UTIL_H_
