#include "src/engine/fleet_reports.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

namespace kvtier {
namespace {

constexpr std::string_view kPrefix = "fleet.";
constexpr size_t kTimeDigits = 20;

struct ReportName {
  std::string node;
  uint64_t time_us = 0;
};

// The node and time of a report's name; nullopt for any other name.
std::optional<ReportName> ParseName(std::string_view name) {
  if (!name.starts_with(kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.rfind('.');
  if (dot == 0 || dot == std::string_view::npos || name.size() - dot - 1 != kTimeDigits) {
    return std::nullopt;
  }
  ReportName out{std::string(name.substr(0, dot)), 0};
  for (const char c : name.substr(dot + 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    out.time_us = out.time_us * 10 + static_cast<uint64_t>(c - '0');
  }
  return out;
}

}  // namespace

std::string EncodeNodeReport(const NodeReport& report) {
  nlohmann::ordered_json j;
  j["v"] = 1;
  j["node"] = report.node;
  j["time_us"] = report.time_us;
  for (const auto& [name, field] : NodeReport::kCounters) j[name] = report.*field;
  return j.dump();
}

Result<NodeReport> DecodeNodeReport(std::span<const std::byte> body) {
  const char* text = reinterpret_cast<const char*>(body.data());
  const nlohmann::json j = nlohmann::json::parse(text, text + body.size(), nullptr,
                                                 /*allow_exceptions=*/false);
  auto bad = [](const std::string& why) { return Status::InvalidArgument("fleet report: " + why); };
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("v") || j["v"] != 1) return bad("unknown version");
  if (!j.contains("node") || !j["node"].is_string() || !j.contains("time_us") ||
      !j["time_us"].is_number_unsigned()) {
    return bad("missing fields");
  }
  NodeReport r;
  r.node = j["node"].get<std::string>();
  r.time_us = j["time_us"].get<uint64_t>();
  for (const auto& [name, field] : NodeReport::kCounters) {
    if (!j.contains(name) || !j[name].is_number_unsigned()) return bad(std::string("no ") + name);
    r.*field = j[name].get<uint64_t>();
  }
  return r;
}

std::string NodeReportName(std::string_view node, uint64_t time_us) {
  char time[kTimeDigits + 1];
  std::snprintf(time, sizeof(time), "%020llu", static_cast<unsigned long long>(time_us));
  return std::string(kPrefix) + std::string(node) + "." + time;
}

Status ReadNodeReports(encryption::RecordStore* records, std::string_view self,
                       uint64_t forget_before_us, uint64_t superseded_us,
                       std::vector<NodeReport>* reports, uint64_t* skipped) {
  Result<std::vector<std::string>> names = records->ListRecords(kPrefix);
  if (!names.ok()) return names.status();
  std::map<std::string, std::vector<std::pair<uint64_t, std::string>>, std::less<>> by_node;
  for (std::string& name : *names) {
    std::optional<ReportName> parsed = ParseName(name);
    if (!parsed || parsed->node == self) continue;
    if (parsed->time_us < forget_before_us) {
      (void)records->DeleteRecord(name);  // Failing, it is tried again at the next read.
      continue;
    }
    by_node[parsed->node].emplace_back(parsed->time_us, std::move(name));
  }
  std::map<std::string, NodeReport, std::less<>> last;
  for (NodeReport& r : *reports) last.emplace(r.node, std::move(r));
  reports->clear();
  for (auto& [node, listed] : by_node) {
    std::sort(listed.begin(), listed.end());
    const uint64_t newest = listed.back().first;
    for (size_t i = 0; i + 1 < listed.size(); ++i) {
      if (listed[i].first + superseded_us < newest) (void)records->DeleteRecord(listed[i].second);
    }
    Result<std::vector<std::byte>> body = records->ReadRecord(listed.back().second);
    Result<NodeReport> report = body.ok() ? DecodeNodeReport(*body) : body.status();
    if (report.ok() && report->node == node) {
      reports->push_back(std::move(report).value());
      continue;
    }
    // Deleted between the listing and the read (its node wrote the next), or unreadable.
    if (body.ok()) ++*skipped;
    if (auto it = last.find(node); it != last.end()) reports->push_back(std::move(it->second));
  }
  return Status::OK();
}

}  // namespace kvtier
