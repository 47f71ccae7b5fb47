#include "src/tier/s3/s3_tier.h"

#include <tinyxml2.h>

#include <algorithm>
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

// Whether `s` is the service not answering (after retries), which may heal by itself.
bool IsOutage(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

// The text of <Root><name>...</name></Root> in an XML body; "" when absent.
std::string XmlField(const std::vector<std::byte>& body, const char* name) {
  tinyxml2::XMLDocument doc;
  if (body.empty() ||
      doc.Parse(reinterpret_cast<const char*>(body.data()), body.size()) != tinyxml2::XML_SUCCESS) {
    return "";
  }
  const tinyxml2::XMLElement* root = doc.RootElement();
  const tinyxml2::XMLElement* e = root != nullptr ? root->FirstChildElement(name) : nullptr;
  return e != nullptr && e->GetText() != nullptr ? e->GetText() : "";
}

}  // namespace

Result<std::unique_ptr<S3Tier>> S3Tier::Open(S3TierOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Sanitize("S3Tier"));
  if (options.client.env == nullptr) options.client.env = options.env;
  if (options.codec_threads > 64) options.codec_threads = 64;
  Result<std::unique_ptr<s3::S3Client>> client = s3::S3Client::Create(options.client);
  if (!client.ok()) return client.status();
  // A service that does not answer (5xx, timeouts, refused connections, after the client's
  // retries) is an outage, not a mistake in the configuration: the node serves without G4
  // until it answers, every G4 request failing meanwhile as in an outage that starts later.
  // A refusal (403, 404 for the bucket, 400) will not heal by itself, and stops the open.
  S3Request head;
  head.method = "HEAD";
  Status bucket = (*client)->ExecuteOne(head).ToStatus("HEAD");
  if (!bucket.ok()) {
    bucket = Status(bucket.code(), "S3Tier: bucket '" + options.client.bucket + "' at " +
                                       options.client.endpoint + ": " +
                                       std::string(bucket.message()));
    if (!IsOutage(bucket)) return bucket;
    options.env->Log(bucket.ToString() + "; serving without G4 until it answers");
  }
  std::unique_ptr<S3Tier> tier(new S3Tier(std::move(options), std::move(*client)));
  switch (tier->options_.conditional_put) {
    case S3TierOptions::ConditionalPut::kOn:
      tier->conditional_put_ = true;
      break;
    case S3TierOptions::ConditionalPut::kOff:
      tier->conditional_put_ = false;
      break;
    case S3TierOptions::ConditionalPut::kAuto: {
      // Until the probe runs, puts go as to a service without conditional creates: a repeated
      // PUT of a block replaces it with the same bytes, and a lease race costs a repeated
      // janitor pass (docs/shared_tier.md); cluster records wait for the probe.
      const Status probed = bucket.ok() ? tier->ProbeConditionalPut() : bucket;
      if (!probed.ok() && !IsOutage(probed)) return probed;
      tier->probe_pending_ = !probed.ok();
      break;
    }
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
            (conditional_put() ? "supported"
             : options_.check_before_put ? "not supported: HEAD before PUT"
                                         : "not supported: a repeated PUT replaces the object"));
  return Status::OK();
}

