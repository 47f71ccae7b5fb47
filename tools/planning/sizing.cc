#include "tools/planning/sizing.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "kvtier/options.h"
#include "tools/planning/fleet_replay.h"
#include "tools/planning/hf_config.h"
#include "tools/planning/units.h"

namespace kvtier::planning {
namespace {

using nlohmann::json;

Status Field(const json& obj, const char* key, double* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::OK();
  if (!it->is_number()) return Status::InvalidArgument(std::string("'") + key + "' must be a number");
  *out = it->get<double>();
  return Status::OK();
}

Status Field(const json& obj, const char* key, uint64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::OK();
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return Status::InvalidArgument(std::string("'") + key + "' must be a non-negative integer");
  }
  *out = it->get<uint64_t>();
  return Status::OK();
}

Status Field(const json& obj, const char* key, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::OK();
  if (!it->is_string()) return Status::InvalidArgument(std::string("'") + key + "' must be a string");
  *out = it->get<std::string>();
  return Status::OK();
}

Status CheckKeys(const json& obj, const std::set<std::string>& known, const char* where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!known.count(it.key())) {
      return Status::InvalidArgument("unknown field '" + it.key() + "' in " + where);
    }
  }
  return Status::OK();
}

// Expected seconds a gap (exponential, mean g) spends with its age in [a, b).
double GapTimeInBand(double g, double a, double b) {
  if (g <= 0) return 0;
  return g * (std::exp(-a / g) - std::exp(-b / g));
}

double ProbGapInBand(double g, double a, double b) {
  if (g <= 0) return a == 0 && b > 0 ? 1 : 0;
  return std::exp(-a / g) - std::exp(-b / g);
}

}  // namespace

Status Scenario::Validate() const {
  auto bad = [](const std::string& why) { return Status::InvalidArgument(why); };
  if (!(mfu > 0 && mfu <= 1)) return bad("mfu must be in (0, 1]");
  if (!(weight_bytes_per_param > 0 && weight_bytes_per_param <= 4)) {
    return bad("weight_bytes_per_param must be in (0, 4]");
  }
  if (!(hbm_reserve_fraction >= 0 && hbm_reserve_fraction < 1)) {
    return bad("hbm_reserve_fraction must be in [0, 1)");
  }
  if (!(gpu_hour_usd >= 0)) return bad("gpu_hour_usd must not be negative");
  if (models.empty()) return bad("at least one model is required");
  for (const ModelShare& m : models) {
    if (!(m.share > 0)) return bad("model '" + m.model + "': share must be positive");
    if (m.tensor_parallel == 0 || m.tensor_parallel > 1024) {
      return bad("model '" + m.model + "': tp must be from 1 to 1024");
    }
  }
  if (!(sessions_per_day > 0)) return bad("sessions_per_day must be positive");
  if (context.empty()) return bad("the context distribution needs at least one bucket");
  for (const ContextBucket& b : context) {
    if (b.tokens == 0) return bad("context buckets need a positive token count");
    if (!(b.share > 0)) return bad("context bucket shares must be positive");
  }
  if (!(turns_per_session >= 1)) return bad("turns_per_session must be at least 1");
  if (!(idle_seconds >= 0) || !(retention_seconds >= 0) || !(g2_idle_seconds >= 0) ||
      !(g3_idle_seconds >= g2_idle_seconds)) {
    return bad("idle, retention and tier times must not be negative, and g3_idle >= g2_idle");
  }
  if (!(data_reduction_ratio >= 1)) return bad("data_reduction_ratio must be at least 1");
  if (!(g3_drive_bytes >= 0)) return bad("g3_drive_bytes must not be negative");
  if (!(drive_dwpd_rating > 0)) return bad("drive_dwpd_rating must be positive");
  if (nodes == 0 || nodes > 100000) return bad("nodes must be from 1 to 100000");
  if (Result<Router> r = ParseRouter(router); !r.ok()) return r.status();
  if (!(target_hit_rate >= 0 && target_hit_rate < 1)) {
    return bad("target_hit_rate must be in [0, 1) (0 = none)");
  }
  return Status::OK();
}

