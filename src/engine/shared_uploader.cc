#include "src/engine/shared_uploader.h"

#include "src/engine/contiguous_bytes.h"

namespace kvtier {
namespace {
constexpr size_t kBatch = 32;
}  // namespace

SharedUploader::SharedUploader(MemoryTier* memory, SharedTier* shared,
                               std::vector<std::string> tenant_names, size_t max_queue,
                               BlockEventListener* events)
    : memory_(memory),
      shared_(shared),
      tenant_names_(std::move(tenant_names)),
      max_queue_(max_queue),
      events_(events),
      thread_([this] { Run(); }) {}

SharedUploader::~SharedUploader() {
  {
    MutexLock l(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  thread_.join();
}

void SharedUploader::Enqueue(uint32_t tenant, const BlockKey& key) {
  {
    MutexLock l(&mu_);
    if (queue_.size() >= max_queue_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.emplace_back(tenant, key);
    ++queued_total_;
  }
  changed_.SignalAll();
}

void SharedUploader::Flush() {
  MutexLock l(&mu_);
  const uint64_t target = queued_total_;
  while (done_total_ < target) changed_.Wait(&mu_);
}

void SharedUploader::Run() {
  for (;;) {
    std::vector<std::pair<uint32_t, BlockKey>> batch;
    {
      MutexLock l(&mu_);
      while (queue_.empty() && !stopping_) changed_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopping, and everything queued is done.
      while (!queue_.empty() && batch.size() < kBatch) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    // One PutMany per run of the same tenant.
    for (size_t begin = 0; begin < batch.size();) {
      size_t end = begin;
      std::vector<BlockKey> keys;
      while (end < batch.size() && batch[end].first == batch[begin].first) {
        keys.push_back(batch[end++].second);
      }
      Upload(batch[begin].first, keys);
      begin = end;
    }
    {
      MutexLock l(&mu_);
      done_total_ += batch.size();
    }
    changed_.SignalAll();
  }
}

void SharedUploader::Upload(uint32_t tenant, const std::vector<BlockKey>& keys) {
  std::vector<BlockHandle> leases;
  std::vector<std::vector<std::byte>> joined;  // Blocks G2 stored in several pieces.
  std::vector<SharedPut> puts;
  leases.reserve(keys.size());
  joined.reserve(keys.size());
  for (const BlockKey& key : keys) {
    BlockMeta meta;
    Result<BlockHandle> lease = memory_->LeaseForCopy(tenant, key, &meta);
    if (!lease.ok()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);  // Gone from G2 before its turn.
      continue;
    }
    const std::span<const std::byte> value = ContiguousBytes(lease->extents(), &joined);
    puts.push_back({key, value, meta.session, meta.created_us, meta.dtype});
    leases.push_back(std::move(lease).value());
  }
  if (puts.empty()) return;
  const std::vector<Status> done = shared_->PutMany(tenant_names_[tenant], puts);
  for (size_t i = 0; i < done.size(); ++i) {
    (done[i].ok() ? uploaded_ : failures_).fetch_add(1, std::memory_order_relaxed);
    if (done[i].ok() && events_ != nullptr) {
      events_->OnStored(tenant, puts[i].key, nullptr, BlockMedium::kExternal, nullptr);
    }
  }
}

}  // namespace kvtier
