// The janitor of S3Tier: its lease and its housekeeping pass.
//
// Lease: the object kvtier-g4/v1/lease/janitor holding "kvtier-g4-lease 1\n<holder>\n
// <generation>\n<renewed_us>\n". Time is the service's own: "now" is the Date header of the
// lease GET, the last renewal is the object's Last-Modified (with storage_clock = false,
// both come from env and renewed_us instead).
//   take (absent):        PUT with If-None-Match: * (412 = another node was first). Without
//                         conditional writes: PUT, then GET it back; the race this leaves
//                         (two nodes each reading their own write) can make two janitors for
//                         one pass; their deletes are idempotent and computed by the same rule.
//   renew (ours):         PUT the same body again while our lease is still valid.
//   take over (expired):  now > Last-Modified + lease_us + margin: DELETE, then take.
//   act:                  only while local_now < renewal_start + lease_us - margin.
//
// Pass: list objects and access markers; access time = the later Last-Modified of the two;
// then the shared victim rule (janitor_policy.h). Session and access markers whose object is
// gone and that are older than temp_grace_us are removed. S3 PUTs are atomic, so there are no
// temp objects to clean.

#include <map>

#include "src/tier/s3/s3_tier.h"
#include "src/tier/shared/janitor_policy.h"
#include "src/tier/shared/object_format.h"

namespace kvtier {

using s3::S3Request;
using s3::S3Response;

namespace {

constexpr std::string_view kLeaseMagic = "kvtier-g4-lease 1";

struct LeaseContent {
  std::string holder;
  uint64_t generation = 0;
  uint64_t renewed_us = 0;
};

std::string EncodeLease(const LeaseContent& l) {
  return std::string(kLeaseMagic) + "\n" + l.holder + "\n" + std::to_string(l.generation) +
         "\n" + std::to_string(l.renewed_us) + "\n";
}

// Unparsable content is an anonymous holder; it expires like any other.
LeaseContent DecodeLease(const std::vector<std::byte>& bytes) {
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  LeaseContent l;
  if (lines.size() != 4 || lines[0] != kLeaseMagic) return l;
  auto parse = [](const std::string& s, uint64_t* v) {
    if (s.empty() || s.size() > 20) return false;
    *v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      *v = *v * 10 + static_cast<uint64_t>(c - '0');
    }
    return true;
  };
  LeaseContent parsed;
  parsed.holder = lines[1];
  if (!parse(lines[2], &parsed.generation) || !parse(lines[3], &parsed.renewed_us)) return l;
  return parsed;
}

std::string LeaseKey() { return std::string(g4::kPrefix) + "/lease/janitor"; }

uint64_t HeaderTime(const S3Response& r, const char* name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? 0 : s3::ParseHttpDate(it->second);
}

}  // namespace

bool S3Tier::LeaseValid() {
  if (lease_generation_ == 0 || lease_renewed_local_us_ == 0) return false;
  const SharedJanitorOptions& j = options_.janitor;
  return env_->NowMicros() < lease_renewed_local_us_ + j.lease_us - j.clock_margin_us;
}

Result<bool> S3Tier::CreateLease(uint64_t generation) {
  const uint64_t start = env_->NowMicros();
  const std::string body = EncodeLease({options_.node_id, generation, start});
  S3Request put;
  put.method = "PUT";
  put.key = LeaseKey();
  put.body = std::as_bytes(std::span(body.data(), body.size()));
  const bool conditional = conditional_put();
  if (conditional) put.headers = {{"if-none-match", "*"}};
  S3Response r = client_->ExecuteOne(put);
  if (r.transport.ok() && (r.http_status == 412 || r.http_status == 409)) return false;
  if (!r.ok()) return r.ToStatus("S3 PUT lease");
  if (!conditional) {
    S3Request get;
    get.method = "GET";
    get.key = LeaseKey();
    S3Response back = client_->ExecuteOne(get);
    if (!back.ok()) return back.ToStatus("S3 GET lease");
    const LeaseContent mine = DecodeLease(back.body);
    if (mine.holder != options_.node_id || mine.generation != generation) return false;
  }
  lease_generation_ = generation;
  lease_renewed_local_us_ = start;
  return true;
}

Result<bool> S3Tier::AcquireLease() {
  const uint64_t start = env_->NowMicros();
  S3Request get;
  get.method = "GET";
  get.key = LeaseKey();
  S3Response r = client_->ExecuteOne(get);
  if (r.transport.ok() && r.http_status == 404) return CreateLease(lease_generation_ + 1);
  if (!r.ok()) return r.ToStatus("S3 GET lease");
  const LeaseContent current = DecodeLease(r.body);
  const SharedJanitorOptions& j = options_.janitor;
  uint64_t now = options_.storage_clock ? HeaderTime(r, "date") : start;
  uint64_t renewed = options_.storage_clock ? HeaderTime(r, "last-modified") : current.renewed_us;
  if (now == 0) now = start;  // A service without a Date header: our clock, within the margin.
  if (lease_generation_ != 0 && current.holder == options_.node_id &&
      current.generation == lease_generation_) {
    if (!LeaseValid()) {
      // Our own lease lapsed locally: others may already be taking over. Start afresh.
      lease_generation_ = 0;
    } else {
      const std::string body = EncodeLease({options_.node_id, lease_generation_, start});
      S3Request put;
      put.method = "PUT";
      put.key = LeaseKey();
      put.body = std::as_bytes(std::span(body.data(), body.size()));
      S3Response renewed_resp = client_->ExecuteOne(put);
      if (!renewed_resp.ok()) return renewed_resp.ToStatus("S3 PUT lease (renew)");
      lease_renewed_local_us_ = start;
      return true;
    }
  }
  lease_generation_ = 0;
  if (now <= renewed + j.lease_us + j.clock_margin_us) return false;
  env_->Log("S3Tier: taking over the janitor lease of '" + current.holder + "'");
  S3Request del;
  del.method = "DELETE";
  del.key = LeaseKey();
  S3Response d = client_->ExecuteOne(del);
  if (!d.ok() && !(d.transport.ok() && d.http_status == 404)) {
    return d.ToStatus("S3 DELETE expired lease");
  }
  return CreateLease(current.generation + 1);
}

