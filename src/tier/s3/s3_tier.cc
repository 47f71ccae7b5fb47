#include "src/tier/s3/s3_tier.h"

#include <chrono>
#include <cstdlib>
#include <utility>

#include "src/tier/shared/object_format.h"

namespace kvtier {

using s3::S3Request;
using s3::S3Response;

namespace {

constexpr char kMetaFormat[] = "x-amz-meta-kvtier-format";
constexpr char kMetaValueBytes[] = "x-amz-meta-kvtier-value-bytes";
constexpr char kMetaSession[] = "x-amz-meta-kvtier-session";
constexpr char kMetaCreated[] = "x-amz-meta-kvtier-created-us";
constexpr char kMetaDtype[] = "x-amz-meta-kvtier-dtype";

// Strict decimal parse; false for anything else.
bool ParseU64(const std::map<std::string, std::string>& headers, const char* name,
              uint64_t* out) {
  auto it = headers.find(name);
  if (it == headers.end() || it->second.empty() || it->second.size() > 20) return false;
  uint64_t v = 0;
  for (char c : it->second) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace

Result<std::unique_ptr<S3Tier>> S3Tier::Open(S3TierOptions options) {
  if (options.node_id.empty()) options.node_id = g4::DefaultNodeId();
  if (!g4::ValidNodeId(options.node_id)) {
    return Status::InvalidArgument("S3Tier: node_id must be 1 to 64 of [A-Za-z0-9_-]");
  }
  if (options.env == nullptr) options.env = Env::Default();
  if (options.client.env == nullptr) options.client.env = options.env;
  const SharedJanitorOptions& j = options.janitor;
  if (j.lease_us <= 2 * j.clock_margin_us) {
    return Status::InvalidArgument("S3Tier: lease_us must exceed 2 x clock_margin_us");
  }
  if (options.codec_threads > 64) options.codec_threads = 64;
  Result<std::unique_ptr<s3::S3Client>> client = s3::S3Client::Create(options.client);
  if (!client.ok()) return client.status();
  S3Request head;
  head.method = "HEAD";
  S3Response resp = (*client)->ExecuteOne(head);
  if (!resp.ok()) {
    return resp.ToStatus("S3Tier: bucket '" + options.client.bucket + "' at " +
                         options.client.endpoint);
  }
  std::unique_ptr<S3Tier> tier(new S3Tier(std::move(options), std::move(*client)));
  switch (tier->options_.conditional_put) {
    case S3TierOptions::ConditionalPut::kOn:
      tier->conditional_put_ = true;
      break;
    case S3TierOptions::ConditionalPut::kOff:
      tier->conditional_put_ = false;
      break;
    case S3TierOptions::ConditionalPut::kAuto:
      KVTIER_RETURN_IF_ERROR(tier->ProbeConditionalPut());
      break;
  }
  if (tier->options_.janitor.janitor_interval_us > 0) {
    tier->bg_thread_ = std::thread([t = tier.get()] { t->BackgroundLoop(); });
  }
  return tier;
}

S3Tier::S3Tier(S3TierOptions options, std::unique_ptr<s3::S3Client> client)
    : options_(std::move(options)),
      env_(options_.env),
      client_(std::move(client)),
      pool_(options_.codec_threads) {}

S3Tier::~S3Tier() {
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_thread_.joinable()) bg_thread_.join();
}

void S3Tier::BackgroundLoop() {
  std::unique_lock<std::mutex> lock(bg_mu_);
  while (!bg_stop_) {
    lock.unlock();
    Result<JanitorReport> report = RunJanitorOnce();
    if (!report.ok()) env_->Log("S3Tier janitor: " + report.status().ToString());
    lock.lock();
    bg_cv_.wait_for(lock, std::chrono::microseconds(options_.janitor.janitor_interval_us),
                    [this] { return bg_stop_; });
  }
}

Status S3Tier::ProbeConditionalPut() {
  // Two conditional creates of one key: a service that honours If-None-Match refuses the
  // second with 412. One that ignores the header accepts both.
  const std::string probe = std::string(g4::kPrefix) + "/lease/probe." + options_.node_id;
  const std::string body = "kvtier conditional-put probe";
  S3Request put;
  put.method = "PUT";
  put.key = probe;
  put.headers = {{"if-none-match", "*"}};
  put.body = AsBytes(body);
  S3Response first = client_->ExecuteOne(put);
  if (first.transport.ok() && first.http_status == 412) {
    conditional_put_ = true;
  } else if (!first.ok()) {
    const Status s = first.ToStatus("S3Tier: conditional put probe");
    if (s.code() != StatusCode::kUnimplemented && s.code() != StatusCode::kInvalidArgument) {
      return s;
    }
    conditional_put_ = false;
  } else {
    S3Response second = client_->ExecuteOne(put);
    if (!second.transport.ok()) return second.transport;
    conditional_put_ = second.http_status == 412;
  }
  S3Request del;
  del.method = "DELETE";
  del.key = probe;
  (void)client_->ExecuteOne(del);
  env_->Log(std::string("S3Tier: conditional put (If-None-Match) ") +
            (conditional_put_ ? "supported"
             : options_.check_before_put ? "not supported: HEAD before PUT"
                                         : "not supported: a repeated PUT replaces the object"));
  return Status::OK();
}

// --- Put ------------------------------------------------------------------------------------

std::vector<Status> S3Tier::PutMany(std::string_view tenant, std::span<const SharedPut> puts) {
  std::vector<Status> out(puts.size());
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) {
    for (Status& s : out) s = component.status();
    return out;
  }
  const uint64_t now = env_->NowMicros();
  std::vector<g4::SealedObject> objects(puts.size());
  pool_.ParallelFor(puts.size(), [&](size_t i) {
    const SharedPut& p = puts[i];
    Result<g4::SealedObject> o =
        g4::SealObjectParts(options_.codec, tenant, p.key, p.session,
                            p.created_us != 0 ? p.created_us : now, p.dtype, p.value);
    if (o.ok()) {
      objects[i] = std::move(*o);
    } else {
      out[i] = o.status();
    }
  });
  // Each object is a chain of requests, run without waiting for the other objects' chains:
  // HEAD (with check_before_put where the service lacks conditional create; a hit ends the
  // chain), then the session marker (so that an object is never visible without its index
  // entry), then the object.
  std::vector<size_t> todo;
  for (size_t i = 0; i < puts.size(); ++i) {
    if (out[i].ok()) todo.push_back(i);
  }
  std::vector<std::string> object_names(todo.size());
  auto object_put = [&](size_t k) {
    const SharedPut& p = puts[todo[k]];
    S3Request r;
    r.method = "PUT";
    r.key = object_names[k];
    r.body = objects[todo[k]].header;
    r.body_tail = objects[todo[k]].payload;
    r.headers = {{kMetaFormat, std::to_string(g4::kObjectFormatVersion)},
                 {kMetaValueBytes, std::to_string(p.value.size())},
                 {kMetaSession, std::to_string(p.session)},
                 {kMetaCreated, std::to_string(p.created_us != 0 ? p.created_us : now)}};
    if (p.dtype) r.headers.emplace_back(kMetaDtype, std::to_string(static_cast<int>(*p.dtype)));
    if (conditional_put_) r.headers.emplace_back("if-none-match", "*");
    return r;
  };
  auto marker_or_object = [&](size_t k) {
    const SharedPut& p = puts[todo[k]];
    if (p.session == 0) return object_put(k);
    S3Request r;
    r.method = "PUT";
    r.key = g4::SessionMarkerName(*component, p.session, p.key);
    return r;
  };
  std::vector<S3Request> first(todo.size());
  for (size_t k = 0; k < todo.size(); ++k) {
    object_names[k] = g4::ObjectName(*component, puts[todo[k]].key);
    if (conditional_put_ || !options_.check_before_put) {
      first[k] = marker_or_object(k);
    } else {
      first[k].method = "HEAD";
      first[k].key = object_names[k];
    }
  }
  // The outcome of each chain, as of its last completed request (a retried chain overwrites).
  enum class Outcome { kStored, kExisted, kFailed };
  std::vector<Outcome> outcome(todo.size(), Outcome::kFailed);
  auto on_complete = [&](size_t k, const S3Request& req,
                         S3Response& r) -> std::optional<S3Request> {
    const size_t i = todo[k];
    out[i] = Status::OK();
    outcome[k] = Outcome::kFailed;
    if (req.method == "HEAD") {
      if (r.ok()) {
        outcome[k] = Outcome::kExisted;
      } else if (r.transport.ok() && r.http_status == 404) {
        return marker_or_object(k);
      } else {
        out[i] = r.ToStatus("S3 HEAD before put");
      }
    } else if (req.key != object_names[k]) {  // The session marker.
      if (r.ok()) return object_put(k);
      out[i] = r.ToStatus("S3 PUT session marker");
    } else if (r.ok()) {
      outcome[k] = Outcome::kStored;
    } else if (r.transport.ok() && (r.http_status == 412 || r.http_status == 409)) {
      // 412: another writer published first. 409: a concurrent conditional write of the same
      // key is in progress (it carries the same bytes).
      outcome[k] = Outcome::kExisted;
    } else {
      out[i] = r.ToStatus("S3 PUT object");
    }
    return std::nullopt;
  };
  client_->Execute(first, on_complete);
  for (size_t k = 0; k < todo.size(); ++k) {
    if (outcome[k] == Outcome::kStored) {
      counters_.puts++;
      counters_.put_bytes += objects[todo[k]].size();
    } else if (outcome[k] == Outcome::kExisted) {
      counters_.put_existing++;
    }
  }
  for (const Status& s : out) counters_.CountError(s);
  return out;
}

// --- Exists / Get ---------------------------------------------------------------------------

std::vector<std::optional<SharedObjectInfo>> S3Tier::ExistsMany(std::string_view tenant,
                                                                std::span<const BlockKey> keys) {
  std::vector<std::optional<SharedObjectInfo>> out(keys.size());
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return out;
  std::vector<S3Request> heads(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    heads[i].method = "HEAD";
    heads[i].key = g4::ObjectName(*component, keys[i]);
  }
  std::vector<S3Response> results = client_->Execute(heads);
  for (size_t i = 0; i < keys.size(); ++i) {
    const S3Response& r = results[i];
    if (!r.ok()) {
      counters_.CountError(r.ToStatus("S3 HEAD"));
      continue;
    }
    uint64_t format = 0;
    SharedObjectInfo info;
    uint64_t dtype = 0;
    if (!ParseU64(r.headers, kMetaFormat, &format) || format != g4::kObjectFormatVersion ||
        !ParseU64(r.headers, kMetaValueBytes, &info.value_bytes) ||
        !ParseU64(r.headers, kMetaSession, &info.session) ||
        !ParseU64(r.headers, kMetaCreated, &info.created_us) ||
        !ParseU64(r.headers, "content-length", &info.stored_bytes)) {
      continue;  // Another format version, or not our object: absent for this build.
    }
    if (ParseU64(r.headers, kMetaDtype, &dtype) && dtype >= 1 && dtype <= 5) {
      info.dtype = static_cast<KvDtype>(dtype);
    }
    out[i] = info;
  }
  return out;
}

std::vector<Result<std::vector<std::byte>>> S3Tier::GetMany(std::string_view tenant,
                                                           std::span<const BlockKey> keys) {
  std::vector<Result<std::vector<std::byte>>> out;
  out.reserve(keys.size());
  Result<std::string> component = g4::TenantComponent(tenant);
  for (size_t i = 0; i < keys.size(); ++i) {
    out.emplace_back(component.ok() ? Status::NotFound("not read") : component.status());
  }
  if (!component.ok()) return out;
  std::vector<S3Request> gets(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    gets[i].method = "GET";
    gets[i].key = g4::ObjectName(*component, keys[i]);
    gets[i].head_bytes = g4::ObjectHeaderBytes(tenant.size());
    gets[i].checksum_body = true;
  }
  // Each object is checked (and decoded) as it arrives, while the others are in flight.
  std::vector<char> bad(keys.size(), 0);
  auto on_complete = [&](size_t i, const S3Request& /*req*/,
                         S3Response& r) -> std::optional<S3Request> {
    bad[i] = 0;
    if (!r.ok()) {
      out[i] = r.ToStatus("S3 GET");
      return std::nullopt;
    }
    bool stored_bad = false;
    size_t header_bytes = 0;
    // The header arrived in r.head, the payload in r.body.
    Result<g4::ObjectHeader> header = g4::VerifyHeader(
        tenant, keys[i], r.head, r.head.size() + r.body.size(), &header_bytes, &stored_bad);
    if (header.ok() && header_bytes != r.head.size()) {
      header = Status::DataLoss("G4 object header of " + std::to_string(header_bytes) +
                                " bytes, expected " + std::to_string(r.head.size()));
      stored_bad = true;
    }
    if (header.ok()) {
      out[i] = g4::OpenPayload(options_.codec, tenant, keys[i], *header, std::move(r.body),
                               r.body_checksum, &stored_bad);
    } else {
      out[i] = header.status();
    }
    bad[i] = stored_bad ? 1 : 0;
    return std::nullopt;
  };
  std::vector<S3Response> results = client_->Execute(gets, on_complete);
  // Access recency: an empty marker per object, at most once per touch interval per node.
  const uint64_t now = env_->NowMicros();
  std::vector<std::string> corrupt;
  std::vector<S3Request> touches;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out[i].ok()) {
      counters_.hits++;
      counters_.get_bytes += out[i]->size();
      const std::string marker = g4::AccessMarkerName(*component, keys[i]);
      auto lm = results[i].headers.find("last-modified");
      uint64_t last = lm != results[i].headers.end() ? s3::ParseHttpDate(lm->second) : 0;
      MutexLock lock(&touch_mu_);
      auto it = touched_.find(marker);
      if (it != touched_.end()) last = std::max(last, it->second);
      if (now > last && now - last > options_.janitor.touch_interval_us) {
        if (touched_.size() > 100000) touched_.clear();
        touched_[marker] = now;
        S3Request t;
        t.method = "PUT";
        t.key = marker;
        touches.push_back(std::move(t));
      }
      continue;
    }
    counters_.misses++;
    if (out[i].status().code() == StatusCode::kDataLoss) counters_.corrupt++;
    if (bad[i]) corrupt.push_back(g4::ObjectName(*component, keys[i]));
    counters_.CountError(out[i].status());
  }
  for (const S3Response& r : client_->Execute(touches)) {
    if (r.ok()) {
      counters_.touches++;
    } else {
      counters_.CountError(r.ToStatus("S3 PUT access marker"));
    }
  }
  if (!corrupt.empty()) {
    for (const std::string& k : corrupt) env_->Log("S3Tier: removing corrupt object " + k);
    uint64_t removed = 0;
    counters_.CountError(DeleteKeys(corrupt, &removed));
  }
  return out;
}

