#include "src/tier/s3/s3_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <tinyxml2.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "src/common/checksum.h"

namespace kvtier::s3 {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' ||
                        s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

const char* EnvOr(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  return true;
}

// One request in flight, and where its answer goes.
struct Transfer {
  const S3Request* request = nullptr;
  S3Response* response = nullptr;
  curl_slist* headers = nullptr;
  std::string url;
  size_t sent = 0;  // Bytes of the request body handed to curl.
  bool split = false;  // The response is 2xx and the request asks for head_bytes.
  std::optional<Checksum64Stream> body_sum;  // The response is 2xx and checksum_body is set.
};

// Hands curl the next bytes of body then body_tail, straight from the caller's buffers.
size_t OnUpload(char* buffer, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t room = size * n;
  size_t copied = 0;
  size_t offset = t->sent;  // Into body followed by body_tail.
  for (std::span<const std::byte> part : {t->request->body, t->request->body_tail}) {
    if (offset >= part.size()) {
      offset -= part.size();
      continue;
    }
    const size_t len = std::min(part.size() - offset, room - copied);
    std::memcpy(buffer + copied, part.data() + offset, len);
    copied += len;
    offset = 0;
    if (copied == room) break;
  }
  t->sent += copied;
  return copied;
}

// Rewinds the upload (curl asks before resending a body, e.g. on a reused connection that
// turned out closed).
int OnUploadSeek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  const size_t total = t->request->body.size() + t->request->body_tail.size();
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > total) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  t->sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const auto* p = reinterpret_cast<const std::byte*>(data);
  size_t len = size * n;
  S3Response& r = *t->response;
  if (t->split && r.head.size() < t->request->head_bytes) {
    const size_t take = std::min(len, t->request->head_bytes - r.head.size());
    r.head.insert(r.head.end(), p, p + take);
    p += take;
    len -= take;
  }
  r.body.insert(r.body.end(), p, p + len);
  if (t->body_sum.has_value()) t->body_sum->Update({p, len});
  return size * n;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->response->headers.clear();  // A new response (after 100 Continue or a redirect).
    const size_t space = line.find(' ');
    const long code = space == std::string_view::npos
                          ? 0
                          : std::strtol(std::string(line.substr(space + 1, 3)).c_str(), nullptr, 10);
    const bool success = code >= 200 && code < 300;
    t->split = t->request->head_bytes > 0 && success;
    t->body_sum.reset();
    if (t->request->checksum_body && success) t->body_sum.emplace();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name = Lower(Trim(line.substr(0, colon)));
    std::string value = Trim(line.substr(colon + 1));
    if (name == "content-length" && t->request->method == "GET") {
      // One allocation for the body instead of doubling as it arrives (bounded: a G4 object
      // is at most ~2 GiB by its format).
      const uint64_t length = std::strtoull(value.c_str(), nullptr, 10);
      const size_t head = t->split ? t->request->head_bytes : 0;
      if (length <= (uint64_t{1} << 31) && length > head) t->response->body.reserve(length - head);
    }
    t->response->headers[std::move(name)] = std::move(value);
  }
  return size * n;
}

bool Retryable(const S3Response& r) {
  if (!r.transport.ok()) return true;
  return r.http_status == 500 || r.http_status == 502 || r.http_status == 503 ||
         r.http_status == 504 || r.http_status == 429;
}

// The <Code> of an S3 error body, if any.
std::string ErrorCode(const std::vector<std::byte>& body) {
  if (body.empty()) return "";
  tinyxml2::XMLDocument doc;
  if (doc.Parse(reinterpret_cast<const char*>(body.data()), body.size()) != tinyxml2::XML_SUCCESS) {
    return "";
  }
  const tinyxml2::XMLElement* root = doc.RootElement();
  const tinyxml2::XMLElement* code = root ? root->FirstChildElement("Code") : nullptr;
  return code && code->GetText() ? code->GetText() : "";
}

}  // namespace

struct S3Client::Handles {
  CURLM* multi = nullptr;
  std::vector<CURL*> easy;
  Handles() : multi(curl_multi_init()) {}
  ~Handles() {
    for (CURL* e : easy) curl_easy_cleanup(e);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }
};