Status S3Tier::DeleteWhileLeased(const std::vector<std::string>& keys, uint64_t* removed) {
  if (keys.empty()) return Status::OK();
  if (!LeaseValid()) return Status::Aborted("janitor lease expired during a pass");
  return DeleteKeys(keys, removed);
}

Result<JanitorReport> S3Tier::RunJanitorOnce() {
  ProbeIfPending();
  MutexLock lock(&janitor_mu_);
  JanitorReport report;
  KVTIER_RETURN_IF_ERROR(counters_.StartJanitorPass(AcquireLease(), &report));
  if (!report.lease_held) return report;

  const std::string objects_prefix = std::string(g4::kPrefix) + "/objects/";
  const std::string access_prefix = std::string(g4::kPrefix) + "/access/";
  const std::string sessions_prefix = std::string(g4::kPrefix) + "/sessions/";
  Result<std::vector<s3::S3Client::ListedObject>> objects = client_->List(objects_prefix);
  if (!objects.ok()) return objects.status();
  Result<std::vector<s3::S3Client::ListedObject>> access = client_->List(access_prefix);
  if (!access.ok()) return access.status();
  // "now" on the service's clock: the newest Last-Modified seen is a lower bound, the lease
  // renewal a close one.
  uint64_t now = env_->NowMicros();
  if (options_.storage_clock) {
    S3Request head;
    head.method = "HEAD";
    head.key = LeaseKey();
    const uint64_t date = HeaderTime(client_->ExecuteOne(head), "date");
    if (date != 0) now = date;
  }
  // Object key suffix after the objects/ or access/ prefix: "<tenant>/<kk>/<hex>".
  std::map<std::string, uint64_t> access_by_suffix;
  for (const auto& a : *access) {
    access_by_suffix[a.key.substr(access_prefix.size())] = a.last_modified_us;
  }
  std::vector<g4::JanitorCandidate> candidates;
  std::map<std::string, bool> present;
  for (const auto& o : *objects) {
    const std::string suffix = o.key.substr(objects_prefix.size());
    const size_t slash = suffix.find('/');
    if (slash == std::string::npos) continue;
    uint64_t access_us = o.last_modified_us;
    auto it = access_by_suffix.find(suffix);
    if (it != access_by_suffix.end()) access_us = std::max(access_us, it->second);
    candidates.push_back({o.key, suffix.substr(0, slash), o.size, access_us});
    present[suffix] = true;
  }
  const std::vector<g4::Victim> victims =
      g4::SelectVictims(candidates, now, options_.janitor, &report);
  constexpr size_t kBatch = 256;
  for (size_t begin = 0; begin < victims.size(); begin += kBatch) {
    if (!LeaseValid()) return Status::Aborted("janitor lease expired during a pass");
    const size_t n = std::min(kBatch, victims.size() - begin);
    std::vector<std::string> keys;
    for (size_t k = 0; k < n; ++k) keys.push_back(candidates[victims[begin + k].index].name);
    uint64_t deleted = 0;
    KVTIER_RETURN_IF_ERROR(DeleteKeys(keys, &deleted));
    for (size_t k = 0; k < n; ++k) {
      g4::CountEviction(victims[begin + k].reason, &report);
      const std::string& name = candidates[victims[begin + k].index].name;
      present.erase(name.substr(objects_prefix.size()));
    }
    counters_.janitor_evicted += n;
    counters_.deletes += n;
  }

  // Markers of objects that are gone, once older than the grace (a put writes its session
  // marker first).
  Result<std::vector<s3::S3Client::ListedObject>> sessions = client_->List(sessions_prefix);
  if (!sessions.ok()) return sessions.status();
  std::vector<std::string> orphans;
  const uint64_t grace = options_.janitor.temp_grace_us;
  for (const auto& m : *sessions) {
    // sessions/<tenant>/<session>/<hex> -> <tenant>/<kk>/<hex>
    const std::string suffix = m.key.substr(sessions_prefix.size());
    const size_t a = suffix.find('/');
    const size_t b = a == std::string::npos ? a : suffix.find('/', a + 1);
    if (b == std::string::npos) continue;
    const std::string hex = suffix.substr(b + 1);
    if (hex.size() < 2) continue;
    const std::string object = suffix.substr(0, a) + "/" + hex.substr(0, 2) + "/" + hex;
    if (present.count(object) == 0 && now > m.last_modified_us + grace) orphans.push_back(m.key);
  }
  for (const auto& a : *access) {
    if (present.count(a.key.substr(access_prefix.size())) == 0 &&
        now > a.last_modified_us + grace) {
      orphans.push_back(a.key);
    }
  }
  KVTIER_RETURN_IF_ERROR(DeleteWhileLeased(orphans, &report.markers_removed));

  // Deletion notices past their retention.
  Result<std::vector<s3::S3Client::ListedObject>> notices = client_->List(g4::NoticesPrefix());
  if (!notices.ok()) return notices.status();
  std::vector<std::string> old_notices;
  for (const auto& n : *notices) {
    if (now > n.last_modified_us + options_.janitor.notice_retention_us) {
      old_notices.push_back(n.key);
    }
  }
  KVTIER_RETURN_IF_ERROR(DeleteWhileLeased(old_notices, &report.notices_removed));
  return report;
}

}  // namespace kvtier
