// StoreImpl's side of fleet reports (fleet_reports.h): this node's G4 traffic written to G4 for
// the others, and theirs read back for Fleet().

#include <string>
#include <utility>

#include "src/engine/fleet_reports.h"
#include "src/engine/store_impl.h"

namespace kvtier {
namespace {

// A node that has not reported for a day is forgotten (its report deleted by whoever reads).
constexpr uint64_t kForgetAfterUs = 24ull * 3600 * 1000000;

}  // namespace

NodeReport StoreImpl::OwnReport(uint64_t now_us) const {
  const SharedTierStats g4 = shared_->Stats();
  NodeReport r;
  r.node = node_id_;
  r.time_us = now_us;
  r.shared_hits = g4.hits;
  r.shared_misses = g4.misses;
  r.shared_read_bytes = g4.get_bytes;
  r.shared_written_bytes = g4.put_bytes;
  r.shared_puts = g4.puts;
  r.shared_errors = g4.errors;
  r.shared_reads_coalesced = shared_reads_coalesced_.load(std::memory_order_relaxed);
  r.shared_checks_coalesced = shared_checks_coalesced_.load(std::memory_order_relaxed);
  return r;
}

void StoreImpl::ReportToFleet() {
  const uint64_t now = options_.env->NowMicros();
  const std::string name = NodeReportName(node_id_, now);
  const std::string body = EncodeNodeReport(OwnReport(now));
  const Status written = shared_->CreateRecord(name, std::as_bytes(std::span(body)));
  std::string previous;
  {
    MutexLock l(&fleet_mu_);
    if (written.ok()) previous = std::exchange(fleet_report_name_, name);
    if (!written.ok() != fleet_report_failing_) {
      fleet_report_failing_ = !written.ok();
      options_.env->Log(written.ok() ? "fleet report: written again"
                                     : "fleet report: not written (the other nodes' dashboards "
                                       "miss this node's G4 traffic): " + written.ToString());
    }
  }
  // Failing, it is deleted by the next reader that finds it superseded.
  if (!previous.empty()) (void)shared_->DeleteRecord(previous);
  if (now >= fleet_wanted_until_us_.load(std::memory_order_relaxed)) return;
  std::vector<NodeReport> others;
  {
    MutexLock l(&fleet_mu_);
    others = fleet_others_;
  }
  uint64_t skipped = 0;
  const uint64_t period_us = options_.shared.report_ms * 1000;
  const Status read = ReadNodeReports(shared_.get(), node_id_,
                                      now > kForgetAfterUs ? now - kForgetAfterUs : 0,
                                      3 * period_us, &others, &skipped);
  if (skipped != 0) {
    options_.env->Log("fleet report: " + std::to_string(skipped) + " reports did not decode");
  }
  if (!read.ok()) return;  // The last read stands.
  MutexLock l(&fleet_mu_);
  fleet_others_ = std::move(others);
  fleet_read_us_ = now;
}

Result<FleetView> StoreImpl::Fleet() {
  if (!shared_ || options_.shared.report_ms == 0) {
    return Status::FailedPrecondition(
        shared_ ? "fleet reports are off ([shared] report_ms = 0)" : "no G4 ([shared] location)");
  }
  const uint64_t now = options_.env->NowMicros();
  fleet_wanted_until_us_.store(now + 3 * options_.shared.report_ms * 1000,
                               std::memory_order_relaxed);
  FleetView view;
  view.nodes.push_back(OwnReport(now));
  MutexLock l(&fleet_mu_);
  view.nodes.insert(view.nodes.end(), fleet_others_.begin(), fleet_others_.end());
  view.read_us = fleet_read_us_;
  return view;
}

}  // namespace kvtier
