#include "src/server/metrics.h"

#include <cstdio>

#include "src/common/malloc_tuning.h"

namespace kvtier::server {

std::string_view ProtoName(Proto p) {
  switch (p) {
    case Proto::kNative: return "native";
    case Proto::kResp: return "resp";
    case Proto::kHttp: return "http";
    case Proto::kS3: return "s3";
    case Proto::kCount: break;
  }
  return "unknown";
}

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kHello: return "hello";
    case Op::kAuth: return "auth";
    case Op::kPing: return "ping";
    case Op::kLookupPrefix: return "lookup_prefix";
    case Op::kGet: return "get";
    case Op::kPut: return "put";
    case Op::kExists: return "exists";
    case Op::kDelete: return "delete";
    case Op::kPin: return "pin";
    case Op::kUnpin: return "unpin";
    case Op::kPrefetch: return "prefetch";
    case Op::kStats: return "stats";
    case Op::kAdmin: return "admin";
    case Op::kOther: return "other";
    case Op::kCount: break;
  }
  return "unknown";
}

void Metrics::RecordRequest(Proto proto, Op op, uint64_t nanos) {
  Histogram& h = latency_[Index(proto)][static_cast<size_t>(op)];
  double seconds = static_cast<double>(nanos) * 1e-9;
  size_t b = 0;
  while (b < kBuckets.size() && seconds > kBuckets[b]) ++b;
  Add(&h.buckets[b], 1);
  Add(&h.sum_nanos, nanos);
}

uint64_t Metrics::ActiveConnections() const {
  uint64_t n = 0;
  for (const ProtoCounters& c : per_proto_) n += c.active.load(std::memory_order_relaxed);
  return n;
}

namespace {

// Label values are tenant names and fixed words; escape what the format requires.
std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

class Page {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  // A family with one unlabelled sample.
  void Single(std::string_view name, std::string_view type, std::string_view help,
              uint64_t value) {
    Family(name, type, help);
    Sample(name, "", value);
  }