// --- Deletion notices ------------------------------------------------------------------------

Status S3Tier::PublishNotice(std::string_view name, std::span<const std::byte> body) {
  if (!g4::ValidNoticeName(name)) {
    return Status::InvalidArgument("bad notice name \"" + std::string(name) + "\"");
  }
  S3Request put;
  put.method = "PUT";
  put.key = g4::NoticesPrefix() + std::string(name);
  put.body = body;
  const S3Response r = client_->ExecuteOne(put);
  const Status s = r.ok() ? Status::OK() : r.ToStatus("S3 PUT notice");
  counters_.CountError(s);
  return s;
}

Result<std::vector<SharedNotice>> S3Tier::NoticesAfter(std::string_view after,
                                                       const NoticeFilter& skip) {
  const std::string prefix = g4::NoticesPrefix();
  Result<std::vector<s3::S3Client::ListedObject>> listed =
      client_->List(prefix, after.empty() ? "" : prefix + std::string(after));
  if (!listed.ok()) {
    counters_.CountError(listed.status());
    return listed.status();
  }
  std::vector<S3Request> gets;
  std::vector<SharedNotice> out;
  for (const auto& o : *listed) {
    const std::string name = o.key.substr(prefix.size());
    if (!g4::ValidNoticeName(name) || name <= after || (skip && skip(name))) continue;
    S3Request get;
    get.method = "GET";
    get.key = o.key;
    gets.push_back(std::move(get));
    out.push_back({name, o.last_modified_us, {}});
  }
  std::vector<SharedNotice> read;
  std::vector<S3Response> responses = client_->Execute(gets);
  for (size_t i = 0; i < out.size(); ++i) {
    S3Response& r = responses[i];
    if (r.transport.ok() && r.http_status == 404) continue;  // Removed by the janitor meanwhile.
    if (!r.ok()) {
      const Status s = r.ToStatus("S3 GET notice");
      counters_.CountError(s);
      return s;
    }
    out[i].body = std::move(r.body);
    read.push_back(std::move(out[i]));
  }
  return read;
}

