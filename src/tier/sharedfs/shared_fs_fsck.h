// Check of a G4 directory (`kvtier admin fsck --g4 DIR`; the layout is docs/shared_tier.md's):
// reads every block object in full and verifies it without decrypting (structure, lengths, the
// payload checksum over the stored bytes, and that its name is its tenant's and key's), counts
// objects per tenant, session markers, temp files, deletion notices, cluster records and the
// janitor lease.
//
// G4 is shared: other nodes may be writing while this runs. So only what can never become
// valid is treated as damage at once (corrupt objects); session markers without an object and
// temp files count as orphans only once older than `stale_after_us`, since a put in flight
// writes them shortly before its object is published. With `repair`, corrupt objects, stale
// orphan markers and stale temp files are removed; nothing else is touched. Objects of a newer
// format version are counted and left alone.
//
// Thread safety: any number of calls; files are removed one at a time, each removal final.

#ifndef KVTIER_TIER_SHAREDFS_SHARED_FS_FSCK_H_
#define KVTIER_TIER_SHAREDFS_SHARED_FS_FSCK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

struct SharedCheckReport {
  struct Tenant {
    uint64_t objects = 0;
    uint64_t value_bytes = 0;   // As users see them.
    uint64_t stored_bytes = 0;  // Object files' sizes.
  };
  uint64_t objects = 0;
  uint64_t corrupt_objects = 0;        // Fail verification, or sit under another name.
  uint64_t newer_version_objects = 0;  // Written by a newer kvtier: left alone.
  uint64_t session_markers = 0;
  uint64_t orphan_session_markers = 0; // Older than stale_after, and their object is gone.
  uint64_t temp_files = 0;
  uint64_t stale_temp_files = 0;       // Older than stale_after: left by a node that died.
  uint64_t notices = 0;
  uint64_t records = 0;                // Cluster records: the tenants' data keys.
  std::string janitor_holder;          // "" = no lease file.
  uint64_t other_files = 0;            // Under the prefix but none of the above: left alone.
  std::map<std::string, Tenant> tenants;  // By the tenant's path component.
  std::vector<std::string> problems;      // One line each, naming the file.
  // With repair:
  uint64_t removed_objects = 0;
  uint64_t removed_markers = 0;
  uint64_t removed_temp_files = 0;

  bool clean() const {
    return corrupt_objects + orphan_session_markers + stale_temp_files == 0;
  }
};

// NotFound when `root` has no kvtier-g4/v1 directory; I/O errors as they come.
Result<SharedCheckReport> CheckSharedDirectory(const std::string& root, bool repair,
                                               uint64_t stale_after_us);

}  // namespace kvtier

#endif  // KVTIER_TIER_SHAREDFS_SHARED_FS_FSCK_H_
