// Fleet reports: how each node's G4 traffic reaches every node's dashboard (docs/shared_tier.md,
// "Fleet reports"). Every shared.report_ms a node writes its G4 counters to G4 as a cluster
// record named "fleet.<node>.<time in microseconds, 20 digits>", then deletes the one it wrote
// before; a node asked for the fleet's traffic lists "fleet." and reads each node's newest.

#ifndef KVTIER_SRC_ENGINE_FLEET_REPORTS_H_
#define KVTIER_SRC_ENGINE_FLEET_REPORTS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/store.h"
#include "src/services/encryption/record_store.h"

namespace kvtier {

// The report as JSON, and back (InvalidArgument for anything else).
std::string EncodeNodeReport(const NodeReport& report);
Result<NodeReport> DecodeNodeReport(std::span<const std::byte> body);

// "fleet.<node>.<time_us, 20 digits>".
std::string NodeReportName(std::string_view node, uint64_t time_us);

// Brings *reports (the last read, by node id) to the newest report of every node but `self`
// in `records`. A node no longer listed leaves; one whose newest report does not read (or
// does not decode: counted in *skipped) keeps its last. Reports older than `forget_before_us`
// (on the reporting node's clock: a node gone that long) are deleted, and so are a node's
// reports older than its newest by more than `superseded_us` (left by a delete that failed).
Status ReadNodeReports(encryption::RecordStore* records, std::string_view self,
                       uint64_t forget_before_us, uint64_t superseded_us,
                       std::vector<NodeReport>* reports, uint64_t* skipped);

}  // namespace kvtier

#endif  // KVTIER_SRC_ENGINE_FLEET_REPORTS_H_
