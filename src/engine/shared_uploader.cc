#include "src/engine/shared_uploader.h"

#include <algorithm>

#include "src/engine/contiguous_bytes.h"

namespace kvtier {
namespace {
constexpr size_t kBatch = 32;
}  // namespace

SharedUploader::SharedUploader(MemoryTier* memory, SharedTier* shared,
                               std::vector<std::string> tenant_names, size_t max_queue,
                               uint64_t max_staged_bytes, BlockEventListener* events)
    : memory_(memory),
      shared_(shared),
      tenant_names_(std::move(tenant_names)),
      max_queue_(max_queue),
      max_staged_bytes_(max_staged_bytes),
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
    queue_.push_back({tenant, key, nullptr, 0, 0, std::nullopt});
    ++queued_total_;
  }
  changed_.SignalAll();
}

bool SharedUploader::Stage(uint32_t tenant, const SharedPut& put) {
  const uint64_t size = put.value.size();
  {
    MutexLock l(&mu_);
    if (queue_.size() >= max_queue_ || staged_bytes_ + size > max_staged_bytes_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    staged_bytes_ += size;  // Taken now, so that copies in progress count.
  }
  Item item{tenant, put.key,
            std::make_shared<const std::vector<std::byte>>(put.value.begin(), put.value.end()),
            put.session, put.created_us, put.dtype};
  {
    MutexLock l(&mu_);
    staged_[{tenant, put.key}] = item;
    queue_.push_back(std::move(item));
    ++queued_total_;
  }
  changed_.SignalAll();
  return true;
}

void SharedUploader::Flush() {
  MutexLock l(&mu_);
  const uint64_t target = queued_total_;
  while (done_total_ < target) changed_.Wait(&mu_);
}

void SharedUploader::Cancel(uint32_t tenant, const BlockKey& key) {
  MutexLock l(&mu_);
  const auto same = [&](uint32_t t, const BlockKey& k) { return t == tenant && k == key; };
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!same(it->tenant, it->key)) {
      ++it;
      continue;
    }
    Finished(*it);
    ++done_total_;
    it = queue_.erase(it);
  }
  while (std::any_of(uploading_.begin(), uploading_.end(),
                     [&](const auto& u) { return same(u.first, u.second); })) {
    changed_.Wait(&mu_);
  }
}

std::optional<SharedUploader::StagedBlock> SharedUploader::Staged(uint32_t tenant,
                                                                  const BlockKey& key) const {
  MutexLock l(&mu_);
  const auto it = staged_.find({tenant, key});
  if (it == staged_.end()) return std::nullopt;
  const Item& item = it->second;
  return StagedBlock{item.copy, {item.session, item.created_us, item.dtype}};
}

void SharedUploader::Finished(const Item& item) {
  if (item.copy == nullptr) return;
  staged_bytes_ -= item.copy->size();
  const auto it = staged_.find({item.tenant, item.key});
  if (it != staged_.end() && it->second.copy == item.copy) staged_.erase(it);
}

uint64_t SharedUploader::staged_bytes() const {
  MutexLock l(&mu_);
  return staged_bytes_;
}

void SharedUploader::Run() {
  for (;;) {
    std::vector<Item> batch;
    {
      MutexLock l(&mu_);
      while (queue_.empty() && !stopping_) changed_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopping, and everything queued is done.
      while (!queue_.empty() && batch.size() < kBatch) {
        uploading_.emplace_back(queue_.front().tenant, queue_.front().key);
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // One PutMany per run of the same tenant.
    for (size_t begin = 0; begin < batch.size();) {
      size_t end = begin;
      while (end < batch.size() && batch[end].tenant == batch[begin].tenant) ++end;
      Upload(std::span(batch).subspan(begin, end - begin));
      begin = end;
    }
    {
      MutexLock l(&mu_);
      for (const Item& item : batch) Finished(item);
      done_total_ += batch.size();
      uploading_.clear();
    }
    changed_.SignalAll();
  }
}

void SharedUploader::Upload(std::span<const Item> items) {
  const uint32_t tenant = items.front().tenant;
  std::vector<BlockHandle> leases;
  std::vector<std::vector<std::byte>> joined;  // Blocks G2 stored in several pieces.
  std::vector<SharedPut> puts;
  leases.reserve(items.size());
  joined.reserve(items.size());
  for (const Item& item : items) {
    if (item.copy != nullptr) {
      puts.push_back({item.key, *item.copy, item.session, item.created_us, item.dtype});
      continue;
    }
    BlockMeta meta;
    Result<BlockHandle> lease = memory_->LeaseForCopy(tenant, item.key, &meta);
    if (!lease.ok()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);  // Gone from G2 before its turn.
      continue;
    }
    const std::span<const std::byte> value = ContiguousBytes(lease->extents(), &joined);
    puts.push_back({item.key, value, meta.session, meta.created_us, meta.dtype});
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