Status S3Response::ToStatus(std::string_view what) const {
  if (!transport.ok()) return transport;
  if (http_status >= 200 && http_status < 300) return Status::OK();
  const std::string code = ErrorCode(body);
  const std::string msg = std::string(what) + ": HTTP " + std::to_string(http_status) +
                          (code.empty() ? "" : " " + code);
  switch (http_status) {
    case 404:
      return Status::NotFound(msg);
    case 401:
    case 403:
      return Status::PermissionDenied(msg);
    case 409:
      return Status::Aborted(msg);
    case 412:
      return Status::AlreadyExists(msg);
    case 400:
      if (code == "EntityTooLarge") return Status::ResourceExhausted(msg);
      return Status::InvalidArgument(msg);
    case 501:
      return Status::Unimplemented(msg);
    case 507:
      return Status::ResourceExhausted(msg);
    default:
      return http_status >= 500 || http_status == 429 ? Status::Unavailable(msg)
                                                      : Status(StatusCode::kUnknown, msg);
  }
}

Result<std::unique_ptr<S3Client>> S3Client::Create(S3ClientOptions options) {
  static std::once_flag curl_init;
  std::call_once(curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (!ValidBucket(options.bucket)) {
    return Status::InvalidArgument("S3: bucket name must be 3 to 63 of [a-z0-9.-]");
  }
  if (options.region.empty()) options.region = EnvOr("AWS_REGION");
  if (options.region.empty()) options.region = EnvOr("AWS_DEFAULT_REGION");
  if (options.region.empty()) options.region = "us-east-1";
  if (options.credentials.access_key_id.empty()) {
    options.credentials.access_key_id = EnvOr("AWS_ACCESS_KEY_ID");
    options.credentials.secret_access_key = EnvOr("AWS_SECRET_ACCESS_KEY");
    options.credentials.session_token = EnvOr("AWS_SESSION_TOKEN");
  }
  if (options.credentials.access_key_id.empty() || options.credentials.secret_access_key.empty()) {
    return Status::InvalidArgument(
        "S3: no credentials (set them in the config or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)");
  }
  if (options.max_parallel == 0) options.max_parallel = 1;
  if (options.max_retries > 10) options.max_retries = 10;
  if (options.env == nullptr) options.env = Env::Default();
  const std::string& e = options.endpoint;
  const size_t sep = e.find("://");
  if (sep == std::string::npos) return Status::InvalidArgument("S3: endpoint needs a scheme");
  std::string scheme = Lower(e.substr(0, sep));
  std::string authority = e.substr(sep + 3);
  while (!authority.empty() && authority.back() == '/') authority.pop_back();
  if ((scheme != "http" && scheme != "https") || authority.empty() ||
      authority.find('/') != std::string::npos) {
    return Status::InvalidArgument("S3: endpoint must be http(s)://host[:port]");
  }
  std::unique_ptr<S3Client> client(new S3Client(std::move(options)));
  client->scheme_ = std::move(scheme);
  client->authority_ = std::move(authority);
  return client;
}

S3Client::S3Client(S3ClientOptions options) : options_(std::move(options)) {}
S3Client::~S3Client() = default;

std::unique_ptr<S3Client::Handles> S3Client::TakeHandles() {
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Handles> h = std::move(idle_.back());
      idle_.pop_back();
      return h;
    }
  }
  auto h = std::make_unique<Handles>();
  curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(options_.max_parallel));
  curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, static_cast<long>(options_.max_parallel));
  return h;
}

void S3Client::ReturnHandles(std::unique_ptr<Handles> handles) {
  MutexLock lock(&mu_);
  if (idle_.size() < 8) idle_.push_back(std::move(handles));
}