// --- Deletes --------------------------------------------------------------------------------

Status S3Tier::DeleteKeys(const std::vector<std::string>& keys, uint64_t* deleted) {
  // One request deletes up to 1000 objects; worth it from a handful of keys on.
  if (keys.size() >= 4 && batch_delete_.load(std::memory_order_relaxed)) {
    std::vector<Status> statuses = client_->DeleteObjects(keys);
    if (statuses.empty() || statuses[0].code() != StatusCode::kUnimplemented) {
      Status first;
      for (const Status& s : statuses) {
        if (s.ok()) {
          (*deleted)++;
        } else if (first.ok()) {
          first = s;
        }
      }
      counters_.CountError(first);
      return first;
    }
    batch_delete_.store(false, std::memory_order_relaxed);
    env_->Log("S3Tier: multi-object delete not supported: objects are deleted one by one");
  }
  std::vector<S3Request> requests(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    requests[i].method = "DELETE";
    requests[i].key = keys[i];
  }
  Status first;
  for (const S3Response& r : client_->Execute(requests)) {
    if (r.ok() || (r.transport.ok() && r.http_status == 404)) {
      (*deleted)++;
    } else if (first.ok()) {
      first = r.ToStatus("S3 DELETE");
    }
  }
  counters_.CountError(first);
  return first;
}

