// The housekeeping pass of SharedFsTier, run only by the lease holder (shared_fs_lease.cc):
// TTL since last access (mtime), per-tenant quotas and total capacity (least recently used
// first), abandoned temp files and session markers whose object is gone.

#include <algorithm>
#include <atomic>

#include "src/tier/shared/janitor_policy.h"
#include "src/tier/shared/object_format.h"
#include "src/tier/sharedfs/fs_util.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace kvtier {

Result<JanitorReport> SharedFsTier::RunJanitorOnce() {
  MutexLock lock(&janitor_mu_);
  JanitorReport report;
  KVTIER_RETURN_IF_ERROR(counters_.StartJanitorPass(AcquireLease(), &report));
  if (!report.lease_held) return report;
  Result<uint64_t> now = StorageNow();
  if (!now.ok()) return now.status();
  Result<std::vector<ScannedObject>> objects = ScanObjects();
  if (!objects.ok()) return objects.status();
  KVTIER_RETURN_IF_ERROR(EvictObjects(*objects, *now, &report));
  KVTIER_RETURN_IF_ERROR(CleanTemp(*now, &report));
  KVTIER_RETURN_IF_ERROR(CleanMarkers(*now, &report));
  KVTIER_RETURN_IF_ERROR(CleanNotices(*now, &report));
  return report;
}

Result<std::vector<SharedFsTier::ScannedObject>> SharedFsTier::ScanObjects() {
  const std::string objects_dir = Abs(std::string(g4::kPrefix) + "/objects/");
  Result<std::vector<std::string>> tenants = sharedfs::ListDir(objects_dir);
  if (!tenants.ok()) return tenants.status();
  struct Shard {
    std::string tenant;
    std::string dir;
  };
  std::vector<Shard> shards;
  for (const std::string& tenant : *tenants) {
    Result<std::vector<std::string>> names = sharedfs::ListDir(objects_dir + tenant);
    if (!names.ok()) {
      if (names.status().code() == StatusCode::kNotFound) continue;  // Deleted meanwhile.
      return names.status();
    }
    for (const std::string& name : *names) shards.push_back({tenant, objects_dir + tenant + "/" + name});
  }
  Mutex mu;
  std::vector<ScannedObject> out;
  Status first_error;
  pool_.ParallelFor(shards.size(), [&](size_t i) {
    std::vector<ScannedObject> found;
    Status error;
    Result<std::vector<std::string>> names = sharedfs::ListDir(shards[i].dir);
    if (names.ok()) {
      for (const std::string& name : *names) {
        const std::string path = shards[i].dir + "/" + name;
        Result<sharedfs::FileInfo> info = sharedfs::Stat(path);
        if (info.ok()) {
          found.push_back({path, shards[i].tenant, info->size, info->mtime_us});
        } else if (info.status().code() != StatusCode::kNotFound) {
          error = info.status();
        }
      }
    } else if (names.status().code() != StatusCode::kNotFound) {
      error = names.status();
    }
    MutexLock lock(&mu);
    out.insert(out.end(), std::make_move_iterator(found.begin()),
               std::make_move_iterator(found.end()));
    if (first_error.ok()) first_error = error;
  });
  MutexLock lock(&mu);
  KVTIER_RETURN_IF_ERROR(first_error);
  return out;
}

Status SharedFsTier::EvictObjects(std::vector<ScannedObject>& objects, uint64_t now_us,
                                  JanitorReport* report) {
  std::vector<g4::JanitorCandidate> candidates;
  candidates.reserve(objects.size());
  for (const ScannedObject& o : objects) {
    candidates.push_back({o.path, o.tenant_component, o.bytes, o.mtime_us});
  }
  const std::vector<g4::Victim> victims =
      g4::SelectVictims(candidates, now_us, options_.janitor, report);
  // In batches, each started only while the lease is still ours.
  constexpr size_t kBatch = 256;
  for (size_t begin = 0; begin < victims.size(); begin += kBatch) {
    if (!LeaseValid()) return Status::Aborted("janitor lease expired during a pass");
    const size_t n = std::min(kBatch, victims.size() - begin);
    std::vector<Status> results(n);
    pool_.ParallelFor(n, [&](size_t k) {
      results[k] = sharedfs::RemoveFile(candidates[victims[begin + k].index].name);
    });
    for (size_t k = 0; k < n; ++k) {
      if (!results[k].ok()) {
        counters_.CountError(results[k]);
        return results[k];
      }
      g4::CountEviction(victims[begin + k].reason, report);
      counters_.janitor_evicted++;
      counters_.deletes++;
    }
  }
  return Status::OK();
}

Status SharedFsTier::CleanTemp(uint64_t now_us, JanitorReport* report) {
  const std::string dir = Abs(std::string(g4::kPrefix) + "/tmp/");
  Result<std::vector<std::string>> names = sharedfs::ListDir(dir);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    Result<sharedfs::FileInfo> info = sharedfs::Stat(dir + name);
    if (!info.ok() || now_us <= info->mtime_us + options_.janitor.temp_grace_us) continue;
    if (!LeaseValid()) return Status::Aborted("janitor lease expired during a pass");
    Status s = sharedfs::RemoveFile(dir + name);
    if (!s.ok()) return s;
    report->temp_removed++;
    counters_.janitor_temp_removed++;
  }
  return Status::OK();
}

Status SharedFsTier::CleanMarkers(uint64_t now_us, JanitorReport* report) {
  const std::string sessions = Abs(std::string(g4::kPrefix) + "/sessions/");
  Result<std::vector<std::string>> tenants = sharedfs::ListDir(sessions);
  if (!tenants.ok()) return tenants.status();
  for (const std::string& tenant : *tenants) {
    Result<std::vector<std::string>> session_dirs = sharedfs::ListDir(sessions + tenant);
    if (!session_dirs.ok()) continue;
    for (const std::string& session : *session_dirs) {
      const std::string dir = sessions + tenant + "/" + session + "/";
      Result<std::vector<std::string>> markers = sharedfs::ListDir(dir);
      if (!markers.ok()) continue;
      for (const std::string& name : *markers) {
        Result<BlockKey> key = BlockKey::FromHex(name);
        if (key.ok() && sharedfs::Stat(Abs(g4::ObjectName(tenant, *key))).ok()) continue;
        // A put writes its marker before publishing: a young marker may be a put in flight.
        Result<sharedfs::FileInfo> info = sharedfs::Stat(dir + name);
        if (!info.ok() || now_us <= info->mtime_us + options_.janitor.temp_grace_us) continue;
        if (!LeaseValid()) return Status::Aborted("janitor lease expired during a pass");
        if (sharedfs::RemoveFile(dir + name).ok()) report->markers_removed++;
      }
      RemoveEmptyDir(dir);
    }
  }
  return Status::OK();
}

Status SharedFsTier::CleanNotices(uint64_t now_us, JanitorReport* report) {
  const std::string dir = Abs(g4::NoticesPrefix());
  Result<std::vector<std::string>> names = sharedfs::ListDir(dir);
  if (!names.ok()) {
    return names.status().code() == StatusCode::kNotFound ? Status::OK() : names.status();
  }
  for (const std::string& name : *names) {
    Result<sharedfs::FileInfo> info = sharedfs::Stat(dir + name);
    if (!info.ok() || now_us <= info->mtime_us + options_.janitor.notice_retention_us) continue;
    if (!LeaseValid()) return Status::Aborted("janitor lease expired during a pass");
    if (sharedfs::RemoveFile(dir + name).ok()) report->notices_removed++;
  }
  return Status::OK();
}

}  // namespace kvtier
