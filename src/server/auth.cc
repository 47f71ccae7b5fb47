#include <openssl/crypto.h>

#include <algorithm>

#include "kvtier/env.h"
#include "src/common/sha256.h"
#include "src/server/handler.h"

namespace kvtier::server {
namespace {

std::array<uint8_t, 32> DigestOf(std::string_view token) {
  Sha256 h;
  h.Update(token.data(), token.size());
  return h.Final();
}

// Equal digests, compared without an early exit.
bool Same(const std::optional<std::array<uint8_t, 32>>& stored, const std::array<uint8_t, 32>& given) {
  return stored && CRYPTO_memcmp(stored->data(), given.data(), given.size()) == 0;
}

constexpr std::chrono::hours kMaxLockout{1};
// Peers remembered at most; past this, the ones not locked out and idle longest are forgotten.
constexpr size_t kMaxPeers = 65536;

}  // namespace

Result<Authenticator> Authenticator::Create(const ServerConfig& config, const Store& store) {
  Authenticator auth;
  for (const TenantConfig& t : config.tenants) {
    Result<TenantId> id = store.FindTenant(t.options.name);
    if (!id.ok()) return id.status();
    Entry e;
    e.principal = {*id, t.options.name};
    if (!t.token.empty()) e.token = DigestOf(t.token);
    if (!t.admin_token.empty()) e.admin_token = DigestOf(t.admin_token);
    e.unix_uids = t.unix_uids;
    e.unix_gids = t.unix_gids;
    auth.admin_tokens_configured_ |= e.admin_token.has_value();
    auth.entries_.push_back(std::move(e));
    if (t.options.name == config.anonymous_tenant) auth.anonymous_ = Principal{*id, t.options.name};
  }
  if (!config.admin_token.empty()) {
    auth.admin_token_ = DigestOf(config.admin_token);
    auth.admin_tokens_configured_ = true;
  }
  return auth;
}

Result<Authenticator::Principal> Authenticator::Authenticate(std::string_view tenant,
                                                             std::string_view token) const {
  if (token.empty()) return Status::Unauthenticated("invalid tenant or token");
  const std::array<uint8_t, 32> given = DigestOf(token);
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {  // Every entry is compared: no early exit.
    if (Same(e.token, given)) match = &e;
  }
  if (match != nullptr && (tenant.empty() || tenant == match->principal.name)) {
    return match->principal;
  }
  return Status::Unauthenticated("invalid tenant or token");
}

std::optional<Authenticator::Principal> Authenticator::Anonymous(const PeerInfo& peer) const {
  if (peer.has_credentials) {
    for (const Entry& e : entries_) {
      if (std::find(e.unix_uids.begin(), e.unix_uids.end(), peer.uid) != e.unix_uids.end() ||
          std::find(e.unix_gids.begin(), e.unix_gids.end(), peer.gid) != e.unix_gids.end()) {
        return e.principal;
      }
    }
  }
  if (!peer.local) return std::nullopt;
  return anonymous_;
}

std::optional<Authenticator::AdminScope> Authenticator::Admin(std::string_view bearer) const {
  if (!admin_tokens_configured_) return AdminScope{};
  if (bearer.empty()) return std::nullopt;
  const std::array<uint8_t, 32> given = DigestOf(bearer);
  std::optional<AdminScope> scope;
  if (Same(admin_token_, given)) scope = AdminScope{};
  for (const Entry& e : entries_) {
    if (Same(e.admin_token, given)) scope = AdminScope{e.principal.name};
  }
  return scope;
}

AuthGuard::AuthGuard(const ServerConfig& config, Store* store, Metrics* metrics)
    : max_failures_(config.auth_max_failures),
      lockout_(config.auth_lockout_seconds),
      store_(store),
      metrics_(metrics) {}

Status AuthGuard::Admit(const PeerInfo& peer, Proto proto) {
  if (max_failures_ == 0) return Status::OK();
  const auto now = std::chrono::steady_clock::now();
  MutexLock l(&mu_);
  auto it = peers_.find(peer.id);
  if (it == peers_.end() || it->second.locked_until <= now) return Status::OK();
  metrics_->AuthRefused(proto);
  const auto left = std::chrono::ceil<std::chrono::seconds>(it->second.locked_until - now);
  return Status::ResourceExhausted("too many failed authentications from " + peer.id +
                                   "; locked out for " + std::to_string(left.count()) + " s more");
}

void AuthGuard::Failed(const PeerInfo& peer, Proto proto, std::string_view claimed_tenant) {
  metrics_->AuthFailure(proto);
  const auto now = std::chrono::steady_clock::now();
  bool first = false;
  bool lockout = false;
  std::chrono::seconds duration{0};
  uint32_t failures = 0;
  {
    MutexLock l(&mu_);
    if (peers_.size() >= kMaxPeers && !peers_.contains(peer.id)) {
      // Forget the peers not locked out, idle longest first: a lockout is never dropped early.
      std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> idle;
      for (const auto& [id, state] : peers_) {
        if (state.locked_until <= now) idle.emplace_back(state.last_failure, id);
      }
      std::sort(idle.begin(), idle.end());
      for (size_t i = 0; i < idle.size() && i < kMaxPeers / 4; ++i) peers_.erase(idle[i].second);
    }
    State& s = peers_[peer.id];
    first = s.failures == 0 && s.lockouts == 0;
    s.last_failure = now;
    failures = ++s.failures;
    if (max_failures_ != 0 && s.failures >= max_failures_) {
      lockout = true;
      duration = std::min<std::chrono::seconds>(
          lockout_ * (uint64_t{1} << std::min<uint32_t>(s.lockouts, 12)), kMaxLockout);
      s.locked_until = now + duration;
      s.failures = 0;
      ++s.lockouts;
    }
  }
  if (!first && !lockout) return;
  const std::string over = " from " + peer.id + " over " + std::string(ProtoName(proto));
  if (lockout) {
    metrics_->AuthLockout(proto);
    Env::Default()->Log("kvtierd: " + std::to_string(failures) + " failed authentications in a row" +
                        over + ": locked out for " + std::to_string(duration.count()) + " s");
  } else {
    Env::Default()->Log("kvtierd: failed authentication" + over + " (later ones are counted in "
                        "kvtier_auth_failures_total until a lockout)");
  }
  // Only a configured tenant's name is recorded: what a client claims is not trusted text.
  const bool known = store_->FindTenant(claimed_tenant).ok();
  const Status s =
      store_->RecordAuthFailure(known ? claimed_tenant : "", peer.id, ProtoName(proto), lockout);
  if (!s.ok()) Env::Default()->Log("kvtierd: authentication failure not audited: " + s.ToString());
}

Result<Authenticator::Principal> AuthGuard::Authenticate(const Authenticator& auth,
                                                         const PeerInfo& peer, Proto proto,
                                                         std::string_view tenant,
                                                         std::string_view token) {
  KVTIER_RETURN_IF_ERROR(Admit(peer, proto));
  Result<Authenticator::Principal> who = auth.Authenticate(tenant, token);
  if (who.ok()) {
    Succeeded(peer);
  } else {
    Failed(peer, proto, tenant);
  }
  return who;
}

void AuthGuard::Succeeded(const PeerInfo& peer) {
  MutexLock l(&mu_);
  auto it = peers_.find(peer.id);
  if (it != peers_.end() && it->second.locked_until <= std::chrono::steady_clock::now()) {
    peers_.erase(it);
  }
}

}  // namespace kvtier::server