Result<Scenario> ParseScenarioJson(std::string_view text) {
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return Status::InvalidArgument("scenario is not a JSON object");
  }
  KVTIER_RETURN_IF_ERROR(CheckKeys(
      root,
      {"gpu", "mfu", "kv_dtype", "weight_bytes_per_param", "hbm_reserve_fraction",
       "gpu_hour_usd", "models", "concurrent_sessions", "sessions_per_day", "context",
       "turns_per_session", "new_tokens_per_turn", "shared_prefix_tokens", "idle_seconds",
       "retention_seconds", "g2_idle_seconds", "g3_idle_seconds", "data_reduction_ratio",
       "g3_drive_bytes", "drive_dwpd_rating", "tier_links", "nodes", "router",
       "target_hit_rate"},
      "the scenario"));
  Scenario s;
  KVTIER_RETURN_IF_ERROR(Field(root, "gpu", &s.gpu));
  KVTIER_RETURN_IF_ERROR(Field(root, "mfu", &s.mfu));
  KVTIER_RETURN_IF_ERROR(Field(root, "kv_dtype", &s.kv_dtype));
  KVTIER_RETURN_IF_ERROR(Field(root, "weight_bytes_per_param", &s.weight_bytes_per_param));
  KVTIER_RETURN_IF_ERROR(Field(root, "hbm_reserve_fraction", &s.hbm_reserve_fraction));
  KVTIER_RETURN_IF_ERROR(Field(root, "gpu_hour_usd", &s.gpu_hour_usd));
  KVTIER_RETURN_IF_ERROR(Field(root, "concurrent_sessions", &s.concurrent_sessions));
  KVTIER_RETURN_IF_ERROR(Field(root, "sessions_per_day", &s.sessions_per_day));
  KVTIER_RETURN_IF_ERROR(Field(root, "turns_per_session", &s.turns_per_session));
  KVTIER_RETURN_IF_ERROR(Field(root, "new_tokens_per_turn", &s.new_tokens_per_turn));
  KVTIER_RETURN_IF_ERROR(Field(root, "shared_prefix_tokens", &s.shared_prefix_tokens));
  KVTIER_RETURN_IF_ERROR(Field(root, "idle_seconds", &s.idle_seconds));
  KVTIER_RETURN_IF_ERROR(Field(root, "retention_seconds", &s.retention_seconds));
  KVTIER_RETURN_IF_ERROR(Field(root, "g2_idle_seconds", &s.g2_idle_seconds));
  KVTIER_RETURN_IF_ERROR(Field(root, "g3_idle_seconds", &s.g3_idle_seconds));
  KVTIER_RETURN_IF_ERROR(Field(root, "data_reduction_ratio", &s.data_reduction_ratio));
  KVTIER_RETURN_IF_ERROR(Field(root, "g3_drive_bytes", &s.g3_drive_bytes));
  KVTIER_RETURN_IF_ERROR(Field(root, "drive_dwpd_rating", &s.drive_dwpd_rating));
  KVTIER_RETURN_IF_ERROR(Field(root, "router", &s.router));
  KVTIER_RETURN_IF_ERROR(Field(root, "target_hit_rate", &s.target_hit_rate));
  uint64_t nodes = s.nodes;
  KVTIER_RETURN_IF_ERROR(Field(root, "nodes", &nodes));
  s.nodes = static_cast<uint32_t>(std::min<uint64_t>(nodes, UINT32_MAX));
  if (auto it = root.find("models"); it != root.end()) {
    if (!it->is_array()) return Status::InvalidArgument("'models' must be an array");
    s.models.clear();
    for (const json& m : *it) {
      if (!m.is_object()) return Status::InvalidArgument("'models' entries must be objects");
      KVTIER_RETURN_IF_ERROR(CheckKeys(m, {"model", "share", "tp"}, "a models entry"));
      ModelShare share;
      uint64_t tp = share.tensor_parallel;
      KVTIER_RETURN_IF_ERROR(Field(m, "model", &share.model));
      KVTIER_RETURN_IF_ERROR(Field(m, "share", &share.share));
      KVTIER_RETURN_IF_ERROR(Field(m, "tp", &tp));
      if (share.model.empty()) return Status::InvalidArgument("a models entry lacks 'model'");
      share.tensor_parallel = static_cast<uint32_t>(std::min<uint64_t>(tp, UINT32_MAX));
      s.models.push_back(share);
    }
  }
  if (auto it = root.find("context"); it != root.end()) {
    if (!it->is_array()) return Status::InvalidArgument("'context' must be an array");
    s.context.clear();
    for (const json& b : *it) {
      if (!b.is_object()) return Status::InvalidArgument("'context' entries must be objects");
      KVTIER_RETURN_IF_ERROR(CheckKeys(b, {"tokens", "share"}, "a context entry"));
      ContextBucket bucket;
      KVTIER_RETURN_IF_ERROR(Field(b, "tokens", &bucket.tokens));
      KVTIER_RETURN_IF_ERROR(Field(b, "share", &bucket.share));
      s.context.push_back(bucket);
    }
  }
  if (auto it = root.find("tier_links"); it != root.end()) {
    if (!it->is_object()) return Status::InvalidArgument("'tier_links' must be an object");
    KVTIER_RETURN_IF_ERROR(CheckKeys(*it, {"g2", "g3", "g4"}, "tier_links"));
    KVTIER_RETURN_IF_ERROR(Field(*it, "g2", &s.tier_links[0]));
    KVTIER_RETURN_IF_ERROR(Field(*it, "g3", &s.tier_links[1]));
    KVTIER_RETURN_IF_ERROR(Field(*it, "g4", &s.tier_links[2]));
  }
  KVTIER_RETURN_IF_ERROR(s.Validate());
  return s;
}

