// kvtierd's HTTP/1.1 endpoint: /metrics, /healthz and the admin API (docs/protocol.md, "HTTP").
//
// Framed by HttpRequestParser (http_parser), as the S3 endpoint is; it runs on the same event
// loops with the same limits, idle timeouts and backpressure as the other protocols.

#include <cctype>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/server/handler.h"
#include "src/server/http_request.h"
#include "src/server/kv_events.h"

namespace kvtier::server {

// The pages compiled in from src/server (CMakeLists.txt, kvtier_embed_file).
std::string_view DashboardPage();
std::string_view PlanPage();

namespace {

using Action = ProtocolHandler::Outcome::Action;
using json = nlohmann::json;

constexpr size_t kMaxHeadBytes = 16 << 10;
constexpr size_t kMaxBodyBytes = 1 << 20;

struct Request {
  std::string method;
  std::string path;
  std::string query;
  bool keep_alive = true;
  std::string authorization;
  std::string body;
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// The value of `name` in a query string "a=1&b=2" (no percent-decoding: values are plain names).
std::string QueryParam(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? "" : std::string(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return "";
}

Response Json(int status, const json& j) {
  return {status, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

Response JsonError(int status, std::string_view message) {
  return Json(status, json{{"error", message}});
}

json StatsJson(const TenantStats& t) {
  json out{{"name", t.name}};
  for (const auto& [name, field] : TenantStats::kCounters) out[name] = t.*field;
  return out;
}

// /fleet: every node's G4 counters (Store::Fleet); "now_us", this node's clock (its own
// report's time), is what the others' report times are aged by.
json FleetJson(const FleetView& fleet) {
  json nodes = json::array();
  for (const NodeReport& r : fleet.nodes) {
    json n{{"node", r.node}, {"time_us", r.time_us}};
    for (const auto& [name, field] : NodeReport::kCounters) n[name] = r.*field;
    nodes.push_back(std::move(n));
  }
  return json{{"now_us", fleet.nodes.front().time_us},
              {"read_us", fleet.read_us},
              {"nodes", std::move(nodes)}};
}

class HttpHandler final : public ProtocolHandler {
 public:
  HttpHandler(const ServerContext* ctx, PeerInfo peer)
      : ctx_(ctx),
        peer_(std::move(peer)),
        parser_({.max_head_bytes = kMaxHeadBytes, .max_headers = 100, .max_body_bytes = kMaxBodyBytes}) {}

  Proto proto() const override { return Proto::kHttp; }

  Outcome HandleOne(std::span<std::byte> input, OutputQueue* out) override {
    switch (parser_.Parse(input)) {
      case HttpRequestParser::State::kError:
        return Fail(parser_.error_status(), parser_.error(), out);
      case HttpRequestParser::State::kHead:
        return {Action::kNeedMore, 0, 0};
      case HttpRequestParser::State::kBody: {
        const HttpRequest& h = parser_.request();
        const size_t needed =
            h.content_length && !h.chunked ? parser_.consumed() + (*h.content_length - h.body_bytes) : 0;
        return {Action::kNeedMore, 0, needed};
      }
      case HttpRequestParser::State::kComplete:
        break;
    }
    const HttpRequest& h = parser_.request();
    Request req;
    req.method = h.method;
    req.path = h.path;
    req.query = h.query;
    req.keep_alive = h.keep_alive;
    if (const std::string* authorization = h.Header("authorization")) req.authorization = *authorization;
    const std::span<std::byte> body = parser_.Body(input);
    req.body.assign(reinterpret_cast<const char*>(body.data()), body.size());
    const size_t consumed = parser_.consumed();
    parser_.Reset();
    RequestTimer timer(ctx_->metrics, Proto::kHttp, Op::kOther);
    if (req.path.starts_with("/admin/")) timer.set_op(Op::kAdmin);
    if (req.path == "/metrics") timer.set_op(Op::kStats);
    Send(Route(req), req.keep_alive, out);
    return {req.keep_alive ? Action::kHandled : Action::kClose, consumed, 0};
  }

  void OnIdleTimeout(OutputQueue*) override {}

  void OnRequestTimeout(OutputQueue* out) override {
    Send({408, "text/plain; charset=utf-8", "request not received whole in time\n"}, false, out);
  }

 private:
  Outcome Fail(int status, std::string_view message, OutputQueue* out) {
    ctx_->metrics->ProtocolError(Proto::kHttp);
    Send({status, "text/plain; charset=utf-8", std::string(message) + "\n"}, false, out);
    return {Action::kClose, 0, 0};
  }

  void Send(const Response& r, bool keep_alive, OutputQueue* out) {
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(HttpReason(r.status)) +
                       "\r\nContent-Type: " + r.content_type +
                       "\r\nContent-Length: " + std::to_string(r.body.size()) +
                       (keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
    out->Append(head);
    out->Append(r.body);
  }

  Response Route(const Request& req) {
    if (req.path == "/healthz") {
      if (req.method != "GET" && req.method != "HEAD") return {405, "text/plain", "use GET\n"};
      // Live and serving either way (200); a degraded tier is said on the first line.
      const StoreStats stats = ctx_->store->Stats();
      if (!stats.disk_writable) {
        return {200, "text/plain; charset=utf-8",
                "degraded\nG3 not writable (serving reads from it; G2 and G4 go on): " +
                    stats.disk_write_fault + "\n"};
      }
      return {200, "text/plain; charset=utf-8", "ok\n"};
    }
    if (req.path == "/metrics") {
      if (req.method != "GET") return {405, "text/plain", "use GET\n"};
      std::optional<EventCounters> events;
      if (const KvEventPublisher* e = ctx_->events; e != nullptr) {
        events = EventCounters{e->events(), e->dropped(), e->messages(), e->replays(),
                               e->snapshots()};
      }
      return {200, "text/plain; version=0.0.4; charset=utf-8",
              ctx_->metrics->RenderPrometheus(ctx_->store->Stats(), events ? &*events : nullptr)};
    }
    if (req.path == "/fleet") {
      if (req.method != "GET") return {405, "text/plain", "use GET\n"};
      Result<FleetView> fleet = ctx_->store->Fleet();
      if (!fleet.ok()) {
        const bool off = fleet.status().code() == StatusCode::kFailedPrecondition;
        return JsonError(off ? 404 : 500, fleet.status().ToString());
      }
      return Json(200, FleetJson(*fleet));
    }
    if (req.path == "/" || req.path == "/plan") {
      if (req.method != "GET" && req.method != "HEAD") return {405, "text/plain", "use GET\n"};
      return {200, "text/html; charset=utf-8",
              std::string(req.path == "/" ? DashboardPage() : PlanPage())};
    }
    if (req.path == "/help") {
      return {200, "text/plain; charset=utf-8",
              "kvtierd\n  GET /                 dashboard (HTML)\n  GET /plan             planner (HTML)\n"
              "  GET /metrics          Prometheus metrics\n  GET /fleet            every "
              "node's G4 traffic (JSON)\n  GET /healthz          "
              "liveness\n  GET /admin/tenants    tenant statistics (JSON)\n  POST /admin/pin       "
              "{\"tenant\":..,\"keys\":[hex..]}\n  POST /admin/unpin     same\n  DELETE "
              "/admin/blocks/<hex key>?tenant=<name>\n  DELETE /admin/sessions/<id>?tenant=<name>\n"
              "  POST /admin/sessions/<id>/hint?tenant=<name> {\"retain_s\":..,"
              "\"priority\":\"low|normal|high\"} or {\"finished\":true}\n"
              "  DELETE /admin/tenants/<name>\n  POST /admin/tenants/<name>/shred\n"};
    }
    if (!req.path.starts_with("/admin/")) return {404, "text/plain", "not found\n"};
    if (ctx_->auth->admin_tokens_configured()) {
      if (Status admit = ctx_->auth_guard->Admit(peer_, Proto::kHttp); !admit.ok()) {
        return JsonError(429, admit.message());
      }
      constexpr std::string_view kBearer = "Bearer ";
      const std::string_view bearer = std::string_view(req.authorization).starts_with(kBearer)
                                          ? std::string_view(req.authorization).substr(kBearer.size())
                                          : std::string_view();
      std::optional<Authenticator::AdminScope> scope = ctx_->auth->Admin(bearer);
      if (!scope) {
        ctx_->auth_guard->Failed(peer_, Proto::kHttp, "");
        return JsonError(401, "admin API needs 'Authorization: Bearer <admin_token>' (the [auth] "
                              "admin_token, or a tenant's admin_token for that tenant)");
      }
      ctx_->auth_guard->Succeeded(peer_);
      scope_ = *scope;
    } else {
      scope_ = Authenticator::AdminScope{};
    }
    if (req.path == "/admin/tenants") {
      if (req.method != "GET") return JsonError(405, "use GET");
      StoreStats stats = ctx_->store->Stats();
      json tenants = json::array();
      for (const TenantStats& t : stats.tenants) {
        if (!scope_.tenant || *scope_.tenant == t.name) tenants.push_back(StatsJson(t));
      }
      return Json(200, json{{"tenants", tenants}});
    }
    if (req.path == "/admin/pin" || req.path == "/admin/unpin") {
      if (req.method != "POST") return JsonError(405, "use POST");
      return Pin(req, req.path == "/admin/pin");
    }
    if (req.path.starts_with("/admin/blocks/")) {
      if (req.method != "DELETE") return JsonError(405, "use DELETE");
      return DeleteBlock(req);
    }
    if (req.path.starts_with("/admin/sessions/") && req.path.ends_with("/hint")) {
      if (req.method != "POST") return JsonError(405, "use POST");
      return HintSession(req);
    }
    if (req.path.starts_with("/admin/sessions/")) {
      if (req.method != "DELETE") return JsonError(405, "use DELETE");
      return DeleteSession(req);
    }
    if (req.path.starts_with("/admin/tenants/")) return TenantAction(req);
    return JsonError(404, "no such admin endpoint");
  }

  // The tenant a request names, if this request's admin token may act on it.
  Result<TenantId> Tenant(const std::string& name) {
    if (name.empty()) return Status::InvalidArgument("name the tenant");
    if (scope_.tenant && *scope_.tenant != name) {
      return Status::PermissionDenied("this admin token acts on tenant '" + *scope_.tenant +
                                      "' only");
    }
    return ctx_->store->FindTenant(name);
  }
  static int TenantHttpStatus(const Status& s) {
    return s.code() == StatusCode::kPermissionDenied ? 403 : 404;
  }

  Response Pin(const Request& req, bool pin) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("tenant") ||
        !body["tenant"].is_string() || !body.contains("keys") || !body["keys"].is_array()) {
      return JsonError(400, "expected {\"tenant\": \"<name>\", \"keys\": [\"<64 hex digits>\", ...]}");
    }
    Result<TenantId> tenant = Tenant(body["tenant"].get<std::string>());
    if (!tenant.ok()) return JsonError(TenantHttpStatus(tenant.status()), tenant.status().ToString());
    std::vector<BlockKey> keys;
    for (const json& k : body["keys"]) {
      Result<BlockKey> key = k.is_string() ? BlockKey::FromHex(k.get<std::string>())
                                           : Result<BlockKey>(Status::InvalidArgument("key must be a string"));
      if (!key.ok()) return JsonError(400, key.status().ToString());
      keys.push_back(*key);
    }
    if (keys.size() > ctx_->config->max_batch) return JsonError(400, "too many keys");
    std::vector<Status> statuses =
        pin ? ctx_->store->PinMany(*tenant, keys) : ctx_->store->UnpinMany(*tenant, keys);
    json results = json::array();
    for (size_t i = 0; i < keys.size(); ++i) {
      results.push_back({{"key", keys[i].ToHex()},
                         {"status", std::string(StatusCodeName(statuses[i].code()))},
                         {"message", std::string(statuses[i].message())}});
    }
    return Json(200, json{{"results", results}});
  }

  Response DeleteBlock(const Request& req) {
    Result<BlockKey> key = BlockKey::FromHex(std::string_view(req.path).substr(strlen("/admin/blocks/")));
    if (!key.ok()) return JsonError(400, key.status().ToString());
    Result<TenantId> tenant = Tenant(QueryParam(req.query, "tenant"));
    if (!tenant.ok()) {
      return JsonError(TenantHttpStatus(tenant.status()), "?tenant=: " + tenant.status().ToString());
    }
    Status s = ctx_->store->Delete(*tenant, *key);
    if (s.code() == StatusCode::kNotFound) return Json(404, json{{"deleted", false}});
    if (!s.ok()) return JsonError(500, s.ToString());
    return Json(200, json{{"deleted", true}});
  }

  // The session id of /admin/sessions/<id>[/hint]; InvalidArgument saying what is wrong.
  static Result<SessionId> SessionOf(std::string_view id) {
    SessionId session = 0;
    if (id.empty() || id.size() > 20 || id.find_first_not_of("0123456789") != std::string_view::npos) {
      return Status::InvalidArgument("session id must be a decimal number");
    }
    for (char c : id) {
      if (session > (UINT64_MAX - 9) / 10) return Status::InvalidArgument("session id out of range");
      session = session * 10 + static_cast<uint64_t>(c - '0');
    }
    if (session == 0) return Status::InvalidArgument("session 0 means \"no session\"; name one");
    return session;
  }

  // DELETE /admin/sessions/<id>?tenant=<name>: every block of the session, on every tier.
  Response DeleteSession(const Request& req) {
    Result<SessionId> session =
        SessionOf(std::string_view(req.path).substr(strlen("/admin/sessions/")));
    if (!session.ok()) return JsonError(400, session.status().message());
    std::string name = QueryParam(req.query, "tenant");
    Result<TenantId> tenant = Tenant(name);
    if (!tenant.ok()) {
      return JsonError(TenantHttpStatus(tenant.status()), "?tenant=: " + tenant.status().ToString());
    }
    return DeletionJson(ctx_->store->DeleteSession(*tenant, *session, Actor()),
                        json{{"tenant", name}, {"session", *session}});
  }

  // POST /admin/sessions/<id>/hint?tenant=<name> with any of {"retain_s": seconds} (the
  // session comes back within: keep its G2 blocks last), {"priority": "low"|"normal"|"high"},
  // or {"finished": true} alone (evict them first).
  Response HintSession(const Request& req) {
    std::string_view id = std::string_view(req.path).substr(strlen("/admin/sessions/"));
    id.remove_suffix(strlen("/hint"));
    Result<SessionId> session = SessionOf(id);
    if (!session.ok()) return JsonError(400, session.status().message());
    std::string name = QueryParam(req.query, "tenant");
    Result<TenantId> tenant = Tenant(name);
    if (!tenant.ok()) {
      return JsonError(TenantHttpStatus(tenant.status()), "?tenant=: " + tenant.status().ToString());
    }
    const json body = json::parse(req.body, nullptr, false);
    constexpr std::string_view kExpected =
        "expected an object of \"retain_s\": <whole seconds>, \"priority\": "
        "\"low\"|\"normal\"|\"high\", or \"finished\": true";
    if (!body.is_object() || body.empty()) return JsonError(400, std::string(kExpected));
    auto refuse = [&](const std::string& key) {
      return JsonError(400, "\"" + key + "\": " + std::string(kExpected));
    };
    Store::SessionHint hint;
    for (const auto& [key, value] : body.items()) {
      if (key == "retain_s" && value.is_number_unsigned()) {
        hint.retain_seconds =
            static_cast<uint32_t>(std::min<uint64_t>(value.get<uint64_t>(), UINT32_MAX));
      } else if (key == "finished" && value.is_boolean() && value.get<bool>()) {
        hint.finished = true;
      } else if (key == "priority" && value.is_string()) {
        hint.priority = Store::ParseSessionPriority(value.get<std::string>());
        if (!hint.priority) return refuse(key);
      } else {
        return refuse(key);
      }
    }
    const Status s = ctx_->store->HintSession(*tenant, *session, hint);
    if (s.code() == StatusCode::kNotFound) return JsonError(404, s.ToString());
    if (!s.ok()) return JsonError(400, s.ToString());
    return Json(200, json{{"tenant", name}, {"session", *session}, {"hint", body}});
  }

  // DELETE /admin/tenants/<name> deletes the tenant's blocks (the tenant itself stays
  // configured); POST /admin/tenants/<name>/shred destroys its data keys first.
  Response TenantAction(const Request& req) {
    std::string_view rest = std::string_view(req.path).substr(strlen("/admin/tenants/"));
    bool shred = rest.ends_with("/shred");
    if (shred) rest.remove_suffix(strlen("/shred"));
    if (rest.empty() || rest.find('/') != std::string_view::npos) {
      return JsonError(404, "no such admin endpoint");
    }
    if (shred && req.method != "POST") return JsonError(405, "use POST");
    if (!shred && req.method != "DELETE") return JsonError(405, "use DELETE");
    std::string name(rest);
    Result<TenantId> tenant = Tenant(name);
    if (!tenant.ok()) return JsonError(TenantHttpStatus(tenant.status()), tenant.status().ToString());
    if (shred) {
      return DeletionJson(ctx_->store->ShredTenant(*tenant, Actor()),
                          json{{"tenant", name}, {"shredded", true}});
    }
    return DeletionJson(ctx_->store->DeleteTenant(*tenant, Actor()), json{{"tenant", name}});
  }

  // 200 with `fields` plus the report's counts, or the error with a status that says whether
  // to retry.
  static Response DeletionJson(const Result<DeletionReport>& report, json fields) {
    if (!report.ok()) {
      const Status& s = report.status();
      int http = 500;
      switch (s.code()) {
        case StatusCode::kInvalidArgument: http = 400; break;
        case StatusCode::kNotFound: http = 404; break;
        case StatusCode::kFailedPrecondition: http = 409; break;
        case StatusCode::kUnimplemented: http = 501; break;
        case StatusCode::kUnavailable: http = 503; break;
        default: break;
      }
      return Json(http, json{{"error", s.ToString()}, {"code", std::string(StatusCodeName(s.code()))}});
    }
    fields["memory_blocks"] = report->memory_blocks;
    fields["disk_blocks"] = report->disk_blocks;
    fields["shared_blocks"] = report->shared_blocks;
    return Json(200, fields);
  }

  // Recorded in the audit log for deletions and shreds asked for over the admin API: "admin",
  // or "admin:<tenant>" for a tenant's admin token.
  std::string Actor() const { return scope_.tenant ? "admin:" + *scope_.tenant : "admin"; }

  const ServerContext* ctx_;
  const PeerInfo peer_;
  HttpRequestParser parser_;
  Authenticator::AdminScope scope_;  // Of the request being handled.
};

}  // namespace

std::unique_ptr<ProtocolHandler> NewHttpHandler(const ServerContext* ctx, const PeerInfo& peer) {
  return std::make_unique<HttpHandler>(ctx, peer);
}

}  // namespace kvtier::server
