// Offline check of a G3 directory (`kvtier admin fsck --g3 DIR`): reads every segment and every
// record in full, not trusting footers, and reports what a DiskTier open would serve and what
// is wrong. With `repair`, it leaves the directory as a clean open would want it:
//   - segments whose header is not a valid version-2 header for their file name are removed
//     (an open removes them too: nothing in them can be attributed to this directory);
//   - segments with corrupt or torn records, with a footer that disagrees with their records,
//     or left unsealed by a crash are rewritten: their intact records are copied byte for byte
//     (sequence, session and times kept) into a new sealed segment, which replaces them;
//   - orphan segments (no live block, no tombstone that still deletes anything) are removed.
// It never changes an intact record and never drops a live one. The directory's LOCK is held
// throughout, so it refuses to run while kvtierd has the directory open.
//
// Thread safety: one call at a time per directory (the LOCK enforces it across processes).

#ifndef KVTIER_TIER_DISK_DISK_FSCK_H_
#define KVTIER_TIER_DISK_DISK_FSCK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::disk {

struct DiskCheckReport {
  struct Tenant {
    uint64_t live_blocks = 0;
    uint64_t live_value_bytes = 0;  // As users see them.
    uint64_t live_stored_bytes = 0; // As stored (compressed).
  };
  uint64_t segments = 0;
  uint64_t sealed_segments = 0;    // With a valid footer.
  uint64_t unsealed_segments = 0;  // Left open by a crash: an open scans them.
  uint64_t bad_segments = 0;       // Header invalid, or another segment's id.
  uint64_t segment_bytes = 0;      // Sum of the segment files' sizes.
  uint64_t records = 0;            // Intact records, blocks and tombstones.
  uint64_t blocks = 0;
  uint64_t tombstones = 0;
  uint64_t live_blocks = 0;        // What an open would index (all tenants).
  uint64_t dead_records = 0;       // Superseded or deleted blocks, tombstones no longer needed.
  uint64_t corrupt_records = 0;    // Valid header, payload checksum mismatch.
  uint64_t torn_records = 0;       // A header that does not decode, or past the end of the file.
  uint64_t footer_mismatches = 0;  // Footers listing records that are not there.
  uint64_t orphan_segments = 0;    // Nothing live and no needed tombstone in them.
  uint64_t other_files = 0;        // Not G3's (left alone): the keystore, notice state, ...
  std::map<std::string, Tenant> tenants;
  std::vector<std::string> problems;  // One line each: "0000000003.seg: ...".
  // With repair:
  uint64_t removed_segments = 0;
  uint64_t rewritten_segments = 0;
  uint64_t dropped_records = 0;  // Corrupt or torn records left behind by rewriting.

  // No bad segment, corrupt or torn record or footer mismatch.
  bool clean() const {
    return bad_segments + corrupt_records + torn_records + footer_mismatches == 0;
  }
};

// FailedPrecondition when the directory is locked (kvtierd is using it) or holds a segment of
// another format version; NotFound when it does not exist; I/O errors as they come.
Result<DiskCheckReport> CheckDiskDirectory(Env* env, const std::string& dir, bool repair);

}  // namespace kvtier::disk

#endif  // KVTIER_TIER_DISK_DISK_FSCK_H_