Status S3Tier::Delete(std::string_view tenant, const BlockKey& key) {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  std::optional<SharedObjectInfo> info = ExistsMany(tenant, {&key, 1})[0];
  std::vector<std::string> keys = {g4::ObjectName(*component, key),
                                   g4::AccessMarkerName(*component, key)};
  if (info && info->session != 0) {
    keys.push_back(g4::SessionMarkerName(*component, info->session, key));
  }
  uint64_t deleted = 0;
  KVTIER_RETURN_IF_ERROR(DeleteKeys(keys, &deleted));
  if (info) counters_.deletes++;
  return Status::OK();
}

Result<uint64_t> S3Tier::DeleteSession(std::string_view tenant, SessionId session) {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  if (session == 0) return Status::InvalidArgument("session 0 names no session");
  const std::string prefix = g4::SessionPrefix(*component, session);
  Result<std::vector<s3::S3Client::ListedObject>> markers = client_->List(prefix);
  if (!markers.ok()) {
    counters_.CountError(markers.status());
    return markers.status();
  }
  std::vector<BlockKey> keys;
  std::vector<std::string> marker_keys;
  for (const auto& m : *markers) {
    Result<BlockKey> key = BlockKey::FromHex(m.key.substr(prefix.size()));
    if (key.ok()) keys.push_back(*key);
    marker_keys.push_back(m.key);
  }
  // A marker's block may have been deleted and put again by another session since.
  std::vector<std::optional<SharedObjectInfo>> infos = ExistsMany(tenant, keys);
  std::vector<std::string> doomed;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (infos[i] && infos[i]->session == session) {
      doomed.push_back(g4::ObjectName(*component, keys[i]));
      doomed.push_back(g4::AccessMarkerName(*component, keys[i]));
    }
  }
  uint64_t deleted = 0;
  KVTIER_RETURN_IF_ERROR(DeleteKeys(doomed, &deleted));
  uint64_t markers_deleted = 0;
  KVTIER_RETURN_IF_ERROR(DeleteKeys(marker_keys, &markers_deleted));
  counters_.deletes += doomed.size() / 2;
  return uint64_t{doomed.size() / 2};
}

Result<uint64_t> S3Tier::DeleteTenant(std::string_view tenant) {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  uint64_t objects = 0;
  // Objects first (what makes data readable), then the indexes.
  for (const std::string& prefix :
       {g4::TenantObjectsPrefix(*component), g4::TenantSessionsPrefix(*component),
        g4::TenantAccessPrefix(*component)}) {
    Result<std::vector<s3::S3Client::ListedObject>> listed = client_->List(prefix);
    if (!listed.ok()) {
      counters_.CountError(listed.status());
      return listed.status();
    }
    std::vector<std::string> keys;
    for (const auto& o : *listed) keys.push_back(o.key);
    uint64_t deleted = 0;
    KVTIER_RETURN_IF_ERROR(DeleteKeys(keys, &deleted));
    if (objects == 0 && prefix == g4::TenantObjectsPrefix(*component)) objects = deleted;
  }
  counters_.deletes += objects;
  return objects;
}

SharedTierStats S3Tier::Stats() const { return counters_.Snapshot(); }

}  // namespace kvtier
