#include "src/engine/demoter.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "src/engine/contiguous_bytes.h"

namespace kvtier {
namespace {
constexpr size_t kBatch = 32;
}  // namespace

Demoter::Demoter(MemoryTier* memory, DiskTier* disk, SharedUploader* uploader)
    : memory_(memory), disk_(disk), uploader_(uploader), thread_([this] { Run(); }) {}

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
      std::vector<std::vector<std::byte>> joined;  // Blocks stored in several pieces.
      std::vector<std::span<const std::byte>> values;
      joined.reserve(end - begin);
      for (size_t i = begin; i < end; ++i) {
        const MemoryTier::Demotion& d = batch[i];
        values.push_back(ContiguousBytes(d.spans, &joined));
        // A block G3 holds already (it was read from there) is not written again: flash
        // endurance. Its copy there is the same bytes.
        if (disk_ != nullptr && disk_->BlockSize(tenant, d.key).ok()) {
          disk_skipped_.fetch_add(1, std::memory_order_relaxed);
        } else if (disk_ != nullptr) {
          disk_index[i - begin] = requests.size();
          requests.push_back({d.key, values.back(), d.meta.session, d.meta.created_us, d.meta.dtype});
        }
      }
      std::vector<Status> on_disk;
      if (!requests.empty()) {
        disk_writes_.fetch_add(1, std::memory_order_relaxed);
        on_disk = disk_->PutMany(tenant, requests);
      }
      for (size_t i = begin; i < end; ++i) {
        const MemoryTier::Demotion& d = batch[i];
        // A block read from G4 is there already: uploading it again would only cost.
        const bool in_shared = uploader_ != nullptr && d.meta.in_shared;
        if (in_shared) shared_skipped_.fetch_add(1, std::memory_order_relaxed);
        const bool staged = uploader_ != nullptr && !in_shared &&
                            uploader_->Stage(tenant, {d.key, values[i - begin], d.meta.session,
                                                      d.meta.created_us, d.meta.dtype});
        const size_t k = disk_index[i - begin];
        const bool on_g3 = disk_ != nullptr && (k == SIZE_MAX || on_disk[k].ok());
        (on_g3 || in_shared || staged ? demoted_ : failures_)
            .fetch_add(1, std::memory_order_relaxed);
        memory_->FinishDemotion(d.entry);
      }
      begin = end;
    }
  }
}

}  // namespace kvtier