std::vector<S3Response> S3Client::Execute(std::span<const S3Request> requests,
                                          const OnComplete& on_complete) {
  std::vector<S3Response> out(requests.size());
  if (requests.empty()) return out;
  std::unique_ptr<Handles> h = TakeHandles();
  const std::string host =
      options_.path_style ? authority_ : options_.bucket + "." + authority_;
  std::vector<size_t> todo(requests.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  std::minstd_rand jitter(static_cast<uint32_t>(options_.env->NowMicros()));

  for (uint32_t attempt = 0;; ++attempt) {
    const std::string amz_date = AmzDate(options_.env->NowMicros());
    std::deque<size_t> queue(todo.begin(), todo.end());
    std::vector<Transfer> transfers(requests.size());
    std::vector<S3Request> follow_ups(on_complete ? requests.size() : 0);
    size_t running = 0;
    auto start = [&](size_t i, const S3Request& req) {
      S3Response& resp = out[i];
      resp = S3Response();
      resp.attempts = attempt + 1;
      Transfer& t = transfers[i];
      t.request = &req;
      t.response = &resp;
      t.sent = 0;
      t.split = false;
      t.body_sum.reset();
      std::string path = options_.path_style ? "/" + options_.bucket : std::string();
      path += "/" + UriEncode(req.key, false);
      if (req.key.empty() && options_.path_style) path.pop_back();
      const std::string query = CanonicalQuery(req.query);
      t.url = scheme_ + "://" + host + path + (query.empty() ? "" : "?" + query);

      SigV4Request sig;
      sig.method = req.method;
      sig.canonical_uri = path.empty() ? "/" : path;
      sig.query = req.query;
      const size_t body_bytes = req.body.size() + req.body_tail.size();
      sig.payload_sha256_hex = options_.sign_payload || body_bytes == 0
                                   ? Sha256Hex(req.body, req.body_tail)
                                   : std::string("UNSIGNED-PAYLOAD");
      sig.headers = {{"host", host},
                     {"x-amz-date", amz_date},
                     {"x-amz-content-sha256", sig.payload_sha256_hex}};
      if (!options_.credentials.session_token.empty()) {
        sig.headers.emplace_back("x-amz-security-token", options_.credentials.session_token);
      }
      for (const auto& kv : req.headers) sig.headers.push_back(kv);
      const SigV4Signature signature =
          SignV4(sig, options_.credentials, options_.region, "s3", amz_date);

      curl_slist* list = nullptr;
      for (const auto& [name, value] : sig.headers) {
        if (name == "host") continue;  // curl sends the same Host from the URL.
        list = curl_slist_append(list, (name + ": " + value).c_str());
      }
      list = curl_slist_append(list, ("Authorization: " + signature.authorization).c_str());
      list = curl_slist_append(list, "Expect:");  // No 100-continue round trip.
      if (req.method == "PUT" || req.method == "POST") {
        list = curl_slist_append(list, "Content-Type: application/octet-stream");
      }
      t.headers = list;

      // An idle easy handle (PRIVATE is cleared when a transfer completes), or a new one.
      CURL* e = nullptr;
      for (CURL* candidate : h->easy) {
        char* priv = nullptr;
        curl_easy_getinfo(candidate, CURLINFO_PRIVATE, &priv);
        if (priv == nullptr) {
          e = candidate;
          break;
        }
      }
      if (e == nullptr) {
        e = curl_easy_init();
        h->easy.push_back(e);
      }
      curl_easy_reset(e);
      curl_easy_setopt(e, CURLOPT_URL, t.url.c_str());
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
      curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
      curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout_ms));
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, list);
      // Larger receive/send buffers: blocks are megabytes, and curl's 16 KiB default means a
      // callback and a syscall per 16 KiB. 128 KiB rather than more keeps each piece in cache
      // between the copy and the checksum or send after it (measured against 512 KiB and
      // 2 MiB: 10% less CPU in both directions).
      curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 128L * 1024);
      curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 128L * 1024);
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
      curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
      curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
      curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
      curl_easy_setopt(e, CURLOPT_PRIVATE, reinterpret_cast<char*>(i + 1));
      if (req.method == "HEAD") {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
      } else if (req.method == "PUT" || req.method == "POST") {
        // The body is read from the request's buffers as curl sends it.
        curl_easy_setopt(e, CURLOPT_READFUNCTION, &OnUpload);
        curl_easy_setopt(e, CURLOPT_READDATA, &t);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, &OnUploadSeek);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, &t);
        if (req.method == "PUT") {
          curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
          curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body_bytes));
        } else {
          curl_easy_setopt(e, CURLOPT_POST, 1L);
          curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body_bytes));
        }
      } else if (req.method != "GET") {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req.method.c_str());
      }
      curl_multi_add_handle(h->multi, e);
      running++;
    };
    while (!queue.empty() && running < options_.max_parallel) {
      start(queue.front(), requests[queue.front()]);
      queue.pop_front();
    }
    while (running > 0) {
      int still = 0;
      curl_multi_perform(h->multi, &still);
      int msgs = 0;
      while (CURLMsg* m = curl_multi_info_read(h->multi, &msgs)) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL* e = m->easy_handle;
        char* priv = nullptr;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
        const size_t i = reinterpret_cast<size_t>(priv) - 1;
        S3Response& resp = out[i];
        if (m->data.result == CURLE_OK) {
          curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &resp.http_status);
          if (transfers[i].body_sum.has_value() && resp.ok()) {
            resp.body_checksum = transfers[i].body_sum->Value();
          }
        } else {
          const S3Request& req = *transfers[i].request;
          const std::string msg =
              "S3 " + req.method + " " + req.key + ": " + curl_easy_strerror(m->data.result);
          resp.transport = m->data.result == CURLE_OPERATION_TIMEDOUT
                               ? Status::DeadlineExceeded(msg)
                               : Status::Unavailable(msg);
        }
        curl_multi_remove_handle(h->multi, e);
        curl_easy_setopt(e, CURLOPT_PRIVATE, static_cast<char*>(nullptr));
        curl_slist_free_all(transfers[i].headers);
        transfers[i].headers = nullptr;
        running--;
        if (on_complete) {
          std::optional<S3Request> next = on_complete(i, *transfers[i].request, resp);
          if (next.has_value()) {
            follow_ups[i] = std::move(*next);
            start(i, follow_ups[i]);
            continue;
          }
        }
        if (!queue.empty()) {
          start(queue.front(), requests[queue.front()]);
          queue.pop_front();
        }
      }
      if (running > 0) curl_multi_poll(h->multi, nullptr, 0, 100, nullptr);
    }
    std::vector<size_t> retry;
    for (size_t i : todo) {
      if (Retryable(out[i])) retry.push_back(i);
    }
    if (retry.empty() || attempt >= options_.max_retries) break;
    const uint64_t base = std::min<uint64_t>(uint64_t{options_.retry_base_ms} << attempt, 2000);
    std::this_thread::sleep_for(std::chrono::milliseconds(base / 2 + jitter() % (base / 2 + 1)));
    todo = std::move(retry);
  }
  ReturnHandles(std::move(h));
  return out;
}