Result<Scenario> ParseScenarioToml(std::string_view text) {
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument("scenario is not valid TOML: " + std::string(e.description()) +
                                   " (line " + std::to_string(e.source().begin.line) + ")");
  }
  // TOML maps one to one onto the JSON form, which does the checking.
  std::ostringstream json;
  json << toml::json_formatter{root};
  return ParseScenarioJson(json.str());
}

namespace {

constexpr double kLongestRetentionSeconds = 30 * 86400.0;

Result<SizingReport> ComputeForRetention(const Scenario& s) {
  Result<GpuSpec> gpu = FindGpu(s.gpu);
  if (!gpu.ok()) return gpu.status();
  Result<KvPrecision> precision = ParseKvPrecision(s.kv_dtype);
  if (!precision.ok()) return precision.status();
  std::array<LinkSpec, 3> links;
  for (int i = 0; i < 3; ++i) {
    Result<LinkSpec> link = FindLink(s.tier_links[i]);
    if (!link.ok()) return link.status();
    links[i] = *link;
  }
  double share_sum = 0;
  for (const ModelShare& m : s.models) share_sum += m.share;
  double bucket_sum = 0;
  for (const ContextBucket& b : s.context) bucket_sum += b.share;

  SizingReport report;
  report.scenario = s;
  const double g = s.idle_seconds;
  const double r = s.retention_seconds;
  const std::array<double, 4> edges = {0, std::min(s.g2_idle_seconds, r),
                                       std::min(s.g3_idle_seconds, r), r};
  const double p_return = ProbGapInBand(g, 0, r);
  // A later turn's chance of each tier: its gap's band, on its own node with probability
  // `local` (G2, G3); otherwise G4, which in a fleet holds every session's KV until retention.
  const bool fleet = s.nodes > 1;
  const Router router = *ParseRouter(s.router);
  const double local = !fleet || router == Router::kKvAware || router == Router::kSession
                           ? 1.0
                           : 1.0 / s.nodes;
  std::array<double, 3> served{};
  for (int i = 0; i < 3; ++i) served[i] = ProbGapInBand(g, edges[i], edges[i + 1]);
  if (fleet) {
    served[2] += (1 - local) * (served[0] + served[1]);
    served[0] *= local;
    served[1] *= local;
  }
  double tokens_requested = 0;
  double tokens_hit = 0;
  for (const ModelShare& share : s.models) {
    Result<ModelSpec> spec = ResolveModel(share.model);
    if (!spec.ok()) return spec.status();
    PrefillOptions po;
    po.tensor_parallel = share.tensor_parallel;
    po.mfu = s.mfu;
    po.kv_precision = *precision;
    std::vector<PrefillModel> by_tier;
    for (const LinkSpec& link : links) {
      Result<PrefillModel> pm = PrefillModel::Create(*spec, *gpu, link, po);
      if (!pm.ok()) return pm.status();
      by_tier.push_back(*pm);
    }
    const PrefillModel& g2 = by_tier[0];
    ModelSizing m;
    m.model = spec->name;
    m.tensor_parallel = share.tensor_parallel;
    m.session_share = share.share / share_sum;
    m.weights_bytes_per_gpu = static_cast<double>(CountParameters(*spec).total) *
                              s.weight_bytes_per_param / share.tensor_parallel;
    m.free_hbm_per_gpu_for_kv =
        gpu->hbm_gib * static_cast<double>(kGiB) * (1 - s.hbm_reserve_fraction) -
        m.weights_bytes_per_gpu;
    if (m.free_hbm_per_gpu_for_kv <= 0) {
      return Status::InvalidArgument(
          "model '" + m.model + "' does not fit on " + std::to_string(share.tensor_parallel) +
          " x " + gpu->name + ": its weights need more than the usable HBM per GPU");
    }
    double mean_tokens = 0, mean_bytes = 0, mean_bytes_per_gpu = 0;
    double reuse_tokens = 0, shared_tokens = 0, ttft_without = 0, ttft_with = 0;
    double new_tokens = 0;  // Per session: the tokens whose KV a session's requests first make.
    const double turns = s.turns_per_session;
    for (const ContextBucket& b : s.context) {
      const double q = b.share / bucket_sum;
      const double t = static_cast<double>(b.tokens);
      const double reused = std::max(0.0, t - static_cast<double>(s.new_tokens_per_turn));
      const double shared = std::min(t, static_cast<double>(s.shared_prefix_tokens));
      mean_tokens += q * t;
      mean_bytes += q * static_cast<double>(ResumeBytes(*spec, *precision, b.tokens));
      mean_bytes_per_gpu += q * g2.ReloadBytesPerGpu(t);
      reuse_tokens += q * reused;
      shared_tokens += q * shared;
      const double recompute = g2.RecomputeSeconds(t);
      ttft_without += q * recompute;
      // Later turns: served by the tier their gap ends in, or recomputed after retention.
      double later = (1 - p_return) * recompute;
      for (int i = 0; i < 3; ++i) {
        later += served[i] * by_tier[i].PrefillWithCacheSeconds(reused, t);
      }
      const double later_new = p_return * (t - reused) + (1 - p_return) * t;
      new_tokens += q * ((t - shared) + (turns - 1) * later_new);
      const double first = g2.PrefillWithCacheSeconds(shared, t);
      ttft_with += q * ((turns - 1) * later + first) / turns;
    }
    m.hbm_sessions_per_replica = m.free_hbm_per_gpu_for_kv / mean_bytes_per_gpu;
    m.replicas_for_concurrency =
        static_cast<double>(s.concurrent_sessions) * m.session_share / m.hbm_sessions_per_replica;
    const double session_rate = s.sessions_per_day * m.session_share / 86400;
    const double gap_rate = session_rate * (turns - 1);
    for (int i = 0; i < 3; ++i) {
      // A fleet's G4 holds each session's KV from its put until retention drops it.
      const double from = fleet && i == 2 ? 0 : edges[i];
      m.tier_bytes[i] = mean_bytes * (gap_rate * GapTimeInBand(g, from, edges[i + 1]) +
                                      session_rate * (edges[i + 1] - from));
      report.tier_bytes[i] += m.tier_bytes[i];
    }
    m.kv_bytes_per_token = mean_bytes / mean_tokens;
    m.g4_read_bytes_per_second = gap_rate * served[2] * reuse_tokens * m.kv_bytes_per_token;
    if (fleet) {
      m.g4_write_bytes_per_second = session_rate * new_tokens * m.kv_bytes_per_token;
    } else if (edges[2] < r) {  // One node uploads each session's KV once, on demotion.
      m.g4_write_bytes_per_second = session_rate * mean_bytes;
    }
    report.g4_read_bytes_per_second += m.g4_read_bytes_per_second;
    report.g4_write_bytes_per_second += m.g4_write_bytes_per_second;
    // Each session's KV is written to G3 once, when it first outlasts G2.
    m.g3_write_bytes_per_day =
        edges[1] < r ? session_rate * 86400 * mean_bytes / s.data_reduction_ratio : 0;
    report.g3_write_bytes_per_day += m.g3_write_bytes_per_day;
    const double hit_later = reuse_tokens * p_return;
    const double hits_per_session = (turns - 1) * hit_later + shared_tokens;
    m.token_hit_rate = hits_per_session / (turns * mean_tokens);
    if (hits_per_session > 0) {
      for (int i = 0; i < 3; ++i) {
        m.tier_hit_share[i] = (turns - 1) * reuse_tokens * served[i] / hits_per_session;
      }
      m.tier_hit_share[0] += shared_tokens / hits_per_session;
    }
    m.ttft_without_cache = ttft_without;
    m.ttft_with_cache = ttft_with;
    const double requests_per_day = s.sessions_per_day * m.session_share * turns;
    m.gpu_hours_saved_per_day =
        requests_per_day * (ttft_without - ttft_with) * share.tensor_parallel / 3600;
    m.usd_saved_per_day = m.gpu_hours_saved_per_day * s.gpu_hour_usd;
    report.gpu_hours_saved_per_day += m.gpu_hours_saved_per_day;
    report.usd_saved_per_day += m.usd_saved_per_day;
    tokens_requested += requests_per_day * mean_tokens;
    tokens_hit += requests_per_day * mean_tokens * m.token_hit_rate;
    report.models.push_back(std::move(m));
  }
  report.token_hit_rate = tokens_requested > 0 ? tokens_hit / tokens_requested : 0;
  const double drives =
      s.g3_drive_bytes > 0 ? s.g3_drive_bytes : report.tier_bytes[1] / s.data_reduction_ratio;
  report.g3_drive_writes_per_day = drives > 0 ? report.g3_write_bytes_per_day / drives : 0;
  for (int i = 0; i < 3; ++i) {
    report.tier_bytes_per_node[i] = i == 2 ? report.tier_bytes[i] : report.tier_bytes[i] / s.nodes;
  }
  return report;
}

}  // namespace

