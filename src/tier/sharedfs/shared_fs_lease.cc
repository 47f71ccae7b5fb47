// The janitor lease of SharedFsTier: one file, <root>/kvtier-g4/v1/lease/janitor, holding
// "kvtier-g4-lease 1\n<holder node id>\n<generation>\n". Its mtime is the last renewal, on the
// file system's clock. docs/shared_tier.md ("Janitor lease") gives the argument why at most
// one node acts as janitor at a time, given clocks that differ by less than clock_margin_us.
//
//   take (no lease file):  write a temp file, link(2) it to the lease name; EEXIST = lost.
//   renew (ours):          utimensat(lease) moves its mtime to the file system's now.
//   take over (expired):   storage_now > mtime + lease_us + margin. rename(2) the lease to a
//                          name of our own (exactly one contender's rename succeeds), check
//                          that what we moved is the lease we judged expired, remove it and
//                          take as above with generation + 1. Had we moved a fresh lease
//                          (someone took over first), we link it back and stay out.
//   act:                   only while local_now < renewal_start + lease_us - margin.

#include <string>

#include "src/tier/shared/object_format.h"
#include "src/tier/sharedfs/fs_util.h"
#include "src/tier/sharedfs/shared_fs_tier.h"

namespace kvtier {
namespace {

constexpr std::string_view kLeaseMagic = "kvtier-g4-lease 1";

struct LeaseContent {
  std::string holder;
  uint64_t generation = 0;
  bool operator==(const LeaseContent&) const = default;
};

std::string EncodeLease(const LeaseContent& lease) {
  return std::string(kLeaseMagic) + "\n" + lease.holder + "\n" + std::to_string(lease.generation) +
         "\n";
}

// An unparsable lease (garbage, truncated) is an anonymous holder: it expires like any other.
LeaseContent DecodeLease(std::span<const std::byte> bytes) {
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  LeaseContent lease;
  const size_t a = text.find('\n');
  if (a == std::string::npos || text.substr(0, a) != kLeaseMagic) return lease;
  const size_t b = text.find('\n', a + 1);
  if (b == std::string::npos) return lease;
  const size_t c = text.find('\n', b + 1);
  if (c == std::string::npos || c == b + 1 || c - b > 21) return lease;
  uint64_t generation = 0;
  for (size_t i = b + 1; i < c; ++i) {
    if (text[i] < '0' || text[i] > '9') return lease;
    generation = generation * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  lease.holder = text.substr(a + 1, b - a - 1);
  lease.generation = generation;
  return lease;
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace

bool SharedFsTier::LeaseValid() {
  if (lease_generation_ == 0 || lease_renewed_local_us_ == 0) return false;
  const SharedJanitorOptions& j = options_.janitor;
  return env_->NowMicros() < lease_renewed_local_us_ + j.lease_us - j.clock_margin_us;
}

Result<bool> SharedFsTier::CreateLease(uint64_t generation) {
  const std::string lease_path = Abs(std::string(g4::kPrefix) + "/lease/janitor");
  const uint64_t start = env_->NowMicros();
  const std::string temp = NewTempPath();
  const std::string content = EncodeLease({options_.node_id, generation});
  KVTIER_RETURN_IF_ERROR(sharedfs::WriteNewFile(temp, AsBytes(content), options_.sync,
                                                WriteTime()));
  bool published = false;
  Status s = sharedfs::Publish(temp, lease_path, &published);
  (void)sharedfs::RemoveFile(temp);
  KVTIER_RETURN_IF_ERROR(s);
  if (!published) return false;
  lease_generation_ = generation;
  lease_renewed_local_us_ = start;
  return true;
}

Result<bool> SharedFsTier::AcquireLease() {
  const std::string lease_path = Abs(std::string(g4::kPrefix) + "/lease/janitor");
  const uint64_t start = env_->NowMicros();
  sharedfs::FileInfo info;
  Result<std::vector<std::byte>> bytes = sharedfs::ReadFile(lease_path, 4096, &info);
  if (!bytes.ok()) {
    if (bytes.status().code() != StatusCode::kNotFound) return bytes.status();
    return CreateLease(lease_generation_ + 1);
  }
  const LeaseContent current = DecodeLease(*bytes);
  if (lease_generation_ != 0 && current == LeaseContent{options_.node_id, lease_generation_}) {
    Status s = sharedfs::Touch(lease_path, WriteTime());
    if (!s.ok()) {
      // Moved away for a moment by a contender that will put it back, or gone: not ours
      // to act on this round.
      lease_renewed_local_us_ = 0;
      if (s.code() == StatusCode::kNotFound) return false;
      return s;
    }
    lease_renewed_local_us_ = start;
    return true;
  }
  lease_generation_ = 0;
  Result<uint64_t> now = StorageNow();
  if (!now.ok()) return now.status();
  const SharedJanitorOptions& j = options_.janitor;
  if (*now <= info.mtime_us + j.lease_us + j.clock_margin_us) return false;

  // Expired: take it over.
  const std::string moved = lease_path + ".stale." + options_.node_id;
  Status s = sharedfs::Rename(lease_path, moved);
  if (s.code() == StatusCode::kNotFound) return false;  // Another contender was first.
  KVTIER_RETURN_IF_ERROR(s);
  sharedfs::FileInfo moved_info;
  Result<std::vector<std::byte>> moved_bytes = sharedfs::ReadFile(moved, 4096, &moved_info);
  if (moved_bytes.ok() && DecodeLease(*moved_bytes) == current &&
      moved_info.mtime_us == info.mtime_us) {
    KVTIER_RETURN_IF_ERROR(sharedfs::RemoveFile(moved));
    env_->Log("SharedFsTier: taking over the janitor lease of '" + current.holder + "'");
    return CreateLease(current.generation + 1);
  }
  // We moved a lease someone renewed or took meanwhile: give it back.
  bool published = false;
  s = sharedfs::Publish(moved, lease_path, &published);
  (void)sharedfs::RemoveFile(moved);
  KVTIER_RETURN_IF_ERROR(s);
  return false;
}

}  // namespace kvtier