void S3Tier::ProbeIfPending() {
  if (!probe_pending_.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> lock(probe_mu_, std::try_to_lock);
  if (!lock.owns_lock() || !probe_pending_.load(std::memory_order_acquire)) return;
  const Status s = ProbeConditionalPut();
  if (s.ok()) {
    probe_pending_.store(false, std::memory_order_release);
  } else if (!IsOutage(s)) {
    // Refused now though it answered: keep puts unconditional for good, and say why.
    env_->Log(s.ToString() + "; puts stay unconditional");
    probe_pending_.store(false, std::memory_order_release);
  }
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
  const bool conditional = conditional_put();
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
  auto metadata = [&](size_t k) {
    const SharedPut& p = puts[todo[k]];
    std::vector<std::pair<std::string, std::string>> headers = {
        {kMetaFormat, std::to_string(g4::kObjectFormatVersion)},
        {kMetaValueBytes, std::to_string(p.value.size())},
        {kMetaSession, std::to_string(p.session)},
        {kMetaCreated, std::to_string(p.created_us != 0 ? p.created_us : now)}};
    if (p.dtype) headers.emplace_back(kMetaDtype, std::to_string(static_cast<int>(*p.dtype)));
    return headers;
  };
  // Objects uploaded in parts once the chains are done (their chains stop before the object).
  auto multipart = [&](size_t k) {
    return objects[todo[k]].size() > options_.multipart_threshold_bytes;
  };
  auto object_put = [&](size_t k) {
    S3Request r;
    r.method = "PUT";
    r.key = object_names[k];
    r.body = objects[todo[k]].header;
    r.body_tail = objects[todo[k]].payload;
    r.headers = metadata(k);
    if (conditional) r.headers.emplace_back("if-none-match", "*");
    return r;
  };
  auto marker_or_object = [&](size_t k) -> std::optional<S3Request> {
    const SharedPut& p = puts[todo[k]];
    if (p.session == 0) {
      if (multipart(k)) return std::nullopt;
      return object_put(k);
    }
    S3Request r;
    r.method = "PUT";
    r.key = g4::SessionMarkerName(*component, p.session, p.key);
    return r;
  };
  std::vector<S3Request> first;
  std::vector<size_t> chain_object;  // Into todo, for each chain.
  std::vector<uint8_t> parts_next(todo.size(), 0);  // The object goes up in parts next.
  for (size_t k = 0; k < todo.size(); ++k) {
    object_names[k] = g4::ObjectName(*component, puts[todo[k]].key);
    S3Request head;
    head.method = "HEAD";
    head.key = object_names[k];
    std::optional<S3Request> r = conditional || !options_.check_before_put
                                     ? marker_or_object(k)
                                     : std::optional<S3Request>(std::move(head));
    if (r) {
      first.push_back(std::move(*r));
      chain_object.push_back(k);
    } else {
      parts_next[k] = 1;
    }
  }
  // The outcome of each chain, as of its last completed request (a retried chain overwrites).
  enum class Outcome { kStored, kExisted, kFailed };
  std::vector<Outcome> outcome(todo.size(), Outcome::kFailed);
  auto on_complete = [&](size_t chain, const S3Request& req,
                         S3Response& r) -> std::optional<S3Request> {
    const size_t k = chain_object[chain];
    const size_t i = todo[k];
    parts_next[k] = 0;
    out[i] = Status::OK();
    outcome[k] = Outcome::kFailed;
    if (req.method == "HEAD") {
      if (r.ok()) {
        outcome[k] = Outcome::kExisted;
      } else if (r.transport.ok() && r.http_status == 404) {
        std::optional<S3Request> next = marker_or_object(k);
        if (!next) parts_next[k] = 1;
        return next;
      } else {
        out[i] = r.ToStatus("S3 HEAD before put");
      }
    } else if (req.key != object_names[k]) {  // The session marker.
      if (r.ok() && multipart(k)) {
        parts_next[k] = 1;
      } else if (r.ok()) {
        return object_put(k);
      } else {
        out[i] = r.ToStatus("S3 PUT session marker");
      }
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
    if (!parts_next[k]) continue;
    Status s = PutMultipart(object_names[k], objects[todo[k]], metadata(k));
    if (s.ok()) {
      outcome[k] = Outcome::kStored;
    } else if (s.code() == StatusCode::kAlreadyExists) {
      outcome[k] = Outcome::kExisted;
    } else {
      out[todo[k]] = s;
    }
  }
  bool answered = false;
  for (size_t k = 0; k < todo.size(); ++k) {
    if (outcome[k] == Outcome::kStored) {
      counters_.puts++;
      counters_.put_bytes += objects[todo[k]].size();
    } else if (outcome[k] == Outcome::kExisted) {
      counters_.put_existing++;
    }
    answered |= outcome[k] != Outcome::kFailed;
  }
  if (answered) ProbeIfPending();
  for (const Status& s : out) counters_.CountError(s);
  return out;
}

Status S3Tier::PutMultipart(const std::string& name, const g4::SealedObject& object,
                            std::vector<std::pair<std::string, std::string>> headers) {
  S3Request create;
  create.method = "POST";
  create.key = name;
  create.query = {{"uploads", ""}};
  create.headers = std::move(headers);
  S3Response created = client_->ExecuteOne(create);
  if (!created.ok()) return created.ToStatus("S3 CreateMultipartUpload");
  const std::string upload = XmlField(created.body, "UploadId");
  if (upload.empty()) return Status::Unavailable("S3 CreateMultipartUpload: no UploadId in the reply");
  auto abort = [&](Status why) {
    S3Request a;
    a.method = "DELETE";
    a.key = name;
    a.query = {{"uploadId", upload}};
    (void)client_->ExecuteOne(a);  // Best effort; a lifecycle rule cleans up what is left.
    return why;
  };
  // Part n covers [n * part, (n + 1) * part) of header + payload; the first also holds the
  // header, sent from its own buffer.
  const std::span<const std::byte> head = object.header, payload = object.payload;
  const uint64_t total = head.size() + payload.size();
  const uint64_t part = std::max<uint64_t>(options_.multipart_part_bytes, head.size() + 1);
  std::vector<S3Request> parts;
  for (uint64_t begin = 0; begin < total; begin += part) {
    const uint64_t end = std::min(total, begin + part);
    S3Request p;
    p.method = "PUT";
    p.key = name;
    p.query = {{"partNumber", std::to_string(parts.size() + 1)}, {"uploadId", upload}};
    if (begin < head.size()) {
      p.body = head.subspan(begin);
      p.body_tail = payload.first(end - head.size());
    } else {
      p.body = payload.subspan(begin - head.size(), end - begin);
    }
    parts.push_back(std::move(p));
  }
  std::vector<S3Response> sent = client_->Execute(parts);
  std::string list = "<CompleteMultipartUpload>";
  for (size_t n = 0; n < sent.size(); ++n) {
    if (!sent[n].ok()) return abort(sent[n].ToStatus("S3 UploadPart"));
    auto etag = sent[n].headers.find("etag");
    if (etag == sent[n].headers.end()) return abort(Status::Unavailable("S3 UploadPart: no ETag"));
    list += "<Part><PartNumber>" + std::to_string(n + 1) + "</PartNumber><ETag>" +
            etag->second + "</ETag></Part>";
  }
  list += "</CompleteMultipartUpload>";
  S3Request complete;
  complete.method = "POST";
  complete.key = name;
  complete.query = {{"uploadId", upload}};
  complete.body = AsBytes(list);
  if (conditional_put()) complete.headers = {{"if-none-match", "*"}};
  S3Response done = client_->ExecuteOne(complete);
  if (done.transport.ok() && (done.http_status == 412 || done.http_status == 409)) {
    return abort(Status::AlreadyExists("S3 CompleteMultipartUpload: the object exists"));
  }
  // A complete can fail after its 200 has started: the error is then in the body.
  if (!done.ok() || !XmlField(done.body, "Code").empty()) {
    return abort(done.ok() ? Status::Unavailable("S3 CompleteMultipartUpload: " +
                                                 XmlField(done.body, "Message"))
                           : done.ToStatus("S3 CompleteMultipartUpload"));
  }
  return Status::OK();
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

// --- Cluster records ---------------------------------------------------------------------

Status S3Tier::CreateRecord(std::string_view name, std::span<const std::byte> body) {
  KVTIER_RETURN_IF_ERROR(g4::CheckRecordName(name));
  if (body.size() > kMaxRecordBytes) return Status::InvalidArgument("record too large");
  ProbeIfPending();
  if (probe_pending_.load(std::memory_order_acquire)) {
    return Status::Unavailable("G4 has not answered since this node started");
  }
  if (!conditional_put()) {
    // A plain PUT would let two creators each believe they won.
    return Status::FailedPrecondition(
        "this S3 service does not honour conditional writes (If-None-Match), which cluster "
        "records (the tenants' data keys) need");
  }
  S3Request put;
  put.method = "PUT";
  put.key = g4::RecordsPrefix() + std::string(name);
  put.body = body;
  put.headers = {{"if-none-match", "*"}};
  const S3Response r = client_->ExecuteOne(put);
  if (r.ok()) return Status::OK();
  // 412: it exists. 409: a concurrent conditional write of the same name is in progress, and
  // one of the two will be the record.
  if (r.transport.ok() && (r.http_status == 412 || r.http_status == 409)) {
    return Status::AlreadyExists("record " + std::string(name) + " exists");
  }
  const Status s = r.ToStatus("S3 PUT record");
  counters_.CountError(s);
  return s;
}

Result<std::vector<std::byte>> S3Tier::ReadRecord(std::string_view name) {
  KVTIER_RETURN_IF_ERROR(g4::CheckRecordName(name));
  S3Request get;
  get.method = "GET";
  get.key = g4::RecordsPrefix() + std::string(name);
  S3Response r = client_->ExecuteOne(get);
  if (!r.ok()) {
    const Status s = r.ToStatus("S3 GET record");
    counters_.CountError(s);
    return s;
  }
  if (r.body.size() > kMaxRecordBytes) return Status::DataLoss("record " + get.key + " too large");
  return std::move(r.body);
}

Result<std::vector<std::string>> S3Tier::ListRecords(std::string_view prefix) {
  const std::string base = g4::RecordsPrefix();
  Result<std::vector<s3::S3Client::ListedObject>> listed =
      client_->List(base + std::string(prefix), "");
  if (!listed.ok()) {
    counters_.CountError(listed.status());
    return listed.status();
  }
  std::vector<std::string> out;
  for (const auto& o : *listed) {
    std::string name = o.key.substr(base.size());
    if (g4::ValidRecordName(name)) out.push_back(std::move(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status S3Tier::DeleteRecord(std::string_view name) {
  KVTIER_RETURN_IF_ERROR(g4::CheckRecordName(name));
  S3Request del;
  del.method = "DELETE";
  del.key = g4::RecordsPrefix() + std::string(name);
  const S3Response r = client_->ExecuteOne(del);
  if (r.ok() || (r.transport.ok() && r.http_status == 404)) return Status::OK();
  const Status s = r.ToStatus("S3 DELETE record");
  counters_.CountError(s);
  return s;
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
  // Back already: another node's put, its marker PUT before our deletions (as DeleteSession).
  if (info && info->session != 0) {
    std::optional<SharedObjectInfo> again = ExistsMany(tenant, {&key, 1})[0];
    if (again && again->session == info->session) {
      KVTIER_RETURN_IF_ERROR(DeleteKeys({keys[0]}, &deleted));
    }
  }
  if (info) counters_.deletes++;
  return Status::OK();
}

Result<std::vector<BlockKey>> S3Tier::DeleteSession(std::string_view tenant, SessionId session) {
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
  std::vector<const std::string*> key_markers;  // Beside keys.
  std::vector<std::string> marker_keys;  // Those to delete.
  for (const auto& m : *markers) {
    Result<BlockKey> key = BlockKey::FromHex(m.key.substr(prefix.size()));
    if (key.ok()) {
      keys.push_back(*key);
      key_markers.push_back(&m.key);
    } else {
      marker_keys.push_back(m.key);
    }
  }
  // A marker's block may have been deleted and put again by another session since.
  std::vector<std::optional<SharedObjectInfo>> infos = ExistsMany(tenant, keys);
  std::vector<BlockKey> removed;
  std::vector<std::string> doomed;
  for (size_t i = 0; i < keys.size(); ++i) {
    // No object (yet): maybe a put in flight (marker first). Its marker stays for the next
    // deletion of the session; the janitor removes markers orphaned past temp_grace_us.
    if (!infos[i]) continue;
    marker_keys.push_back(*key_markers[i]);
    if (infos[i]->session == session) {
      removed.push_back(keys[i]);
      doomed.push_back(g4::ObjectName(*component, keys[i]));
      doomed.push_back(g4::AccessMarkerName(*component, keys[i]));
    }
  }
  uint64_t deleted = 0;
  KVTIER_RETURN_IF_ERROR(DeleteKeys(doomed, &deleted));
  uint64_t markers_deleted = 0;
  KVTIER_RETURN_IF_ERROR(DeleteKeys(marker_keys, &markers_deleted));
  // Back already: another node's put, its marker PUT before our deletions (docs/shared_tier.md).
  std::vector<std::optional<SharedObjectInfo>> again = ExistsMany(tenant, removed);
  std::vector<std::string> reappeared;
  for (size_t i = 0; i < removed.size(); ++i) {
    if (again[i] && again[i]->session == session) {
      reappeared.push_back(g4::ObjectName(*component, removed[i]));
    }
  }
  if (!reappeared.empty()) KVTIER_RETURN_IF_ERROR(DeleteKeys(reappeared, &deleted));
  counters_.deletes += removed.size();
  return removed;
}

Result<std::vector<BlockKey>> S3Tier::DeleteTenant(std::string_view tenant) {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  std::vector<BlockKey> removed;
  // Objects first (what makes data readable), then the indexes.
  for (const std::string& prefix :
       {g4::TenantObjectsPrefix(*component), g4::TenantSessionsPrefix(*component),
        g4::TenantAccessPrefix(*component)}) {
    Result<std::vector<s3::S3Client::ListedObject>> listed = client_->List(prefix);
    if (!listed.ok()) {
      counters_.CountError(listed.status());
      return listed.status();
    }
    const bool objects = prefix == g4::TenantObjectsPrefix(*component);
    std::vector<std::string> keys;
    for (const auto& o : *listed) {
      keys.push_back(o.key);
      if (!objects) continue;
      Result<BlockKey> key = g4::ObjectKey(o.key);
      if (key.ok()) removed.push_back(*key);
    }
    uint64_t deleted = 0;
    KVTIER_RETURN_IF_ERROR(DeleteKeys(keys, &deleted));
  }
  counters_.deletes += removed.size();
  return removed;
}

SharedTierStats S3Tier::Stats() const { return counters_.Snapshot(); }

}  // namespace kvtier