Result<SizingReport> ComputeSizing(const Scenario& scenario) {
  KVTIER_RETURN_IF_ERROR(scenario.Validate());
  if (scenario.target_hit_rate == 0) return ComputeForRetention(scenario);
  Scenario s = scenario;
  s.retention_seconds = kLongestRetentionSeconds;
  Result<SizingReport> longest = ComputeForRetention(s);
  if (!longest.ok()) return longest.status();
  if (longest->token_hit_rate < s.target_hit_rate) {
    return Status::InvalidArgument(Format(
        "no retention reaches a token hit rate of %.1f%%: 30 days give %.1f%% (the turns "
        "reuse no more of their prompts)",
        100 * s.target_hit_rate, 100 * longest->token_hit_rate));
  }
  double low = 0;
  double high = kLongestRetentionSeconds;
  for (int i = 0; i < 60 && high - low > 0.5; ++i) {
    s.retention_seconds = (low + high) / 2;
    Result<SizingReport> r = ComputeForRetention(s);
    if (!r.ok()) return r.status();
    (r->token_hit_rate >= s.target_hit_rate ? high : low) = s.retention_seconds;
  }
  s.retention_seconds = std::ceil(high);
  Result<SizingReport> report = ComputeForRetention(s);
  if (report.ok()) report->retention_solved = true;
  return report;
}

}  // namespace kvtier::planning