S3Response S3Client::ExecuteOne(const S3Request& request) {
  return std::move(Execute({&request, 1})[0]);
}

namespace {

// Keys per multi-object delete: the S3 API's limit.
constexpr size_t kDeleteBatch = 1000;

void AppendXmlEscaped(std::string_view text, std::string* out) {
  for (char c : text) {
    switch (c) {
      case '&': *out += "&amp;"; break;
      case '<': *out += "&lt;"; break;
      case '>': *out += "&gt;"; break;
      case '"': *out += "&quot;"; break;
      case '\'': *out += "&apos;"; break;
      default: *out += c;
    }
  }
}

// Content-MD5 of a body: base64 of its MD5, which S3 requires on multi-object deletes.
std::string ContentMd5(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  EVP_Digest(body.data(), body.size(), digest, &digest_len, EVP_md5(), nullptr);
  unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  const int n = EVP_EncodeBlock(b64, digest, static_cast<int>(digest_len));
  return std::string(reinterpret_cast<const char*>(b64), static_cast<size_t>(n));
}

}  // namespace

std::vector<Status> S3Client::DeleteObjects(std::span<const std::string> keys) {
  std::vector<Status> out(keys.size());
  const size_t batches = (keys.size() + kDeleteBatch - 1) / kDeleteBatch;
  std::vector<std::string> bodies(batches);
  std::vector<S3Request> requests(batches);
  for (size_t b = 0; b < batches; ++b) {
    // Quiet: the response lists only the keys that failed.
    std::string& body = bodies[b];
    body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>";
    for (size_t i = b * kDeleteBatch; i < std::min(keys.size(), (b + 1) * kDeleteBatch); ++i) {
      body += "<Object><Key>";
      AppendXmlEscaped(keys[i], &body);
      body += "</Key></Object>";
    }
    body += "</Delete>";
    S3Request& req = requests[b];
    req.method = "POST";
    req.query = {{"delete", ""}};
    req.headers = {{"content-md5", ContentMd5(body)}};
    req.body = std::as_bytes(std::span(body));
  }
  std::vector<S3Response> responses = Execute(requests);
  for (size_t b = 0; b < batches; ++b) {
    const size_t begin = b * kDeleteBatch, end = std::min(keys.size(), begin + kDeleteBatch);
    const S3Response& r = responses[b];
    Status batch_status;
    if (r.transport.ok() && (r.http_status == 501 || r.http_status == 405)) {
      batch_status = Status::Unimplemented("S3 multi-object delete not supported");
    } else if (!r.ok()) {
      batch_status = r.ToStatus("S3 multi-object delete");
    }
    tinyxml2::XMLDocument doc;
    const tinyxml2::XMLElement* root = nullptr;
    if (batch_status.ok()) {
      if (doc.Parse(reinterpret_cast<const char*>(r.body.data()), r.body.size()) ==
          tinyxml2::XML_SUCCESS) {
        root = doc.RootElement();
      }
      if (root == nullptr) {
        batch_status = Status::Unavailable("S3 multi-object delete: malformed XML");
      }
    }
    if (!batch_status.ok()) {
      for (size_t i = begin; i < end; ++i) out[i] = batch_status;
      continue;
    }
    // <Error><Key>k</Key><Code>c</Code><Message>m</Message></Error> per key not deleted.
    std::map<std::string, Status, std::less<>> failed;
    for (const tinyxml2::XMLElement* e = root->FirstChildElement("Error"); e != nullptr;
         e = e->NextSiblingElement("Error")) {
      const tinyxml2::XMLElement* key = e->FirstChildElement("Key");
      const tinyxml2::XMLElement* code = e->FirstChildElement("Code");
      if (key == nullptr || key->GetText() == nullptr) continue;
      const std::string c = code != nullptr && code->GetText() != nullptr ? code->GetText() : "";
      if (c == "NoSuchKey") continue;  // Absent is as good as deleted.
      const std::string name = key->GetText();
      failed.emplace(name, Status::Unavailable("S3 delete of " + name + " failed: " + c));
    }
    for (size_t i = begin; i < end; ++i) {
      auto it = failed.find(keys[i]);
      if (it != failed.end()) out[i] = it->second;
    }
  }
  return out;
}

