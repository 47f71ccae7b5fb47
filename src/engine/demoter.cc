#include "src/engine/demoter.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "src/engine/contiguous_bytes.h"

namespace kvtier {
namespace {
constexpr size_t kBatch = 32;
}  // namespace

Demoter::Demoter(MemoryTier* memory, DiskTier* disk, SharedTier* shared,
                 std::vector<std::string> tenant_names, BlockEventListener* events)
    : memory_(memory),
      disk_(disk),
      shared_(shared),
      tenant_names_(std::move(tenant_names)),
      events_(events),
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
      const uint32_t tenant = batch[begin].tenant;
      std::vector<DiskTier::PutRequest> requests;
      std::vector<size_t> disk_index(end - begin, SIZE_MAX);  // Into requests.
      std::vector<SharedPut> shared_puts;
      std::vector<size_t> shared_index(end - begin, SIZE_MAX);  // Into shared_puts.
      std::vector<std::vector<std::byte>> joined;  // Blocks stored in several pieces.
      joined.reserve(end - begin);
      for (size_t i = begin; i < end; ++i) {
        const MemoryTier::Demotion& d = batch[i];
        const std::span<const std::byte> value = ContiguousBytes(d.spans, &joined);
        // A block G3 holds already (it was read from there) is not written again: flash
        // endurance. Its copy there is the same bytes.
        if (disk_ != nullptr && disk_->BlockSize(tenant, d.key).ok()) {
          disk_skipped_.fetch_add(1, std::memory_order_relaxed);
        } else if (disk_ != nullptr) {
          disk_index[i - begin] = requests.size();
          requests.push_back({d.key, value, d.meta.session, d.meta.created_us, d.meta.dtype});
        }
        // A block read from G4 is there already: uploading it again would only cost.
        if (shared_ != nullptr && !d.meta.in_shared) {
          shared_index[i - begin] = shared_puts.size();
          shared_puts.push_back({d.key, value, d.meta.session, d.meta.created_us, d.meta.dtype});
        }
      }
      std::vector<Status> on_disk, on_shared;
      if (!requests.empty()) on_disk = disk_->PutMany(tenant, requests);
      if (!shared_puts.empty()) on_shared = shared_->PutMany(tenant_names_[tenant], shared_puts);
      for (size_t i = begin; i < end; ++i) {
        const size_t s = shared_index[i - begin];
        const bool in_shared = shared_ != nullptr && batch[i].meta.in_shared;
        if (in_shared) shared_skipped_.fetch_add(1, std::memory_order_relaxed);
        const bool uploaded = s != SIZE_MAX && on_shared[s].ok();
        if (uploaded && events_ != nullptr) {
          events_->OnStored(tenant, batch[i].key, nullptr, BlockMedium::kExternal, nullptr);
        }
        const size_t d = disk_index[i - begin];
        const bool on_g3 = disk_ != nullptr && (d == SIZE_MAX || on_disk[d].ok());
        const bool stored = on_g3 || in_shared || uploaded;
        (stored ? demoted_ : failures_).fetch_add(1, std::memory_order_relaxed);
        memory_->FinishDemotion(batch[i].entry);
      }
      begin = end;
    }
  }
}

}  // namespace kvtier
