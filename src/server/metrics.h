// Server-side counters and latency histograms, rendered with the Store's statistics in the
// Prometheus text exposition format (version 0.0.4) for GET /metrics.
//
// Thread safety: every method may be called concurrently; counters are relaxed atomics, so a
// scrape sees each counter at some recent value (not one consistent snapshot).

#ifndef KVTIER_SERVER_METRICS_H_
#define KVTIER_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/store.h"

namespace kvtier::server {

enum class Proto : uint8_t { kNative, kResp, kHttp, kS3, kCount };
std::string_view ProtoName(Proto p);

// Operations whose latency is measured (labels of kvtier_request_duration_seconds).
enum class Op : uint8_t {
  kHello, kAuth, kPing, kLookupPrefix, kGet, kPut, kExists, kDelete, kPin, kUnpin,
  kPrefetch, kStats, kAdmin, kOther, kCount
};
std::string_view OpName(Op op);

// The KV-event publisher's counters (src/server/kv_events.h), for /metrics.
struct EventCounters {
  uint64_t events = 0;
  uint64_t dropped = 0;
  uint64_t messages = 0;
  uint64_t replays = 0;
  uint64_t snapshots = 0;
};

class Metrics {
 public:
  // Latency buckets' upper bounds, in seconds.
  static constexpr std::array<double, 17> kBuckets = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
      0.01,    0.025,    0.05,    0.1,    0.25,    0.5,    1.0,   2.5};

  void RecordRequest(Proto proto, Op op, uint64_t nanos);
  void ConnectionOpened(Proto p) { Add(&per_proto_[Index(p)].opened, 1); Add(&per_proto_[Index(p)].active, 1); }
  void ConnectionClosed(Proto p) { per_proto_[Index(p)].active.fetch_sub(1, std::memory_order_relaxed); }
  void ConnectionRefused(Proto p) { Add(&per_proto_[Index(p)].refused, 1); }
  void ProtocolError(Proto p) { Add(&per_proto_[Index(p)].protocol_errors, 1); }
  void AuthFailure(Proto p) { Add(&per_proto_[Index(p)].auth_failures, 1); }
  void AuthLockout(Proto p) { Add(&per_proto_[Index(p)].auth_lockouts, 1); }
  void AuthRefused(Proto p) { Add(&per_proto_[Index(p)].auth_refused, 1); }
  void IdleClosed(Proto p) { Add(&per_proto_[Index(p)].idle_closed, 1); }
  void RequestTimedOut(Proto p) { Add(&per_proto_[Index(p)].request_timeouts, 1); }
  void LowWaterStall() { Add(&low_water_stalls_, 1); }
  void SlowRequest(Proto p) { Add(&per_proto_[Index(p)].slow_requests, 1); }
  void BytesReceived(Proto p, uint64_t n) { Add(&per_proto_[Index(p)].bytes_in, n); }
  void BytesSent(Proto p, uint64_t n) { Add(&per_proto_[Index(p)].bytes_out, n); }

  uint64_t ActiveConnections() const;

  // The whole /metrics page: server metrics plus `stats` and, when not null, `events`.
  std::string RenderPrometheus(const StoreStats& stats, const EventCounters* events = nullptr) const;

 private:
  static size_t Index(Proto p) { return static_cast<size_t>(p); }
  static void Add(std::atomic<uint64_t>* c, uint64_t n) { c->fetch_add(n, std::memory_order_relaxed); }

  struct Histogram {
    std::array<std::atomic<uint64_t>, kBuckets.size() + 1> buckets{};  // Last one: +Inf.
    std::atomic<uint64_t> sum_nanos{0};
  };
  struct ProtoCounters {
    std::atomic<uint64_t> opened{0};
    std::atomic<uint64_t> active{0};
    std::atomic<uint64_t> refused{0};
    std::atomic<uint64_t> protocol_errors{0};
    std::atomic<uint64_t> auth_failures{0};
    std::atomic<uint64_t> auth_lockouts{0};
    std::atomic<uint64_t> auth_refused{0};
    std::atomic<uint64_t> idle_closed{0};
    std::atomic<uint64_t> request_timeouts{0};
    std::atomic<uint64_t> slow_requests{0};
    std::atomic<uint64_t> bytes_in{0};
    std::atomic<uint64_t> bytes_out{0};
  };

  std::atomic<uint64_t> low_water_stalls_{0};
  std::array<std::array<Histogram, static_cast<size_t>(Op::kCount)>,
             static_cast<size_t>(Proto::kCount)> latency_;
  std::array<ProtoCounters, static_cast<size_t>(Proto::kCount)> per_proto_;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_METRICS_H_
