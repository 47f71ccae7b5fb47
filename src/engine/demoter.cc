#include "src/engine/demoter.h"

#include <utility>
#include <vector>

#include "src/engine/contiguous_bytes.h"

namespace kvtier {
namespace {
constexpr size_t kBatch = 32;
}  // namespace

Demoter::Demoter(MemoryTier* memory, DiskTier* disk, SharedTier* shared,
                 std::vector<std::string> tenant_names)
    : memory_(memory),
      disk_(disk),
      shared_(shared),
      tenant_names_(std::move(tenant_names)),
      thread_([this] { Run(); }) {}

Demoter::~Demoter() {
  memory_->StopDemotion();
  thread_.join();
}

void Demoter::Run() {
  for (;;) {
    std::vector<MemoryTier::Demotion> batch = memory_->TakeDemotions(kBatch);
    if (batch.empty()) return;
    // PutMany takes one tenant at a time; consecutive demotions of a tenant go together.
    for (size_t begin = 0; begin < batch.size();) {
      size_t end = begin;
      while (end < batch.size() && batch[end].tenant == batch[begin].tenant) ++end;
      std::vector<DiskTier::PutRequest> requests;
      std::vector<SharedPut> shared_puts;
      std::vector<std::vector<std::byte>> joined;  // Blocks stored in several pieces.
      joined.reserve(end - begin);
      for (size_t i = begin; i < end; ++i) {
        const MemoryTier::Demotion& d = batch[i];
        const std::span<const std::byte> value = ContiguousBytes(d.spans, &joined);
        requests.push_back({d.key, value, d.meta.session, d.meta.created_us, d.meta.dtype});
        shared_puts.push_back({d.key, value, d.meta.session, d.meta.created_us, d.meta.dtype});
      }
      const uint32_t tenant = batch[begin].tenant;
      std::vector<Status> on_disk, on_shared;
      if (disk_ != nullptr) on_disk = disk_->PutMany(tenant, requests);
      if (shared_ != nullptr) on_shared = shared_->PutMany(tenant_names_[tenant], shared_puts);
      for (size_t i = begin; i < end; ++i) {
        const bool stored = (disk_ != nullptr && on_disk[i - begin].ok()) ||
                            (shared_ != nullptr && on_shared[i - begin].ok());
        (stored ? demoted_ : failures_).fetch_add(1, std::memory_order_relaxed);
        memory_->FinishDemotion(batch[i].entry);
      }
      begin = end;
    }
  }
}

}  // namespace kvtier
