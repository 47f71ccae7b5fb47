#include "src/env/io_uring.h"

#include <liburing.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "src/env/posix_file.h"

namespace kvtier {
namespace {

class IoUringQueue final : public IoQueue {
 public:
  explicit IoUringQueue(uint32_t depth) : depth_(depth), slots_(depth) {
    for (uint32_t i = 0; i < depth; ++i) free_slots_.push_back(depth - 1 - i);
  }
  ~IoUringQueue() override {
    std::vector<IoCompletion> ignored;
    if (!initialized_) return;
    WaitAll(&ignored);
    io_uring_queue_exit(&ring_);
  }
  IoUringQueue(const IoUringQueue&) = delete;
  IoUringQueue& operator=(const IoUringQueue&) = delete;

  Status Init() {
    int rc = io_uring_queue_init(depth_, &ring_, 0);
    if (rc < 0) return PosixError("io_uring_queue_init", "", -rc);
    initialized_ = true;
    return Status::OK();
  }

  Status Submit(const IoOp& op, std::vector<IoCompletion>* done) override {
    auto* file = dynamic_cast<PosixFile*>(op.file);
    if (file == nullptr) return Status::InvalidArgument("io_uring queue needs a posix file");
    if (file->direct()) {
      KVTIER_RETURN_IF_ERROR(
          CheckDirectIo(file->path(), op.offset, op.buffer.data(), op.buffer.size()));
    }
    while (free_slots_.empty()) Reap(/*wait=*/true, done);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return Status::Internal("io_uring submission queue full");
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = Slot{op.tag, op.buffer.size(), op.write, file};
    const auto len = static_cast<unsigned>(op.buffer.size());
    if (op.write) {
      io_uring_prep_write(sqe, file->fd(), op.buffer.data(), len, op.offset);
    } else {
      io_uring_prep_read(sqe, file->fd(), op.buffer.data(), len, op.offset);
    }
    io_uring_sqe_set_data64(sqe, slot);
    int rc = io_uring_submit(&ring_);
    if (rc < 0) {
      free_slots_.push_back(slot);
      return PosixError("io_uring_submit", file->path(), -rc);
    }
    ++in_flight_;
    Reap(/*wait=*/false, done);
    return Status::OK();
  }

  void WaitAll(std::vector<IoCompletion>* done) override {
    while (in_flight_ > 0) Reap(/*wait=*/true, done);
  }
  bool WaitSome(std::vector<IoCompletion>* done) override {
    if (in_flight_ == 0) return false;
    Reap(/*wait=*/true, done);
    return true;
  }
  uint32_t depth() const override { return depth_; }
  bool is_io_uring() const override { return true; }

 private:
  struct Slot {
    uint64_t tag = 0;
    size_t length = 0;
    bool write = false;
    PosixFile* file = nullptr;
  };

  // Collects finished operations; with `wait`, blocks until at least one has finished.
  void Reap(bool wait, std::vector<IoCompletion>* done) {
    io_uring_cqe* cqe = nullptr;
    if (wait && in_flight_ > 0) {
      int rc;
      do {
        rc = io_uring_wait_cqe(&ring_, &cqe);
      } while (rc == -EINTR);
    }
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      const auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      const Slot& s = slots_[slot];
      IoCompletion c;
      c.tag = s.tag;
      if (cqe->res < 0) {
        c.status = PosixError(s.write ? "io_uring write" : "io_uring read", s.file->path(),
                              -cqe->res);
      } else {
        c.bytes = static_cast<size_t>(cqe->res);
        if (s.write && c.bytes != s.length) {
          c.status = Status::Unavailable("short write to " + s.file->path());
        }
      }
      io_uring_cqe_seen(&ring_, cqe);
      free_slots_.push_back(slot);
      --in_flight_;
      done->push_back(std::move(c));
    }
  }

  const uint32_t depth_;
  io_uring ring_{};
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  uint32_t in_flight_ = 0;
  bool initialized_ = false;
};

}  // namespace

Result<std::unique_ptr<IoQueue>> NewIoUringQueue(uint32_t depth) {
  auto queue = std::make_unique<IoUringQueue>(std::max<uint32_t>(depth, 1));
  KVTIER_RETURN_IF_ERROR(queue->Init());
  return std::unique_ptr<IoQueue>(std::move(queue));
}

}  // namespace kvtier
