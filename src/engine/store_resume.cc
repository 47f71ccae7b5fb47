// StoreImpl: state beside KV (include/kvtier/state.h, docs/state.md): atomic puts of a
// boundary's KV and state values, and the lookup of the longest prefix an engine can resume
// from.

#include <algorithm>
#include <string>
#include <unordered_set>

#include "src/engine/store_impl.h"

namespace kvtier {

Status StoreImpl::CheckWrite(const BlockWrite& w) const {
  KVTIER_RETURN_IF_ERROR(CheckValue(w.value));
  if (w.role != BlockRole::kKv && w.role != BlockRole::kKvNeedsState &&
      w.role != BlockRole::kState) {
    return Status::InvalidArgument("unknown block role " +
                                   std::to_string(static_cast<unsigned>(w.role)));
  }
  if (w.role == BlockRole::kState && !w.parent) {
    return Status::InvalidArgument(
        "a state value needs its block as parent (the block whose key it was derived from)");
  }
  return Status::OK();
}

std::vector<bool> StoreImpl::PresentAnywhere(TenantId tenant, std::span<const BlockKey> keys,
                                             bool access) {
  std::vector<bool> found = memory_->Present(tenant.value, keys, access);
  std::vector<size_t> missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i]) continue;
    const bool on_disk = disk_ && (access ? disk_->LookupPrefix(tenant.value, std::span(&keys[i], 1)) == 1
                                          : disk_->Describe(tenant.value, keys[i]).ok());
    if (on_disk) {
      found[i] = true;
    } else {
      missing.push_back(i);
    }
  }
  if (!shared_ || missing.empty()) return found;
  std::vector<BlockKey> ask;
  ask.reserve(missing.size());
  for (size_t i : missing) ask.push_back(keys[i]);
  std::vector<std::optional<uint64_t>> created = CreatedInShared(tenant, ask);
  const uint64_t now = options_.env->NowMicros();
  for (size_t j = 0; j < missing.size(); ++j) {
    found[missing[j]] = created[j] && !PastMaxAge(tenant, *created[j], now);
  }
  return found;
}

Status StoreImpl::PutAtomic(TenantId tenant, std::span<const BlockWrite> writes) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  std::unordered_set<BlockKey, BlockKeyHasher> in_batch;
  for (const BlockWrite& w : writes) {
    KVTIER_RETURN_IF_ERROR(CheckWrite(w));
    in_batch.insert(w.key);
  }
  // A state value is useless without the KV of its block: that block must come with it or
  // be stored already.
  std::vector<BlockKey> parents;
  for (const BlockWrite& w : writes) {
    if (w.role == BlockRole::kState && !in_batch.contains(*w.parent)) parents.push_back(*w.parent);
  }
  if (!parents.empty()) {
    std::vector<bool> found = PresentAnywhere(tenant, parents, /*access=*/false);
    for (size_t i = 0; i < parents.size(); ++i) {
      if (!found[i]) {
        return Status::FailedPrecondition(
            "state value for block " + parents[i].ToHex() +
            ", which is not stored: put the block with its state values, or before them");
      }
    }
  }
  KVTIER_RETURN_IF_ERROR(memory_->PutAll(tenant.value, writes));
  if (shared_on_put()) {
    for (const BlockWrite& w : writes) uploader_->Enqueue(tenant.value, w.key);
  }
  return Status::OK();
}

Result<ResumeMatch> StoreImpl::LookupResume(TenantId tenant, std::span<const BlockKey> keys,
                                            const ResumeQuery& query) {
  KVTIER_RETURN_IF_ERROR(CheckTenant(tenant));
  const size_t per_block = query.keys_per_block;
  if (per_block == 0 || keys.size() % per_block != 0) {
    return Status::InvalidArgument(std::to_string(keys.size()) + " keys are not whole blocks of " +
                                   std::to_string(per_block) + " keys");
  }
  if (query.groups.size() > kMaxStateGroups) {
    return Status::InvalidArgument("a lookup names at most " + std::to_string(kMaxStateGroups) +
                                   " state groups, got " + std::to_string(query.groups.size()));
  }
  std::unordered_set<std::string_view> names;
  for (const StateGroup& g : query.groups) {
    KVTIER_RETURN_IF_ERROR(ValidateStateGroupName(g.name));
    if (!names.insert(g.name).second) {
      return Status::InvalidArgument("state group '" + g.name + "' is named twice");
    }
  }
  Result<PrefixMatch> kv = LookupPrefix(tenant, keys);
  if (!kv.ok()) return kv.status();
  ResumeMatch m;
  const size_t n = kv->num_blocks / per_block;
  m.kv_blocks = n;
  m.tiers.assign(kv->tiers.begin(), kv->tiers.begin() + static_cast<ptrdiff_t>(n * per_block));

  // ok[L] for L in 1..n: every group allows a resume after block L - 1.
  std::vector<bool> ok(n + 1, true);
  if (n > 0 && !query.groups.empty()) {
    std::vector<BlockKey> state_keys;
    state_keys.reserve(query.groups.size() * n);
    for (const StateGroup& g : query.groups) {
      for (size_t i = 0; i < n; ++i) state_keys.push_back(*StateKey(keys[i * per_block], g.name));
    }
    const std::vector<bool> present = PresentAnywhere(tenant, state_keys, /*access=*/true);
    for (size_t gi = 0; gi < query.groups.size(); ++gi) {
      const size_t window = query.groups[gi].window_blocks;
      const size_t base = gi * n;
      size_t run = 0;  // Present values in a row, ending at block L - 1.
      uint32_t longest = 0;
      for (size_t len = 1; len <= n; ++len) {
        run = present[base + len - 1] ? run + 1 : 0;
        const bool allows = window == 0 ? run == len : run >= std::min(window, len);
        if (allows) longest = static_cast<uint32_t>(len);
        if (!allows) ok[len] = false;
      }
      m.group_blocks.push_back(longest);
    }
  } else {
    m.group_blocks.assign(query.groups.size(), static_cast<uint32_t>(n));
  }
  for (size_t len = 1; len <= n; ++len) {
    if (!ok[len]) continue;
    m.resume_blocks = len;
    if (query.all_lengths) m.resumable.push_back(static_cast<uint32_t>(len));
  }
  return m;
}

}  // namespace kvtier
