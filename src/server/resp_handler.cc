// The RESP2 (Redis protocol) subset on the server side. See docs/protocol.md, "RESP".

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <vector>

#include "src/protocol/resp.h"
#include "src/server/handler.h"

namespace kvtier::server {
namespace {

using protocol::AppendArrayHeader;
using protocol::AppendBulk;
using protocol::AppendError;
using protocol::AppendInteger;
using protocol::AppendNullBulk;
using protocol::AppendSimpleString;
using Action = ProtocolHandler::Outcome::Action;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A whole decimal number, as Redis reads integer arguments.
bool ParseUnsigned(std::string_view s, uint64_t* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Redis's wording for a reply to a store error.
std::string ErrorFor(const Status& s) {
  if (s.code() == StatusCode::kResourceExhausted) return "OOM " + s.ToString();
  return "ERR " + s.ToString();
}

class RespHandler final : public ProtocolHandler {
 public:
  RespHandler(const ServerContext* ctx, PeerInfo peer) : ctx_(ctx), peer_(std::move(peer)) {
    principal_ = ctx_->auth->Anonymous(peer_);
    limits_.max_bulk_bytes = ctx_->config->store.max_block_bytes;
    limits_.max_command_bytes = ctx_->max_frame_bytes;
    limits_.max_args = 2 * static_cast<size_t>(ctx_->config->max_batch) + 8;
  }

  Proto proto() const override { return Proto::kResp; }

  Outcome HandleOne(std::span<std::byte> input, OutputQueue* out) override {
    std::string_view data(reinterpret_cast<const char*>(input.data()), input.size());
    protocol::RespParse parsed = protocol::ParseRespCommand(data, limits_, &args_);
    switch (parsed.state) {
      case protocol::RespParse::State::kNeedMore:
        return {Action::kNeedMore, 0, parsed.bytes_needed};
      case protocol::RespParse::State::kError:
        ctx_->metrics->ProtocolError(Proto::kResp);
        reply_.clear();
        AppendError("ERR " + parsed.error, &reply_);
        out->Append(reply_);
        return {Action::kClose, 0, 0};
      case protocol::RespParse::State::kCommand:
        break;
    }
    if (args_.empty()) return {Action::kHandled, parsed.consumed, 0};
    reply_.clear();
    bool keep_open = Dispatch(out);
    out->Append(reply_);
    return {keep_open ? Action::kHandled : Action::kClose, parsed.consumed, 0};
  }

  void OnIdleTimeout(OutputQueue*) override {}  // Redis closes idle clients silently.

  void OnRequestTimeout(OutputQueue* out) override {
    std::string reply;
    AppendError("ERR request not received whole within request_timeout_seconds", &reply);
    out->Append(reply);
  }

 private:
  // Redis keys are byte strings of any length, within the tenant of the connection.
  static BlockKey KeyFor(std::string_view key) { return NamedBlockKey(key); }

  static std::span<const std::byte> Bytes(std::string_view s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
  }

  // Appends Redis's arity error. Returns true (keep the connection) for Dispatch's convenience.
  bool WrongArity(std::string_view name) {
    AppendError("ERR wrong number of arguments for '" + Lower(name) + "' command", &reply_);
    return true;
  }

  // Appends the reply to `reply_` (and block leases to `out` after flushing `reply_` into it).
  // Returns false to close the connection after the reply.
  bool Dispatch(OutputQueue* out) {
    std::string cmd = Lower(args_[0]);
    size_t argc = args_.size();
    RequestTimer timer(ctx_->metrics, Proto::kResp, Op::kOther);
    if (cmd == "quit") {
      AppendSimpleString("OK", &reply_);
      return false;
    }
    if (cmd == "auth") {
      timer.set_op(Op::kAuth);
      if (argc != 2 && argc != 3) return WrongArity(cmd);
      Authenticate(argc == 3 ? args_[1] : "", args_[argc - 1]);
      return true;
    }
    if (cmd == "hello") {
      timer.set_op(Op::kHello);
      Hello();
      return true;
    }
    if (!principal_) {
      AppendError("NOAUTH Authentication required.", &reply_);
      return true;
    }
    TenantId tenant = principal_->tenant;
    Store* store = ctx_->store;
    if (cmd == "ping") {
      timer.set_op(Op::kPing);
      if (argc == 1) {
        AppendSimpleString("PONG", &reply_);
      } else if (argc == 2) {
        AppendBulk(args_[1], &reply_);
      } else {
        WrongArity(cmd);
      }
    } else if (cmd == "echo") {
      if (argc != 2) return WrongArity(cmd);
      AppendBulk(args_[1], &reply_);
    } else if (cmd == "get") {
      timer.set_op(Op::kGet);
      if (argc != 2) return WrongArity(cmd);
      Result<BlockHandle> h = store->Get(tenant, KeyFor(args_[1]));
      AppendValue(std::move(h), out);
    } else if (cmd == "mget") {
      timer.set_op(Op::kGet);
      if (argc < 2) return WrongArity(cmd);
      std::vector<BlockKey> keys;
      for (size_t i = 1; i < argc; ++i) keys.push_back(KeyFor(args_[i]));
      std::vector<Result<BlockHandle>> values = store->GetMany(tenant, keys);
      AppendArrayHeader(static_cast<int64_t>(values.size()), &reply_);
      for (Result<BlockHandle>& v : values) AppendValue(std::move(v), out);
    } else if (cmd == "set") {
      timer.set_op(Op::kPut);
      Set(tenant);
    } else if (cmd == "mset") {
      timer.set_op(Op::kPut);
      if (argc < 3 || argc % 2 == 0) return WrongArity(cmd);
      MSet(tenant);
    } else if (cmd == "exists") {
      timer.set_op(Op::kExists);
      if (argc < 2) return WrongArity(cmd);
      int64_t n = 0;
      for (size_t i = 1; i < argc; ++i) n += Exists(tenant, KeyFor(args_[i])) ? 1 : 0;
      AppendInteger(n, &reply_);
    } else if (cmd == "del" || cmd == "unlink") {
      timer.set_op(Op::kDelete);
      if (argc < 2) return WrongArity(cmd);
      std::vector<BlockKey> keys;
      for (size_t i = 1; i < argc; ++i) keys.push_back(KeyFor(args_[i]));
      int64_t n = 0;
      for (const Status& s : store->DeleteMany(tenant, keys)) n += s.ok() ? 1 : 0;
      AppendInteger(n, &reply_);
    } else if (cmd == "dbsize") {
      timer.set_op(Op::kStats);
      Result<TenantStats> s = store->StatsForTenant(tenant);
      AppendInteger(s.ok() ? static_cast<int64_t>(s->blocks) : 0, &reply_);
    } else if (cmd == "save") {
      // Redis's synchronous save: here, the tenant's G2 blocks made durable in G3.
      if (argc != 1) return WrongArity(cmd);
      timer.set_op(Op::kPut);
      Result<uint64_t> written = store->Flush(tenant);
      if (written.ok()) {
        AppendSimpleString("OK", &reply_);
      } else {
        AppendError("ERR " + std::string(written.status().message()), &reply_);
      }
    } else if (cmd == "kvtier.hint") {
      timer.set_op(Op::kAdmin);
      if (argc < 3) return WrongArity(cmd);
      Hint(tenant);
    } else if (cmd == "info") {
      timer.set_op(Op::kStats);
      AppendBulk(Info(), &reply_);
    } else if (cmd == "select") {
      if (argc != 2) return WrongArity(cmd);
      if (args_[1] == "0") {
        AppendSimpleString("OK", &reply_);
      } else {
        AppendError("ERR DB index is out of range", &reply_);
      }
    } else if (cmd == "client") {
      Client();
    } else if (cmd == "command") {
      if (argc >= 2 && Lower(args_[1]) == "count") {
        AppendInteger(0, &reply_);
      } else {
        AppendArrayHeader(0, &reply_);
      }
    } else if (cmd == "config" && argc == 3 && Lower(args_[1]) == "get") {
      ConfigGet(Lower(args_[2]));
    } else {
      UnknownCommand();
    }
    return true;
  }

  void Authenticate(std::string_view tenant, std::string_view token) {
    if (Check(tenant, token)) AppendSimpleString("OK", &reply_);
  }

  // AUTH and HELLO's AUTH option: true and principal_ set when the pair matches; otherwise
  // the error reply is queued (WRONGPASS, or a lockout after too many failures).
  bool Check(std::string_view tenant, std::string_view token) {
    Result<Authenticator::Principal> who =
        ctx_->auth_guard->Authenticate(*ctx_->auth, peer_, Proto::kResp, tenant, token);
    if (who.status().code() == StatusCode::kResourceExhausted) {  // Locked out.
      AppendError("ERR " + std::string(who.status().message()), &reply_);
      return false;
    }
    if (!who.ok()) {
      AppendError("WRONGPASS invalid username-password pair or user is disabled.", &reply_);
      return false;
    }
    principal_ = *who;
    return true;
  }

  // KVTIER.HINT session [RETAIN seconds] [PRIORITY low|normal|high] [FINISHED]: a session hint
  // (Store::HintSession) for a session the tenant put over the native protocol.
  void Hint(TenantId tenant) {
    uint64_t session = 0;
    if (!ParseUnsigned(args_[1], &session)) {
      AppendError("ERR session is not an unsigned integer", &reply_);
      return;
    }
    auto refuse = [&](std::string_view at) {
      AppendError("ERR syntax error at '" + std::string(at) +
                      "': KVTIER.HINT session [RETAIN seconds] "
                      "[PRIORITY low|normal|high] [FINISHED]",
                  &reply_);
    };
    Store::SessionHint hint;
    for (size_t i = 2; i < args_.size(); ++i) {
      const std::string opt = Lower(args_[i]);
      uint64_t seconds = 0;
      if (opt == "finished") {
        hint.finished = true;
      } else if (opt == "retain" && i + 1 < args_.size() && ParseUnsigned(args_[i + 1], &seconds)) {
        hint.retain_seconds = static_cast<uint32_t>(std::min<uint64_t>(seconds, UINT32_MAX));
        ++i;
      } else if (opt == "priority" && i + 1 < args_.size()) {
        hint.priority = Store::ParseSessionPriority(Lower(args_[i + 1]));
        if (!hint.priority) return refuse(args_[i]);
        ++i;
      } else {
        return refuse(args_[i]);
      }
    }
    const Status s = ctx_->store->HintSession(tenant, session, hint);
    if (s.ok()) {
      AppendSimpleString("OK", &reply_);
    } else {
      AppendError(ErrorFor(s), &reply_);
    }
  }

  void Hello() {
    size_t argc = args_.size();
    if (argc >= 2 && args_[1] != "2") {
      if (args_[1] == "3") {
        AppendError("NOPROTO unsupported protocol version: kvtier speaks RESP2 only", &reply_);
      } else {
        AppendError("ERR Protocol version is not an integer or out of range", &reply_);
      }
      return;
    }
    for (size_t i = 2; i < argc; ++i) {
      std::string opt = Lower(args_[i]);
      if (opt == "auth" && i + 2 < argc) {
        if (!Check(args_[i + 1], args_[i + 2])) return;
        i += 2;
      } else if (opt == "setname" && i + 1 < argc) {
        client_name_ = std::string(args_[++i]);
      } else {
        AppendError("ERR Syntax error in HELLO option '" + std::string(args_[i]) + "'", &reply_);
        return;
      }
    }
    if (!principal_) {
      AppendError("NOAUTH HELLO must be called with the client already authenticated, otherwise "
                  "the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the "
                  "client and select the RESP protocol version at the same time",
                  &reply_);
      return;
    }
    AppendArrayHeader(14, &reply_);
    AppendBulk("server", &reply_);
    AppendBulk("redis", &reply_);
    AppendBulk("version", &reply_);
    AppendBulk("7.0.0", &reply_);
    AppendBulk("proto", &reply_);
    AppendInteger(2, &reply_);
    AppendBulk("id", &reply_);
    AppendInteger(static_cast<int64_t>(reinterpret_cast<uintptr_t>(this) & 0x7fffffff), &reply_);
    AppendBulk("mode", &reply_);
    AppendBulk("standalone", &reply_);
    AppendBulk("role", &reply_);
    AppendBulk("master", &reply_);
    AppendBulk("modules", &reply_);
    AppendArrayHeader(0, &reply_);
  }

  void Client() {
    std::string sub = args_.size() >= 2 ? Lower(args_[1]) : "";
    if (sub == "setname" && args_.size() == 3) {
      client_name_ = std::string(args_[2]);
      AppendSimpleString("OK", &reply_);
    } else if (sub == "getname" && args_.size() == 2) {
      if (client_name_.empty()) {
        AppendNullBulk(&reply_);
      } else {
        AppendBulk(client_name_, &reply_);
      }
    } else if (sub == "setinfo" && args_.size() == 4) {
      AppendSimpleString("OK", &reply_);
    } else if (sub == "id" && args_.size() == 2) {
      AppendInteger(static_cast<int64_t>(reinterpret_cast<uintptr_t>(this) & 0x7fffffff), &reply_);
    } else {
      AppendError("ERR unknown subcommand '" + std::string(args_.size() >= 2 ? args_[1] : "") +
                      "'. Try CLIENT HELP.",
                  &reply_);
    }
  }

  // The few Redis settings clients read on connect (redis-benchmark asks for save and
  // appendonly); anything else is an empty list, as Redis answers for an unknown parameter.
  void ConfigGet(const std::string& param) {
    std::string value;
    if (param == "save") {
      value = "";
    } else if (param == "appendonly") {
      value = "no";
    } else if (param == "maxmemory") {
      value = std::to_string(ctx_->config->store.memory.capacity_bytes);
    } else {
      AppendArrayHeader(0, &reply_);
      return;
    }
    AppendArrayHeader(2, &reply_);
    AppendBulk(param, &reply_);
    AppendBulk(value, &reply_);
  }

  void UnknownCommand() {
    std::string msg = "ERR unknown command '" + std::string(args_[0].substr(0, 128)) +
                      "', with args beginning with: ";
    for (size_t i = 1; i < args_.size() && msg.size() < 512; ++i) {
      msg += "'" + std::string(args_[i].substr(0, 128)) + "' ";
    }
    ctx_->metrics->ProtocolError(Proto::kResp);
    AppendError(msg, &reply_);
  }

  // Appends a GET reply: the value's bytes go to the socket straight from the arena.
  void AppendValue(Result<BlockHandle> h, OutputQueue* out) {
    if (!h.ok()) {
      if (h.status().code() == StatusCode::kNotFound) {
        AppendNullBulk(&reply_);
      } else {
        AppendError(ErrorFor(h.status()), &reply_);
      }
      return;
    }
    protocol::AppendBulkHeader(h->size(), &reply_);
    out->Append(reply_);
    reply_.clear();
    out->AppendLease(std::move(h).value());
    reply_.append("\r\n");
  }

  bool Exists(TenantId tenant, const BlockKey& key) {
    Result<PrefixMatch> m = ctx_->store->LookupPrefix(tenant, std::span(&key, 1));
    return m.ok() && m->num_blocks == 1;
  }

  void Set(TenantId tenant) {
    size_t argc = args_.size();
    if (argc < 3) {
      WrongArity("set");
      return;
    }
    bool nx = false;
    bool xx = false;
    for (size_t i = 3; i < argc; ++i) {
      std::string opt = Lower(args_[i]);
      if (opt == "nx") {
        nx = true;
      } else if (opt == "xx") {
        xx = true;
      } else if (opt == "keepttl") {
        // Per-key expiry does not exist in kvtier (the tenant's TTL applies): nothing to keep.
      } else if ((opt == "ex" || opt == "px" || opt == "exat" || opt == "pxat") && i + 1 < argc) {
        ++i;  // Accepted and ignored: the tenant's TTL applies. See docs/protocol.md.
      } else {
        AppendError("ERR syntax error", &reply_);
        return;
      }
    }
    if (nx && xx) {
      AppendError("ERR syntax error", &reply_);
      return;
    }
    if (args_[2].empty()) {
      AppendError("ERR kvtier does not store empty values", &reply_);
      return;
    }
    BlockKey key = KeyFor(args_[1]);
    if (nx || xx) {
      bool exists = Exists(tenant, key);
      if ((nx && exists) || (xx && !exists)) {
        AppendNullBulk(&reply_);
        return;
      }
    }
    // A RESP key names a value that SET may change; a new key or the same bytes delete nothing.
    Status s = ctx_->store->Replace(tenant, key, Bytes(args_[2]));
    if (s.ok()) {
      AppendSimpleString("OK", &reply_);
    } else {
      AppendError(ErrorFor(s), &reply_);
    }
  }

  void MSet(TenantId tenant) {
    for (size_t i = 2; i < args_.size(); i += 2) {
      if (args_[i].empty()) {
        AppendError("ERR kvtier does not store empty values", &reply_);
        return;
      }
    }
    for (size_t i = 1; i + 1 < args_.size(); i += 2) {
      Status s = ctx_->store->Replace(tenant, KeyFor(args_[i]), Bytes(args_[i + 1]));
      if (!s.ok()) {
        AppendError(ErrorFor(s), &reply_);
        return;
      }
    }
    AppendSimpleString("OK", &reply_);
  }

  std::string Info() {
    StoreStats s = ctx_->store->Stats();
    Result<TenantStats> t = ctx_->store->StatsForTenant(principal_->tenant);
    auto uptime = std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::steady_clock::now() - ctx_->started);
    std::string info;
    auto line = [&info](std::string_view k, auto v) {
      info += k;
      info += ':';
      if constexpr (std::is_convertible_v<decltype(v), std::string_view>) {
        info += v;
      } else {
        info += std::to_string(v);
      }
      info += "\r\n";
    };
    info += "# Server\r\n";
    line("redis_version", "7.0.0");
    line("kvtier_version", "0.1.0");
    line("redis_mode", "standalone");
    line("arch_bits", 64);
    line("uptime_in_seconds", uptime.count());
    info += "\r\n# Clients\r\n";
    line("connected_clients", ctx_->metrics->ActiveConnections());
    info += "\r\n# Memory\r\n";
    line("used_memory", s.memory_used_bytes);
    line("maxmemory", s.memory_capacity_bytes);
    line("maxmemory_policy", "kvtier-s3fifo");
    info += "\r\n# Stats\r\n";
    if (t.ok()) {
      line("keyspace_hits", t->hits);
      line("keyspace_misses", t->misses);
      line("evicted_keys", t->evictions);
      line("expired_keys", t->expirations);
    }
    info += "\r\n# Keyspace\r\n";
    if (t.ok() && t->blocks > 0) info += "db0:keys=" + std::to_string(t->blocks) + ",expires=0,avg_ttl=0\r\n";
    info += "\r\n# Kvtier\r\n";
    line("tenant", principal_->name);
    line("tier_g3_blocks", s.disk_blocks);
    return info;
  }

  const ServerContext* ctx_;
  const PeerInfo peer_;
  std::optional<Authenticator::Principal> principal_;
  protocol::RespLimits limits_;
  std::vector<std::string_view> args_;
  std::string reply_;
  std::string client_name_;
};

}  // namespace

std::unique_ptr<ProtocolHandler> NewRespHandler(const ServerContext* ctx, const PeerInfo& peer) {
  return std::make_unique<RespHandler>(ctx, peer);
}

}  // namespace kvtier::server
