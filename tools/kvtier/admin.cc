// kvtier admin: a running kvtierd driven through its HTTP endpoint (/healthz, /metrics and the
// admin API of docs/protocol.md, "HTTP"): status, tenants, pin/unpin, delete, shred, and top,
// a live view of rates computed from two /metrics samples.

#include <curl/curl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/block_key.h"
#include "tools/kvtier/commands.h"

namespace kvtier::cli {
namespace {

using json = nlohmann::json;

struct AdminOptions {
  std::string url;
  std::string token;
  bool json_output = false;
  // Subcommand arguments.
  std::string tenant;
  std::vector<std::string> keys;   // 64 hex digits each.
  std::vector<std::string> names;  // RESP / LMCache names, mapped as kvtierd maps them.
  std::optional<uint64_t> session;
  bool all = false;
  bool yes = false;
  double interval_s = 2;
  int iterations = 0;  // top: 0 = until interrupted.
};

struct HttpReply {
  long status = 0;
  std::string body;
};

// The failure a command reports: what happened and what to do; exit code 2.
struct AdminError {
  std::string message;
};

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

HttpReply Request(const AdminOptions& o, const std::string& method, const std::string& path,
                  const std::string& body = "") {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw AdminError{"cannot initialise libcurl"};
  const std::string url = o.url + path;
  HttpReply reply;
  curl_slist* headers = nullptr;
  if (!o.token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + o.token).c_str());
  if (!body.empty()) headers = curl_slist_append(headers, "Content-Type: application/json");
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers, curl_slist_free_all);
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT_MS, 3000L);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, 60000L);
  if (!body.empty() || method == "POST") {
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  if (method == "HEAD") curl_easy_setopt(curl.get(), CURLOPT_NOBODY, 1L);
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    throw AdminError{"cannot reach kvtierd at " + o.url + ": " + curl_easy_strerror(rc) +
                     " (is it running, and is this its [server] http_listen? --url or "
                     "KVTIER_ADMIN_URL sets the address)"};
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  if (reply.status == 401) {
    throw AdminError{"kvtierd wants its admin token: pass --token or set KVTIER_ADMIN_TOKEN "
                     "(the [auth] admin_token of its configuration)"};
  }
  return reply;
}

// A JSON reply of the admin API; its error (with the code kvtierd gave) when not 2xx.
json JsonReply(const HttpReply& r, const std::string& what) {
  json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (r.status / 100 == 2 && !j.is_discarded()) return j;
  std::string error = j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r.body;
  while (!error.empty() && error.back() == '\n') error.pop_back();
  throw AdminError{what + " failed (HTTP " + std::to_string(r.status) + "): " + error};
}

