// Env: kvtier's window on the operating system. Every clock read, file and directory operation
// and asynchronous I/O goes through an Env, so that tests run on simulated time, on an
// in-memory file system, or with injected faults (src/env/fault_injection_env.h).
//
// Thread safety: implementations must be safe to call from any thread. A File may be used by
// several threads at once (positional I/O has no shared cursor). An IoQueue is used by one
// thread at a time.

#ifndef KVTIER_ENV_H_
#define KVTIER_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// Offsets, lengths and buffer addresses of direct I/O are multiples of this.
inline constexpr size_t kDirectIoAlignment = 4096;

struct FileOptions {
  bool create = false;     // Create the file when absent.
  bool truncate = false;   // Empty it on open.
  // O_DIRECT: bypass the page cache. REQUIRES for every I/O: offset, length and buffer address
  // aligned to kDirectIoAlignment (an unaligned request fails with InvalidArgument).
  bool direct_io = false;
};

// An open file with positional I/O. Closed on destruction.
class File {
 public:
  virtual ~File() = default;

  // Reads up to out.size() bytes at `offset`; *bytes_read is less than out.size() only at the
  // end of the file.
  [[nodiscard]] virtual Status Read(uint64_t offset, std::span<std::byte> out,
                                    size_t* bytes_read) = 0;
  // Writes all of `data` at `offset`, extending the file when needed.
  [[nodiscard]] virtual Status Write(uint64_t offset, std::span<const std::byte> data) = 0;
  // fdatasync: data written so far, and the file size, survive power loss once this returns OK.
  // After a failed Sync the state of unsynced data is unknown.
  [[nodiscard]] virtual Status Sync() = 0;
  [[nodiscard]] virtual Status Truncate(uint64_t size) = 0;
  // Reserves disk blocks for the first `size` bytes and makes the file at least that long
  // (fallocate mode 0; the new bytes read as zeros). Direct writes inside the file's size then
  // need no size update, which on ext4 lets them run in parallel instead of one at a time.
  // ResourceExhausted when the file system is full; Unimplemented when it cannot preallocate.
  [[nodiscard]] virtual Status Allocate(uint64_t size) = 0;
  [[nodiscard]] virtual Result<uint64_t> Size() = 0;
  virtual const std::string& path() const = 0;
};

// An exclusive advisory lock on a file, held until destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

// One asynchronous positional read or write. The buffer must stay valid until the operation's
// completion has been returned.
struct IoOp {
  File* file = nullptr;  // Opened by the same Env as the queue.
  bool write = false;
  uint64_t offset = 0;
  std::span<std::byte> buffer;  // Written from (write) or read into (read).
  uint64_t tag = 0;             // Returned with the completion.
};

struct IoCompletion {
  uint64_t tag = 0;
  Status status;      // A short read at end of file is OK with fewer bytes.
  size_t bytes = 0;   // Bytes transferred.
};

// A queue of asynchronous I/Os with at most depth() in flight (io_uring, or synchronous
// pread/pwrite where io_uring is unavailable). Used by one thread at a time.
class IoQueue {
 public:
  virtual ~IoQueue() = default;
  // Starts `op`. When depth() operations are already in flight, first waits for at least one to
  // finish. Completions reaped meanwhile are appended to *done. A non-OK status means the
  // operation was not started (and no completion for it will come).
  [[nodiscard]] virtual Status Submit(const IoOp& op, std::vector<IoCompletion>* done) = 0;
  // Waits until nothing is in flight; appends every remaining completion to *done.
  virtual void WaitAll(std::vector<IoCompletion>* done) = 0;
  // Waits until at least one operation has finished and appends what has; returns false at
  // once when nothing is in flight. Lets a caller work on early completions while the rest
  // are still in flight.
  virtual bool WaitSome(std::vector<IoCompletion>* done) = 0;
  virtual uint32_t depth() const = 0;
  virtual bool is_io_uring() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide default Env, backed by the operating system. Never deleted.
  static Env* Default();

  // Wall-clock time in microseconds since the Unix epoch. Used for TTLs, which must mean the
  // same thing after a restart, so this is not a monotonic clock.
  virtual uint64_t NowMicros() = 0;

  // File system. The defaults forward to Env::Default(), so an Env that only overrides the
  // clock still reaches the operating system's files. Errors: NotFound for a missing path,
  // ResourceExhausted for ENOSPC/EDQUOT, PermissionDenied, Unavailable for EIO and other I/O
  // errors; the message names the path and the system error.
  [[nodiscard]] virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path,
                                                               const FileOptions& options);
  // Creates the directory (not its parents); OK when it exists.
  [[nodiscard]] virtual Status CreateDir(const std::string& path);
  // Names (not paths) of the entries of a directory, without "." and "..".
  [[nodiscard]] virtual Result<std::vector<std::string>> ListDir(const std::string& path);
  [[nodiscard]] virtual Status RemoveFile(const std::string& path);
  [[nodiscard]] virtual Status RenameFile(const std::string& from, const std::string& to);
  // fsync on a directory: creations, removals and renames in it survive power loss.
  [[nodiscard]] virtual Status SyncDir(const std::string& path);
  // Takes an exclusive lock on `path` (created when absent). FailedPrecondition when another
  // process, or another lock of this process, holds it.
  [[nodiscard]] virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path);
  // A queue with at most `depth` (>= 1) I/Os in flight; io_uring when `use_io_uring` and the
  // kernel allows it, else synchronous pread/pwrite (said once in the log).
  [[nodiscard]] virtual Result<std::unique_ptr<IoQueue>> NewIoQueue(uint32_t depth,
                                                                    bool use_io_uring);

  // One line to the operator's log (stderr by default).
  virtual void Log(std::string_view message);
};

}  // namespace kvtier

#endif  // KVTIER_ENV_H_
