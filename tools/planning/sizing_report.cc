// Rendering of a SizingReport as plain text, JSON and a self-contained HTML page.

#include <nlohmann/json.hpp>

#include "tools/planning/chart.h"
#include "tools/planning/sizing.h"
#include "tools/planning/units.h"

namespace kvtier::planning {
namespace {

constexpr const char* kTierNames[3] = {"G2 host DRAM", "G3 local NVMe", "G4 shared"};

std::string Percent(double x) { return Format("%.1f%%", 100 * x); }

}  // namespace

std::string SizingText(const SizingReport& r) {
  const Scenario& s = r.scenario;
  std::string out;
  out += Format("Scenario: %.0f sessions/day, %llu concurrent, %.1f turns, %.0f s idle mean, "
                "retention %.0f s, GPU %s, KV %s\n",
                s.sessions_per_day, static_cast<unsigned long long>(s.concurrent_sessions),
                s.turns_per_session, s.idle_seconds, s.retention_seconds, s.gpu.c_str(),
                s.kv_dtype.c_str());
  if (r.retention_solved) {
    out += Format("Retention %.0f s: the shortest that reaches the target token hit rate %s\n",
                  s.retention_seconds, Percent(s.target_hit_rate).c_str());
  }
  if (s.nodes > 1) {
    out += Format("Fleet: %u nodes, router %s, each with its own G2 and G3; G4 shared, written "
                  "on put\n",
                  s.nodes, s.router.c_str());
  }
  for (const ModelSizing& m : r.models) {
    out += Format("\n%s (tp %u, %s of sessions)\n", m.model.c_str(), m.tensor_parallel,
                  Percent(m.session_share).c_str());
    out += Format("  KV per token (mean context)   %s\n", FormatBytes(m.kv_bytes_per_token).c_str());
    out += Format("  weights per GPU               %s\n", FormatBytes(m.weights_bytes_per_gpu).c_str());
    out += Format("  free HBM per GPU for KV       %s\n", FormatBytes(m.free_hbm_per_gpu_for_kv).c_str());
    out += Format("  sessions in HBM per replica   %.1f\n", m.hbm_sessions_per_replica);
    out += Format("  replicas for concurrency      %.1f\n", m.replicas_for_concurrency);
    for (int i = 0; i < 3; ++i) {
      out += Format("  %-14s capacity      %s (%s reduced), serves %s of hits\n", kTierNames[i],
                    FormatBytes(m.tier_bytes[i]).c_str(),
                    FormatBytes(m.tier_bytes[i] / s.data_reduction_ratio).c_str(),
                    Percent(m.tier_hit_share[i]).c_str());
    }
    out += Format("  token hit rate                %s\n", Percent(m.token_hit_rate).c_str());
    out += Format("  mean TTFT (prefill)           %s without cache, %s with\n",
                  FormatSeconds(m.ttft_without_cache).c_str(),
                  FormatSeconds(m.ttft_with_cache).c_str());
    out += Format("  GPU-hours recovered per day   %.1f ($%.0f)\n", m.gpu_hours_saved_per_day,
                  m.usd_saved_per_day);
    out += Format("  SSD (G3) writes per day       %s\n",
                  FormatBytes(m.g3_write_bytes_per_day).c_str());
  }
  out += "\nTotal capacity per tier (without / with data reduction x" +
         Format("%.2f", s.data_reduction_ratio) + "):\n";
  for (int i = 0; i < 3; ++i) {
    out += Format("  %-14s %12s / %s", kTierNames[i], FormatBytes(r.tier_bytes[i]).c_str(),
                  FormatBytes(r.tier_bytes[i] / s.data_reduction_ratio).c_str());
    if (s.nodes > 1 && i < 2) {
      out += Format("; per node %s / %s", FormatBytes(r.tier_bytes_per_node[i]).c_str(),
                    FormatBytes(r.tier_bytes_per_node[i] / s.data_reduction_ratio).c_str());
    }
    out += "\n";
  }
  out += Format("G4 bandwidth (mean, before data reduction): reads %s/s, writes %s/s\n",
                FormatBytes(r.g4_read_bytes_per_second).c_str(),
                FormatBytes(r.g4_write_bytes_per_second).c_str());
  out += Format("Expected token hit rate %s; GPU-hours recovered per day %.1f ($%.0f)\n",
                Percent(r.token_hit_rate).c_str(), r.gpu_hours_saved_per_day, r.usd_saved_per_day);
  out += Format("SSD (G3) writes %s/day: %.2f drive writes per day of %s, against a "
                "rating of %.2f (%s)\n",
                FormatBytes(r.g3_write_bytes_per_day).c_str(), r.g3_drive_writes_per_day,
                FormatBytes(s.g3_drive_bytes > 0 ? s.g3_drive_bytes
                                                 : r.tier_bytes[1] / s.data_reduction_ratio)
                    .c_str(),
                s.drive_dwpd_rating,
                r.g3_drive_writes_per_day <= s.drive_dwpd_rating ? "within it" : "OVER the rating");
  return out;
}

std::string SizingJson(const SizingReport& r) {
  nlohmann::ordered_json j;
  j["data_reduction_ratio"] = r.scenario.data_reduction_ratio;
  j["token_hit_rate"] = r.token_hit_rate;
  j["gpu_hours_saved_per_day"] = r.gpu_hours_saved_per_day;
  j["usd_saved_per_day"] = r.usd_saved_per_day;
  j["g3_write_bytes_per_day"] = r.g3_write_bytes_per_day;
  j["g3_drive_writes_per_day"] = r.g3_drive_writes_per_day;
  j["drive_dwpd_rating"] = r.scenario.drive_dwpd_rating;
  j["nodes"] = r.scenario.nodes;
  j["router"] = r.scenario.router;
  j["retention_seconds"] = r.scenario.retention_seconds;
  j["retention_solved"] = r.retention_solved;
  j["g4_read_bytes_per_second"] = r.g4_read_bytes_per_second;
  j["g4_write_bytes_per_second"] = r.g4_write_bytes_per_second;
  const char* keys[3] = {"g2", "g3", "g4"};
  for (int i = 0; i < 3; ++i) {
    j["tier_bytes"][keys[i]] = r.tier_bytes[i];
    j["tier_bytes_reduced"][keys[i]] = r.tier_bytes[i] / r.scenario.data_reduction_ratio;
    j["tier_bytes_per_node"][keys[i]] = r.tier_bytes_per_node[i];
  }
  j["models"] = nlohmann::ordered_json::array();
  for (const ModelSizing& m : r.models) {
    nlohmann::ordered_json e;
    e["model"] = m.model;
    e["tp"] = m.tensor_parallel;
    e["session_share"] = m.session_share;
    e["kv_bytes_per_token"] = m.kv_bytes_per_token;
    e["weights_bytes_per_gpu"] = m.weights_bytes_per_gpu;
    e["free_hbm_per_gpu_for_kv"] = m.free_hbm_per_gpu_for_kv;
    e["hbm_sessions_per_replica"] = m.hbm_sessions_per_replica;
    e["replicas_for_concurrency"] = m.replicas_for_concurrency;
    for (int i = 0; i < 3; ++i) {
      e["tier_bytes"][keys[i]] = m.tier_bytes[i];
      e["tier_hit_share"][keys[i]] = m.tier_hit_share[i];
    }
    e["token_hit_rate"] = m.token_hit_rate;
    e["ttft_without_cache_s"] = m.ttft_without_cache;
    e["ttft_with_cache_s"] = m.ttft_with_cache;
    e["gpu_hours_saved_per_day"] = m.gpu_hours_saved_per_day;
    e["usd_saved_per_day"] = m.usd_saved_per_day;
    e["g3_write_bytes_per_day"] = m.g3_write_bytes_per_day;
    e["g4_read_bytes_per_second"] = m.g4_read_bytes_per_second;
    e["g4_write_bytes_per_second"] = m.g4_write_bytes_per_second;
    j["models"].push_back(e);
  }
  return j.dump(2) + "\n";
}

std::string SizingHtml(const SizingReport& r) {
  const double ratio = r.scenario.data_reduction_ratio;
  std::string body = "<p>" + HtmlEscape(Format(
      "%.0f sessions/day, %llu concurrent, %.1f turns per session, %.0f s mean idle gap, "
      "retention %.0f s, KV %s on %s.",
      r.scenario.sessions_per_day, static_cast<unsigned long long>(r.scenario.concurrent_sessions),
      r.scenario.turns_per_session, r.scenario.idle_seconds, r.scenario.retention_seconds,
      r.scenario.kv_dtype.c_str(), r.scenario.gpu.c_str())) + "</p>\n";
  if (r.scenario.nodes > 1) {
    body += "<p>" + HtmlEscape(Format(
        "%u nodes, router %s: per node G2 %s, G3 %s; G4 shared, written on put; G4 reads "
        "%s/s, writes %s/s (mean).",
        r.scenario.nodes, r.scenario.router.c_str(),
        FormatBytes(r.tier_bytes_per_node[0]).c_str(),
        FormatBytes(r.tier_bytes_per_node[1]).c_str(),
        FormatBytes(r.g4_read_bytes_per_second).c_str(),
        FormatBytes(r.g4_write_bytes_per_second).c_str())) + "</p>\n";
  }
  body += "<h2>Capacity per tier</h2>\n<table><tr><th>tier</th><th>capacity</th><th>with data "
          "reduction x" + Format("%.2f", ratio) + "</th></tr>\n";
  for (int i = 0; i < 3; ++i) {
    body += "<tr><td>" + std::string(kTierNames[i]) + "</td><td>" + FormatBytes(r.tier_bytes[i]) +
            "</td><td>" + FormatBytes(r.tier_bytes[i] / ratio) + "</td></tr>\n";
  }
  body += "</table>\n<h2>Per model</h2>\n<table><tr><th>model</th><th>tp</th><th>KV/token</th>"
          "<th>free HBM/GPU</th><th>hit rate</th><th>TTFT without</th><th>TTFT with</th>"
          "<th>GPU-h/day saved</th><th>$/day saved</th></tr>\n";
  for (const ModelSizing& m : r.models) {
    body += "<tr><td>" + HtmlEscape(m.model) + "</td><td>" + std::to_string(m.tensor_parallel) +
            "</td><td>" + FormatBytes(m.kv_bytes_per_token) + "</td><td>" +
            FormatBytes(m.free_hbm_per_gpu_for_kv) + "</td><td>" + Percent(m.token_hit_rate) +
            "</td><td>" + FormatSeconds(m.ttft_without_cache) + "</td><td>" +
            FormatSeconds(m.ttft_with_cache) + "</td><td>" +
            Format("%.1f", m.gpu_hours_saved_per_day) + "</td><td>" +
            Format("%.0f", m.usd_saved_per_day) + "</td></tr>\n";
  }
  body += "</table>\n";
  body += Format("<p><b>Expected token hit rate %s; GPU-hours recovered per day %.1f ($%.0f).</b></p>\n",
                 Percent(r.token_hit_rate).c_str(), r.gpu_hours_saved_per_day,
                 r.usd_saved_per_day);
  return HtmlPage("kvtier sizing report", body);
}

}  // namespace kvtier::planning