Result<std::vector<S3Client::ListedObject>> S3Client::List(const std::string& prefix,
                                                          const std::string& start_after) {
  std::vector<ListedObject> out;
  std::string token;
  while (true) {
    S3Request req;
    req.method = "GET";
    req.query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", "1000"}};
    if (!token.empty()) {
      req.query.emplace_back("continuation-token", token);
    } else if (!start_after.empty()) {
      req.query.emplace_back("start-after", start_after);
    }
    S3Response resp = ExecuteOne(req);
    if (!resp.ok()) return resp.ToStatus("S3 list " + prefix);
    tinyxml2::XMLDocument doc;
    if (doc.Parse(reinterpret_cast<const char*>(resp.body.data()), resp.body.size()) !=
        tinyxml2::XML_SUCCESS) {
      return Status::Unavailable("S3 list " + prefix + ": malformed XML");
    }
    const tinyxml2::XMLElement* root = doc.RootElement();
    if (root == nullptr) return Status::Unavailable("S3 list: empty XML");
    for (const tinyxml2::XMLElement* c = root->FirstChildElement("Contents"); c != nullptr;
         c = c->NextSiblingElement("Contents")) {
      const tinyxml2::XMLElement* key = c->FirstChildElement("Key");
      if (key == nullptr || key->GetText() == nullptr) continue;
      ListedObject o;
      o.key = key->GetText();
      const tinyxml2::XMLElement* size = c->FirstChildElement("Size");
      if (size != nullptr && size->GetText() != nullptr) {
        o.size = std::strtoull(size->GetText(), nullptr, 10);
      }
      const tinyxml2::XMLElement* lm = c->FirstChildElement("LastModified");
      if (lm != nullptr && lm->GetText() != nullptr) o.last_modified_us = ParseHttpDate(lm->GetText());
      out.push_back(std::move(o));
    }
    const tinyxml2::XMLElement* truncated = root->FirstChildElement("IsTruncated");
    const tinyxml2::XMLElement* next = root->FirstChildElement("NextContinuationToken");
    if (truncated == nullptr || truncated->GetText() == nullptr ||
        std::strcmp(truncated->GetText(), "true") != 0 || next == nullptr ||
        next->GetText() == nullptr) {
      break;
    }
    token = next->GetText();
  }
  return out;
}

uint64_t ParseHttpDate(std::string_view date) {
  struct tm tm;
  std::memset(&tm, 0, sizeof(tm));
  const std::string s(date);
  uint64_t fraction_us = 0;
  const char* end = strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr) {
    std::memset(&tm, 0, sizeof(tm));
    end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == nullptr) return 0;
    if (*end == '.') {
      uint64_t scale = 100000;
      for (++end; *end >= '0' && *end <= '9'; ++end) {
        fraction_us += static_cast<uint64_t>(*end - '0') * scale;
        scale /= 10;
      }
    }
  }
  const time_t t = timegm(&tm);
  if (t < 0) return 0;
  return static_cast<uint64_t>(t) * 1000000u + fraction_us;
}

}  // namespace kvtier::s3
