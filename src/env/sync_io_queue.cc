#include "src/env/sync_io_queue.h"

#include <algorithm>
#include <utility>

namespace kvtier {
namespace {

class SyncIoQueue final : public IoQueue {
 public:
  explicit SyncIoQueue(uint32_t depth) : depth_(std::max<uint32_t>(depth, 1)) {}

  Status Submit(const IoOp& op, std::vector<IoCompletion>* done) override {
    if (op.file == nullptr) return Status::InvalidArgument("I/O submitted without a file");
    IoCompletion c;
    c.tag = op.tag;
    if (op.write) {
      c.status = op.file->Write(op.offset, op.buffer);
      if (c.status.ok()) c.bytes = op.buffer.size();
    } else {
      c.status = op.file->Read(op.offset, op.buffer, &c.bytes);
    }
    done->push_back(std::move(c));
    return Status::OK();
  }

  void WaitAll(std::vector<IoCompletion>*) override {}
  bool WaitSome(std::vector<IoCompletion>*) override { return false; }
  uint32_t depth() const override { return depth_; }
  bool is_io_uring() const override { return false; }

 private:
  const uint32_t depth_;
};

}  // namespace

std::unique_ptr<IoQueue> NewSyncIoQueue(uint32_t depth) {
  return std::make_unique<SyncIoQueue>(depth);
}

}  // namespace kvtier