// /metrics as sample -> value, e.g. "kvtier_tier_used_bytes{tier=\"g2\"}" -> 1234.
std::map<std::string, double> Metrics(const AdminOptions& o) {
  HttpReply r = Request(o, "GET", "/metrics");
  if (r.status != 200) throw AdminError{"GET /metrics answered HTTP " + std::to_string(r.status)};
  std::map<std::string, double> out;
  size_t begin = 0;
  while (begin < r.body.size()) {
    size_t end = r.body.find('\n', begin);
    if (end == std::string::npos) end = r.body.size();
    const std::string line = r.body.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    out[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return out;
}

double Get(const std::map<std::string, double>& m, const std::string& sample) {
  auto it = m.find(sample);
  return it == m.end() ? 0 : it->second;
}

// The sum of every sample of `name` whose labels contain `label` (e.g. "op=\"get\""), or all.
double Sum(const std::map<std::string, double>& m, const std::string& name,
           const std::string& label = "") {
  double total = 0;
  for (auto it = m.lower_bound(name); it != m.end() && it->first.starts_with(name); ++it) {
    const std::string& key = it->first;
    if (key.size() > name.size() && key[name.size()] != '{') continue;
    if (label.empty() || key.find(label) != std::string::npos) total += it->second;
  }
  return total;
}

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string Health(const AdminOptions& o) {
  HttpReply r = Request(o, "GET", "/healthz");
  std::string body = r.body;
  while (!body.empty() && body.back() == '\n') body.pop_back();
  return body;
}

void PrintTiers(const std::map<std::string, double>& m) {
  std::printf("%-5s %12s %12s %10s %10s %10s  %s\n", "tier", "capacity", "used", "blocks", "hits",
              "misses", "writes");
  for (const char* tier : {"g2", "g3"}) {
    const std::string t = std::string("{tier=\"") + tier + "\"}";
    const double capacity = Get(m, "kvtier_tier_capacity_bytes" + t);
    if (capacity == 0) continue;
    const bool g2 = std::string(tier) == "g2";
    const std::string writable = g2 ? "-"
                                 : m.count("kvtier_tier_writable" + t) && Get(m, "kvtier_tier_writable" + t) == 0
                                     ? "FAILING"
                                     : "ok";
    std::printf("%-5s %12s %12s %10.0f %10s %10s  %s\n", tier, Bytes(capacity).c_str(),
                Bytes(Get(m, "kvtier_tier_used_bytes" + t)).c_str(),
                Get(m, "kvtier_tier_blocks" + t),
                g2 ? "-" : std::to_string(static_cast<uint64_t>(Get(m, "kvtier_tier_hits_total" + t))).c_str(),
                g2 ? "-" : std::to_string(static_cast<uint64_t>(Get(m, "kvtier_tier_misses_total" + t))).c_str(),
                writable.c_str());
  }
}

int Status(const AdminOptions& o) {
  const std::string health = Health(o);
  const auto m = Metrics(o);
  if (o.json_output) {
    std::printf("%s\n", json{{"health", health}, {"metrics", m}}.dump(2).c_str());
    return 0;
  }
  std::printf("kvtierd at %s: %s\n\n", o.url.c_str(), health.c_str());
  PrintTiers(m);
  std::printf("\nconnections: native %.0f, resp %.0f, http %.0f\n",
              Get(m, "kvtier_connections{protocol=\"native\"}"),
              Get(m, "kvtier_connections{protocol=\"resp\"}"),
              Get(m, "kvtier_connections{protocol=\"http\"}"));
  std::printf("warm restart: %.0f blocks adopted at start, %.0f dropped, in %.2f s\n",
              Get(m, "kvtier_memory_restored_blocks"), Get(m, "kvtier_memory_restore_dropped_blocks"),
              Get(m, "kvtier_memory_restore_seconds"));
  const double demoted = Get(m, "kvtier_demoted_blocks_total");
  // Blocks G3 held already were demoted without a write.
  const double written = demoted - Get(m, "kvtier_demotion_disk_skips_total");
  const double demotion_writes = Get(m, "kvtier_demotion_writes_total");
  std::printf("G3: %.0f blocks demoted (%.1f per write), %.0f demotions failed, %.0f corrupt "
              "records dropped\n",
              demoted, demotion_writes > 0 ? written / demotion_writes : 0.0,
              Get(m, "kvtier_demotion_failures_total"), Get(m, "kvtier_disk_corrupt_records_total"));
  const double g4_calls = Get(m, "kvtier_tier_hits_total{tier=\"g4\"}") +
                          Get(m, "kvtier_tier_misses_total{tier=\"g4\"}") +
                          Get(m, "kvtier_shared_puts_total") + Get(m, "kvtier_shared_errors_total");
  if (g4_calls > 0 || Get(m, "kvtier_shared_janitor_lease") != 0) {
    std::printf("G4: %.0f objects published, %.0f errors, janitor lease %s, %.0f notices pending\n",
                Get(m, "kvtier_shared_puts_total"), Get(m, "kvtier_shared_errors_total"),
                Get(m, "kvtier_shared_janitor_lease") != 0 ? "held here" : "elsewhere",
                Get(m, "kvtier_deletion_notices_pending"));
  }
  return health.starts_with("ok") ? 0 : 1;
}

int Tenants(const AdminOptions& o) {
  const json j = JsonReply(Request(o, "GET", "/admin/tenants"), "GET /admin/tenants");
  if (o.json_output) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-20s %10s %12s %12s %10s %10s %10s %10s\n", "tenant", "blocks", "G2 bytes", "budget",
              "hits", "misses", "puts", "evictions");
  for (const json& t : j.at("tenants")) {
    const uint64_t budget = t.value("memory_budget_bytes", uint64_t{0});
    std::printf("%-20s %10llu %12s %12s %10llu %10llu %10llu %10llu\n",
                t.value("name", std::string()).c_str(),
                static_cast<unsigned long long>(t.value("blocks", uint64_t{0})),
                Bytes(static_cast<double>(t.value("bytes", uint64_t{0}))).c_str(),
                budget == 0 ? "none" : Bytes(static_cast<double>(budget)).c_str(),
                static_cast<unsigned long long>(t.value("hits", uint64_t{0})),
                static_cast<unsigned long long>(t.value("misses", uint64_t{0})),
                static_cast<unsigned long long>(t.value("puts", uint64_t{0})),
                static_cast<unsigned long long>(t.value("evictions", uint64_t{0})));
  }
  return 0;
}

// --key values and the keys of --name values, as 64 hex digits.
std::vector<std::string> HexKeys(const AdminOptions& o) {
  std::vector<std::string> keys = o.keys;
  for (const std::string& name : o.names) keys.push_back(NamedBlockKey(name).ToHex());
  for (const std::string& k : keys) {
    if (!BlockKey::FromHex(k).ok()) {
      throw AdminError{"'" + k + "' is not a block key (64 hex digits; --name takes a name)"};
    }
  }
  if (keys.empty()) throw AdminError{"name the blocks: --key HEX or --name NAME, one or more"};
  return keys;
}

int Pin(const AdminOptions& o, bool pin) {
  const std::string path = pin ? "/admin/pin" : "/admin/unpin";
  const json body = {{"tenant", o.tenant}, {"keys", HexKeys(o)}};
  const json j = JsonReply(Request(o, "POST", path, body.dump()), "POST " + path);
  int failed = 0;
  for (const json& r : j.at("results")) {
    const std::string status = r.value("status", std::string());
    if (status != "OK") ++failed;
    const std::string message = r.value("message", std::string());
    std::printf("%s %s%s%s\n", r.value("key", std::string()).c_str(), status.c_str(),
                message.empty() ? "" : ": ", message.c_str());
  }
  return failed == 0 ? 0 : 1;
}

void PrintDeletion(const json& j) {
  std::printf("removed %llu copies from G2 and %llu from G3\n",
              static_cast<unsigned long long>(j.value("memory_blocks", uint64_t{0})),
              static_cast<unsigned long long>(j.value("disk_blocks", uint64_t{0})));
}

int Delete(const AdminOptions& o) {
  const int scopes = (o.session ? 1 : 0) + (o.all ? 1 : 0) + (o.keys.empty() && o.names.empty() ? 0 : 1);
  if (scopes != 1) throw AdminError{"say what to delete: --session ID, --all, or --key/--name"};
  if (o.session) {
    const std::string path = "/admin/sessions/" + std::to_string(*o.session) + "?tenant=" + o.tenant;
    PrintDeletion(JsonReply(Request(o, "DELETE", path), "DELETE " + path));
    return 0;
  }
  if (o.all) {
    const std::string path = "/admin/tenants/" + o.tenant;
    PrintDeletion(JsonReply(Request(o, "DELETE", path), "DELETE " + path));
    return 0;
  }
  int missing = 0;
  for (const std::string& key : HexKeys(o)) {
    const std::string path = "/admin/blocks/" + key + "?tenant=" + o.tenant;
    HttpReply r = Request(o, "DELETE", path);
    if (r.status == 404) {
      std::printf("%s not stored\n", key.c_str());
      ++missing;
      continue;
    }
    JsonReply(r, "DELETE " + path);
    std::printf("%s deleted\n", key.c_str());
  }
  return missing == 0 ? 0 : 1;
}

int Shred(const AdminOptions& o) {
  if (!o.yes) {
    throw AdminError{"shredding destroys tenant '" + o.tenant + "''s keys: every encrypted copy "
                     "of its blocks, on every node, becomes unreadable for good. Add --yes"};
  }
  const std::string path = "/admin/tenants/" + o.tenant + "/shred";
  PrintDeletion(JsonReply(Request(o, "POST", path), "POST " + path));
  return 0;
}

// One frame of top: rates between two samples `seconds` apart.
void PrintTop(const AdminOptions& o, const std::string& health,
              const std::map<std::string, double>& before, const std::map<std::string, double>& now,
              double seconds) {
  auto rate = [&](const std::string& name, const std::string& label = "") {
    return (Sum(now, name, label) - Sum(before, name, label)) / seconds;
  };
  std::printf("kvtier top - %s: %s (every %.1f s)\n\n", o.url.c_str(), health.c_str(), seconds);
  PrintTiers(now);
  const double hits = rate("kvtier_tenant_hits_total"), misses = rate("kvtier_tenant_misses_total");
  std::printf("\nhit ratio %5.1f%%   in %s/s   out %s/s   connections %.0f\n",
              hits + misses > 0 ? 100 * hits / (hits + misses) : 0.0,
              Bytes(rate("kvtier_network_received_bytes_total")).c_str(),
              Bytes(rate("kvtier_network_sent_bytes_total")).c_str(),
              Sum(now, "kvtier_connections"));
  std::printf("\n%-16s %10s\n", "operation", "per second");
  for (const char* op : {"get", "put", "lookup_prefix", "exists", "delete", "pin", "stats", "admin"}) {
    const double r = rate("kvtier_request_duration_seconds_count", std::string("op=\"") + op + "\"");
    std::printf("%-16s %10.1f\n", op, r);
  }
  std::printf("\nG2 evictions/s %.1f   demoted/s %.1f   promoted/s %.1f   G3 hits/s %.1f\n",
              rate("kvtier_tier_evictions_total", "tier=\"g2\""), rate("kvtier_demoted_blocks_total"),
              rate("kvtier_promoted_blocks_total"), rate("kvtier_tier_hits_total", "tier=\"g3\""));
}

int Top(const AdminOptions& o) {
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  auto before = Metrics(o);
  auto at = std::chrono::steady_clock::now();
  for (int frame = 0; o.iterations == 0 || frame < o.iterations; ++frame) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));  // The refresh.
    const std::string health = Health(o);
    auto now = Metrics(o);
    const auto t = std::chrono::steady_clock::now();
    if (tty) std::printf("\033[H\033[2J");
    PrintTop(o, health, before, now, std::chrono::duration<double>(t - at).count());
    if (!tty) std::printf("\n");
    std::fflush(stdout);
    before = std::move(now);
    at = t;
  }
  return 0;
}

}  // namespace