  void Sample(std::string_view name, std::string_view labels, uint64_t value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    out_ += std::to_string(value);
    out_ += '\n';
  }
  void SampleDouble(std::string_view name, std::string_view labels, double value) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.9g", value);
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    out_ += buf;
    out_ += '\n';
  }
  // One sample per tenant of a TenantStats field.
  void PerTenant(const StoreStats& stats, std::string_view name, std::string_view type,
                 std::string_view help, uint64_t TenantStats::*field,
                 std::string_view extra_labels = "") {
    Family(name, type, help);
    for (const TenantStats& t : stats.tenants) {
      std::string labels = "tenant=\"" + Escape(t.name) + "\"";
      if (!extra_labels.empty()) {
        labels += ',';
        labels += extra_labels;
      }
      Sample(name, labels, t.*field);
    }
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string Metrics::RenderPrometheus(const StoreStats& s, const EventCounters* events) const {
  Page p;
  auto proto_label = [](size_t i) {
    return "protocol=\"" + std::string(ProtoName(static_cast<Proto>(i))) + "\"";
  };
  auto per_proto = [&](std::string_view name, std::string_view type, std::string_view help,
                       std::atomic<uint64_t> ProtoCounters::*field) {
    p.Family(name, type, help);
    for (size_t i = 0; i < per_proto_.size(); ++i) {
      p.Sample(name, proto_label(i), (per_proto_[i].*field).load(std::memory_order_relaxed));
    }
  };
  per_proto("kvtier_connections", "gauge", "Connections open now.", &ProtoCounters::active);
  per_proto("kvtier_connections_opened_total", "counter", "Connections accepted.",
            &ProtoCounters::opened);
  per_proto("kvtier_connections_refused_total", "counter",
            "Connections refused because max_connections were open.", &ProtoCounters::refused);
  per_proto("kvtier_protocol_errors_total", "counter",
            "Requests rejected as malformed, oversized or unknown.", &ProtoCounters::protocol_errors);
  per_proto("kvtier_auth_failures_total", "counter", "Failed authentication attempts.",
            &ProtoCounters::auth_failures);
  per_proto("kvtier_auth_lockouts_total", "counter",
            "Peers locked out after failed authentications in a row ([auth] max_failures).",
            &ProtoCounters::auth_lockouts);
  per_proto("kvtier_auth_refused_total", "counter",
            "Authentications refused unchecked because the peer was locked out.",
            &ProtoCounters::auth_refused);
  per_proto("kvtier_idle_closed_total", "counter", "Connections closed by the idle timeout.",
            &ProtoCounters::idle_closed);
  per_proto("kvtier_request_timeouts_total", "counter",
            "Connections closed because a request did not arrive whole within "
            "server.request_timeout_seconds (and min_request_rate).",
            &ProtoCounters::request_timeouts);
  per_proto("kvtier_slow_requests_total", "counter",
            "Requests slower than server.slow_request_ms from first byte to reply.",
            &ProtoCounters::slow_requests);
  per_proto("kvtier_network_received_bytes_total", "counter", "Bytes read from clients.",
            &ProtoCounters::bytes_in);
  per_proto("kvtier_network_sent_bytes_total", "counter", "Bytes written to clients.",
            &ProtoCounters::bytes_out);
  p.Single("kvtier_low_water_stalls_total", "counter",
           "Connections the kernel left unwoken under a raised receive low-water mark for a "
           "second; they read every byte from then on.",
           low_water_stalls_.load(std::memory_order_relaxed));

  p.Family("kvtier_request_duration_seconds", "histogram",
           "Time to serve one request, from parsing to queueing the reply.");
  for (size_t pi = 0; pi < latency_.size(); ++pi) {
    for (size_t oi = 0; oi < latency_[pi].size(); ++oi) {
      const Histogram& h = latency_[pi][oi];
      std::array<uint64_t, kBuckets.size() + 1> counts;
      uint64_t total = 0;
      for (size_t b = 0; b < counts.size(); ++b) {
        counts[b] = h.buckets[b].load(std::memory_order_relaxed);
        total += counts[b];
      }
      if (total == 0) continue;
      std::string labels = proto_label(pi) + ",op=\"" + std::string(OpName(static_cast<Op>(oi))) + "\"";
      uint64_t cumulative = 0;
      for (size_t b = 0; b < kBuckets.size(); ++b) {
        cumulative += counts[b];
        char le[32];
        std::snprintf(le, sizeof(le), "%g", kBuckets[b]);
        p.Sample("kvtier_request_duration_seconds_bucket", labels + ",le=\"" + le + "\"", cumulative);
      }
      p.Sample("kvtier_request_duration_seconds_bucket", labels + ",le=\"+Inf\"", total);
      p.SampleDouble("kvtier_request_duration_seconds_sum", labels,
                     static_cast<double>(h.sum_nanos.load(std::memory_order_relaxed)) * 1e-9);
      p.Sample("kvtier_request_duration_seconds_count", labels, total);
    }
  }

  p.PerTenant(s, "kvtier_tenant_hits_total", "counter",
              "Blocks found by gets and prefix lookups, in any tier.", &TenantStats::hits);
  p.PerTenant(s, "kvtier_tenant_misses_total", "counter",
              "Gets not found and prefix lookups that stopped at a miss.", &TenantStats::misses);
  p.PerTenant(s, "kvtier_tenant_blocks", "gauge", "Blocks resident in G2.", &TenantStats::blocks);
  p.PerTenant(s, "kvtier_tenant_bytes", "gauge", "Bytes of G2 held, in whole pages.",
              &TenantStats::bytes);
  p.PerTenant(s, "kvtier_tenant_memory_budget_bytes", "gauge", "G2 budget; 0 means unlimited.",
              &TenantStats::memory_budget_bytes);
  p.PerTenant(s, "kvtier_tenant_pinned_blocks", "gauge", "Pinned blocks.",
              &TenantStats::pinned_blocks);
  p.PerTenant(s, "kvtier_tenant_puts_total", "counter", "Blocks stored.", &TenantStats::puts);
  p.PerTenant(s, "kvtier_tenant_duplicate_puts_total", "counter",
              "Puts of a key already present.", &TenantStats::duplicate_puts);
  p.PerTenant(s, "kvtier_tenant_rejected_puts_total", "counter",
              "Puts that failed for lack of evictable space.", &TenantStats::rejected_puts);
  p.PerTenant(s, "kvtier_tenant_session_hints_total", "counter",
              "Session hints taken (retention, priority, finished).",
              &TenantStats::session_hints);
  p.PerTenant(s, "kvtier_tenant_lru_trials_total", "counter",
              "Times G2 eviction followed plain LRU for a trial, LRU serving more lookups.",
              &TenantStats::lru_trials);
  p.PerTenant(s, "kvtier_tenant_put_bytes_total", "counter", "Bytes stored by puts.",
              &TenantStats::put_bytes);
  p.PerTenant(s, "kvtier_tenant_get_bytes_total", "counter", "Bytes handed to readers.",
              &TenantStats::get_bytes);
  p.PerTenant(s, "kvtier_tenant_evictions_total", "counter", "G2 blocks evicted for space.",
              &TenantStats::evictions, "tier=\"g2\"");
  p.PerTenant(s, "kvtier_tenant_expirations_total", "counter", "Blocks removed by TTL.",
              &TenantStats::expirations);
  p.PerTenant(s, "kvtier_tenant_deletes_total", "counter", "Blocks deleted on request.",
              &TenantStats::deletes);

  p.Family("kvtier_tier_hits_total", "counter", "Reads served by a tier below G2.");
  p.Sample("kvtier_tier_hits_total", "tier=\"g3\"", s.disk_hits);
  p.Sample("kvtier_tier_hits_total", "tier=\"g4\"", s.shared_hits);
  p.Family("kvtier_tier_misses_total", "counter", "Reads that a tier below G2 did not have.");
  p.Sample("kvtier_tier_misses_total", "tier=\"g3\"", s.disk_misses);
  p.Sample("kvtier_tier_misses_total", "tier=\"g4\"", s.shared_misses);
  p.Single("kvtier_g4_read_bytes_total", "counter",
           "Block bytes this node read from G4, decoded.", s.shared_read_bytes);
  p.Single("kvtier_g4_written_bytes_total", "counter",
           "Object bytes this node published to G4: encoded, with headers.",
           s.shared_written_bytes);
  p.Single("kvtier_g4_reads_coalesced_total", "counter",
           "G4 reads that joined another request's read of the same block in flight.",
           s.shared_reads_coalesced);
  p.Single("kvtier_g4_checks_coalesced_total", "counter",
           "G4 existence checks (per block) that joined another request's check in flight.",
           s.shared_checks_coalesced);
  p.Single("kvtier_g4_checks_cached_total", "counter",
           "G4 existence checks (per block) answered by a check of the last exists_cache_ms.",
           s.shared_checks_cached);
  p.Family("kvtier_tier_evictions_total", "counter", "Blocks evicted from a tier below G2.");
  p.Sample("kvtier_tier_evictions_total", "tier=\"g3\"", s.disk_evictions);

  p.Family("kvtier_tier_capacity_bytes", "gauge", "Capacity of each tier.");
  p.Sample("kvtier_tier_capacity_bytes", "tier=\"g2\"", s.memory_capacity_bytes);
  p.Sample("kvtier_tier_capacity_bytes", "tier=\"g3\"", s.disk_capacity_bytes);
  p.Family("kvtier_tier_used_bytes", "gauge", "Bytes in use in each tier.");
  p.Sample("kvtier_tier_used_bytes", "tier=\"g2\"", s.memory_used_bytes);
  p.Sample("kvtier_tier_used_bytes", "tier=\"g3\"", s.disk_used_bytes);
  p.Family("kvtier_tier_blocks", "gauge", "Blocks held by each tier.");
  p.Sample("kvtier_tier_blocks", "tier=\"g2\"", s.blocks);
  p.Sample("kvtier_tier_blocks", "tier=\"g3\"", s.disk_blocks);

  p.Single("kvtier_memory_free_bytes", "gauge", "Free bytes in the G2 arena.", s.memory_free_bytes);
  p.Single("kvtier_memory_largest_free_extent_bytes", "gauge", "Largest free run in the arena.",
           s.memory_largest_free_extent_bytes);
  p.Single("kvtier_index_bytes", "gauge", "Memory of the block index and eviction metadata.",
           s.index_bytes);
  const HeapStats heap = ReadHeapStats();
  p.Single("kvtier_heap_allocated_bytes", "gauge",
           "Bytes allocated on the process heap and not freed (index, buffers, queues).",
           heap.allocated_bytes);
  p.Single("kvtier_heap_free_bytes", "gauge",
           "Free heap space kept for reuse; its pages go back to the kernel every 5 s.",
           heap.free_bytes);
  p.Single("kvtier_memory_restored_blocks", "gauge",
           "G2 blocks adopted at start from the previous run's arena (warm restart).",
           s.memory_restored_blocks);
  p.Single("kvtier_memory_restore_dropped_blocks", "gauge",
           "Blocks of the previous run's G2 not adopted: checksum, tenant gone, capacity, budget.",
           s.memory_restore_dropped_blocks);
  p.Family("kvtier_memory_restore_seconds", "gauge", "Time taken to adopt the previous G2.");
  p.SampleDouble("kvtier_memory_restore_seconds", "",
                 static_cast<double>(s.memory_restore_micros) * 1e-6);
  if (s.disk_capacity_bytes != 0) {
    p.Family("kvtier_tier_writable", "gauge",
             "1 while the tier takes writes; 0 while they fail (full, I/O errors, read-only).");
    p.Sample("kvtier_tier_writable", "tier=\"g3\"", s.disk_writable ? 1 : 0);
  }
  p.Single("kvtier_disk_write_errors_total", "counter",
           "G3 records the device failed to write (full, I/O error, read-only).",
           s.disk_write_errors);
  p.Single("kvtier_disk_read_errors_total", "counter",
           "G3 reads the device failed: served as misses.", s.disk_read_errors);
  p.Single("kvtier_disk_corrupt_records_total", "counter",
           "G3 records that failed their checksum or tag: dropped, never served.",
           s.disk_corrupt_records);
  p.Single("kvtier_disk_unreadable_records_total", "counter",
           "G3 records sealed under a shredded key: dropped.",
           s.disk_unreadable_records);
  p.Single("kvtier_disk_logical_bytes", "gauge", "Live G3 blocks as users see them.",
           s.disk_logical_bytes);
  p.Single("kvtier_disk_stored_bytes", "gauge", "The same blocks as stored (compressed).",
           s.disk_stored_bytes);

  p.Single("kvtier_shared_puts_total", "counter", "Objects this node published to G4.",
           s.shared_puts);
  p.Single("kvtier_shared_corrupt_total", "counter", "G4 objects that failed verification.",
           s.shared_corrupt);
  p.Single("kvtier_shared_errors_total", "counter", "G4 storage errors (I/O, network, service).",
           s.shared_errors);
  p.Single("kvtier_shared_uploads_dropped_total", "counter",
           "Uploads dropped by a full queue or upload buffer.", s.shared_uploads_dropped);
  p.Single("kvtier_shared_upload_buffer_bytes", "gauge",
           "Copies of blocks out of G2 awaiting their upload.", s.shared_upload_buffer_bytes);
  p.Single("kvtier_shared_janitor_lease", "gauge", "1 when this node runs G4 housekeeping.",
           s.shared_janitor_lease ? 1 : 0);
  p.Single("kvtier_shared_nodes_seen", "gauge",
           "Nodes seen in G4 since start: this one and those whose deletion notices it read.",
           s.shared_nodes_seen);
  p.Single("kvtier_deletion_notices_published_total", "counter",
           "Deletions announced to the other nodes through G4.", s.deletion_notices_published);
  p.Single("kvtier_deletion_notices_applied_total", "counter",
           "Other nodes' deletions applied to this node's G2 and G3.", s.deletion_notices_applied);
  p.Single("kvtier_deletion_notices_pending", "gauge",
           "Other nodes' deletions whose apply failed here, retried at each poll.",
           s.deletion_notices_pending);
  p.Single("kvtier_notice_gap_resets_total", "counter",
           "G2 and G3 emptied because deletion notices may have been missed.",
           s.notice_gap_resets);

  p.Single("kvtier_demoted_blocks_total", "counter", "G2 evictions written to G3.",
           s.demoted_blocks);
  p.Single("kvtier_demotion_failures_total", "counter", "Admitted to G3 but not written.",
           s.demotion_failures);
  p.Single("kvtier_demotion_shared_skips_total", "counter",
           "G2 evictions not written back to G4: read from there.", s.demotion_shared_skips);
  p.Single("kvtier_demotion_disk_skips_total", "counter",
           "G2 evictions not written to G3: G3 holds them already.", s.demotion_disk_skips);
  p.Single("kvtier_demotion_writes_total", "counter",
           "G3 writes that carried G2's demotions, several blocks (I/Os in flight) each.",
           s.demotion_writes);
  p.Single("kvtier_promoted_blocks_total", "counter", "G3 hits copied back into G2.",
           s.promoted_blocks);
  p.Single("kvtier_admitted_blocks_total", "counter", "G2 evictions admitted to G3.",
           s.admitted_blocks);
  p.Family("kvtier_admissions_skipped_total", "counter", "G2 evictions not admitted to G3.");
  p.Sample("kvtier_admissions_skipped_total", "reason=\"short_prefix\"", s.skipped_short_prefix);
  p.Sample("kvtier_admissions_skipped_total", "reason=\"infrequent\"", s.skipped_infrequent);
  if (events != nullptr) {
    p.Single("kvtier_events_total", "counter", "Block events published ([events]).",
             events->events);
    p.Single("kvtier_events_dropped_total", "counter",
             "Block events dropped: the queue was full.", events->dropped);
    p.Single("kvtier_events_messages_total", "counter",
             "KV-event messages sent (the next sequence number).", events->messages);
    p.Single("kvtier_events_replays_total", "counter", "Replay requests answered.",
             events->replays);
    p.Single("kvtier_events_snapshots_total", "counter", "Snapshot requests answered.",
             events->snapshots);
  }
  return p.Take();
}

}  // namespace kvtier::server
