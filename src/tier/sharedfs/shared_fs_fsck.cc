#include "src/tier/sharedfs/shared_fs_fsck.h"

#include <chrono>
#include <string_view>

#include "src/common/checksum.h"
#include "src/tier/shared/object_format.h"
#include "src/tier/sharedfs/fs_util.h"

namespace kvtier {
namespace {

uint64_t WallMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The files under `dir`, depth first, as (name relative to the walk's start, stat).
Status Walk(const std::string& dir, const std::string& rel,
            std::vector<std::pair<std::string, sharedfs::FileInfo>>* files) {
  Result<std::vector<std::string>> names = sharedfs::ListDir(dir);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::string path = dir + "/" + name;
    Result<sharedfs::FileInfo> info = sharedfs::Stat(path);
    if (info.status().code() == StatusCode::kNotFound) continue;  // Removed meanwhile.
    if (!info.ok()) return info.status();
    const std::string child = rel.empty() ? name : rel + "/" + name;
    if (info->is_dir) {
      KVTIER_RETURN_IF_ERROR(Walk(path, child, files));
    } else {
      files->emplace_back(child, *info);
    }
  }
  return Status::OK();
}

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t slash = s.find('/', at);
    parts.push_back(s.substr(at, slash - at));
    if (slash == std::string_view::npos) return parts;
    at = slash + 1;
  }
}

// Why the object at objects/<tenant>/<shard>/<name> is not a valid copy of what its name says,
// or "" when it is. *newer is set for an object of a newer format version.
std::string VerifyObject(std::span<const std::byte> bytes, std::string_view tenant,
                         std::string_view shard, std::string_view name, bool* newer,
                         g4::ObjectHeader* header) {
  size_t header_bytes = 0;
  Result<g4::ObjectHeader> h = g4::DecodeObjectHeader(bytes, &header_bytes);
  if (h.status().code() == StatusCode::kFailedPrecondition) {
    *newer = true;
    return "";
  }
  if (!h.ok()) return std::string(h.status().message());
  if (header_bytes + h->stored_bytes != bytes.size()) {
    return "length " + std::to_string(bytes.size()) + " is not the header's " +
           std::to_string(header_bytes + h->stored_bytes);
  }
  if (Checksum64(bytes.subspan(header_bytes)) != h->payload_checksum) {
    return "payload checksum mismatch";
  }
  Result<std::string> component = g4::TenantComponent(h->tenant);
  const std::string hex = h->key.ToHex();
  if (!component.ok() || *component != tenant || hex != name || hex.substr(0, 2) != shard) {
    return "holds tenant '" + h->tenant + "' key " + hex + ", not what its name says";
  }
  *header = std::move(*h);
  return "";
}

}  // namespace

Result<SharedCheckReport> CheckSharedDirectory(const std::string& root, bool repair,
                                               uint64_t stale_after_us) {
  const std::string base = root + "/" + std::string(g4::kPrefix);
  Result<sharedfs::FileInfo> top = sharedfs::Stat(base);
  if (!top.ok() || !top->is_dir) {
    return Status::NotFound(root + " holds no G4 (no " + std::string(g4::kPrefix) +
                            " directory): is it the [shared] location?");
  }
  std::vector<std::pair<std::string, sharedfs::FileInfo>> files;
  KVTIER_RETURN_IF_ERROR(Walk(base, "", &files));
  const uint64_t now = WallMicros();
  auto stale = [&](const sharedfs::FileInfo& info) {
    return info.mtime_us + stale_after_us < now;
  };

  SharedCheckReport report;
  auto remove = [&](const std::string& rel, uint64_t* counter) -> Status {
    if (!repair) return Status::OK();
    KVTIER_RETURN_IF_ERROR(sharedfs::RemoveFile(base + "/" + rel));
    ++*counter;
    return Status::OK();
  };
  for (const auto& [rel, info] : files) {
    const std::vector<std::string_view> p = Split(rel);
    if (p.size() == 4 && p[0] == "objects") {
      sharedfs::FileInfo read_info;
      Result<std::vector<std::byte>> bytes = sharedfs::ReadFile(
          base + "/" + rel, g4::kMaxObjectHeaderBytes + g4::kMaxValueBytes, &read_info);
      if (bytes.status().code() == StatusCode::kNotFound) continue;  // Deleted meanwhile.
      if (!bytes.ok()) return bytes.status();
      ++report.objects;
      bool newer = false;
      g4::ObjectHeader header;
      const std::string why = VerifyObject(*bytes, p[1], p[2], p[3], &newer, &header);
      if (newer) {
        ++report.newer_version_objects;
        continue;
      }
      if (!why.empty()) {
        ++report.corrupt_objects;
        report.problems.push_back(rel + ": " + why);
        KVTIER_RETURN_IF_ERROR(remove(rel, &report.removed_objects));
        continue;
      }
      SharedCheckReport::Tenant& t = report.tenants[std::string(p[1])];
      ++t.objects;
      t.value_bytes += header.value_bytes;
      t.stored_bytes += bytes->size();
    } else if (p.size() == 4 && p[0] == "sessions") {
      ++report.session_markers;
      Result<BlockKey> key = BlockKey::FromHex(p[3]);
      const bool has_object = key.ok() && sharedfs::Stat(root + "/" + g4::ObjectName(p[1], *key)).ok();
      if (!has_object && stale(info)) {
        ++report.orphan_session_markers;
        report.problems.push_back(rel + ": session marker without its object");
        KVTIER_RETURN_IF_ERROR(remove(rel, &report.removed_markers));
      }
    } else if (p.size() == 2 && p[0] == "tmp") {
      ++report.temp_files;
      if (stale(info)) {
        ++report.stale_temp_files;
        report.problems.push_back(rel + ": temp file of an upload that never finished");
        KVTIER_RETURN_IF_ERROR(remove(rel, &report.removed_temp_files));
      }
    } else if (p.size() == 2 && p[0] == "notices") {
      ++report.notices;
    } else if (p.size() == 2 && p[0] == "records") {
      ++report.records;  // Only their owner can check them (they are wrapped keys).
    } else if (rel == "lease/janitor") {
      sharedfs::FileInfo read_info;
      Result<std::vector<std::byte>> lease = sharedfs::ReadFile(base + "/" + rel, 512, &read_info);
      if (lease.ok()) {
        std::string text(reinterpret_cast<const char*>(lease->data()), lease->size());
        const size_t a = text.find('\n');
        const size_t b = a == std::string::npos ? a : text.find('\n', a + 1);
        report.janitor_holder = b == std::string::npos ? "(unreadable)" : text.substr(a + 1, b - a - 1);
      }
    } else if (p.size() == 2 && p[0] == "lease") {
      // Clock probe files of the nodes.
    } else {
      ++report.other_files;
    }
  }
  return report;
}

}  // namespace kvtier