void AddAdminCommand(CLI::App& app, int* exit_code) {
  CLI::App* admin = app.add_subcommand(
      "admin", "Drive a running kvtierd through its HTTP endpoint: status, tenants, pin, "
               "unpin, delete, shred, top; check its G3 or G4 offline: fsck; G2 arena "
               "files on this host: arenas.");
  admin->require_subcommand(1);
  auto o = std::make_shared<AdminOptions>();
  const char* url = std::getenv("KVTIER_ADMIN_URL");
  const char* token = std::getenv("KVTIER_ADMIN_TOKEN");
  o->url = url != nullptr && *url != '\0' ? url : "http://127.0.0.1:7381";
  o->token = token != nullptr ? token : "";
  admin->add_option("--url", o->url, "kvtierd's HTTP endpoint (default $KVTIER_ADMIN_URL, else "
                                     "http://127.0.0.1:7381)");
  admin->add_option("--token", o->token, "Its [auth] admin_token (default $KVTIER_ADMIN_TOKEN)");
  auto run = [o, exit_code](int (*command)(const AdminOptions&)) {
    return [o, exit_code, command] {
      while (!o->url.empty() && o->url.back() == '/') o->url.pop_back();
      try {
        *exit_code = command(*o);
      } catch (const AdminError& e) {
        std::fprintf(stderr, "kvtier admin: %s\n", e.message.c_str());
        *exit_code = 2;
      }
    };
  };
  auto tenant_option = [o](CLI::App* c, bool required) {
    CLI::Option* opt = c->add_option("--tenant", o->tenant, "The tenant (by name)");
    if (required) {
      opt->required();
    } else {
      o->tenant = "default";
      opt->capture_default_str();
    }
  };
  auto key_options = [o](CLI::App* c) {
    c->add_option("--key", o->keys, "Block keys, 64 hex digits each");
    c->add_option("--name", o->names, "Names of values stored by name (RESP keys, LMCache chunks)");
  };

  CLI::App* status = admin->add_subcommand("status", "Health, tiers, connections, warm restart, G3, G4");
  status->add_flag("--json", o->json_output, "The health line and every metric, as JSON");
  status->callback(run(Status));

  CLI::App* tenants = admin->add_subcommand("tenants", "Blocks, bytes, budget, hits, puts per tenant");
  tenants->add_flag("--json", o->json_output, "kvtierd's JSON as it is");
  tenants->callback(run(Tenants));

  CLI::App* pin = admin->add_subcommand("pin", "Keep blocks in G2 (pins nest)");
  tenant_option(pin, false);
  key_options(pin);
  pin->callback(run([](const AdminOptions& a) { return Pin(a, true); }));
  CLI::App* unpin = admin->add_subcommand("unpin", "Undo one pin of each block");
  tenant_option(unpin, false);
  key_options(unpin);
  unpin->callback(run([](const AdminOptions& a) { return Pin(a, false); }));

  CLI::App* del = admin->add_subcommand("delete", "Delete blocks on every tier: by key or name, a "
                                                  "session, or all of a tenant's");
  tenant_option(del, true);
  key_options(del);
  del->add_option("--session", o->session, "Every block put with this session id");
  del->add_flag("--all", o->all, "Every block of the tenant (it stays configured)");
  del->callback(run(Delete));

  CLI::App* shred = admin->add_subcommand("shred", "Crypto-shred a tenant: destroy its keys, "
                                                   "then delete its blocks");
  tenant_option(shred, true);
  shred->add_flag("--yes", o->yes, "Yes: the tenant's encrypted data becomes unreadable for good");
  shred->callback(run(Shred));

  CLI::App* top = admin->add_subcommand("top", "A live view: tiers, hit ratio, bytes and "
                                               "operations per second");
  top->add_option("--interval", o->interval_s, "Seconds between frames")->capture_default_str()
      ->check(CLI::PositiveNumber);
  top->add_option("--iterations", o->iterations, "Frames to show, then exit (0 = until Ctrl-C)")
      ->capture_default_str();
  top->callback(run(Top));

  AddFsckCommand(admin, exit_code);
  AddArenasCommand(admin, exit_code);
}

}  // namespace kvtier::cli
