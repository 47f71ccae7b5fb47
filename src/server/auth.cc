#include "src/server/handler.h"

namespace kvtier::server {
namespace {

// Compares without an early exit, so response time does not reveal how much of a token matched.
bool TokensEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Result<Authenticator> Authenticator::Create(const ServerConfig& config, const Store& store) {
  Authenticator auth;
  for (const TenantConfig& t : config.tenants) {
    Result<TenantId> id = store.FindTenant(t.options.name);
    if (!id.ok()) return id.status();
    auth.entries_.push_back({{*id, t.options.name}, t.token});
    if (t.options.name == config.anonymous_tenant) auth.anonymous_ = Principal{*id, t.options.name};
  }
  return auth;
}

Result<Authenticator::Principal> Authenticator::Authenticate(std::string_view tenant,
                                                             std::string_view token) const {
  if (!token.empty()) {
    for (const Entry& e : entries_) {
      if (e.token.empty() || !TokensEqual(e.token, token)) continue;
      if (tenant.empty() || tenant == e.principal.name) return e.principal;
    }
  }
  return Status::Unauthenticated("invalid tenant or token");
}

std::optional<Authenticator::Principal> Authenticator::Anonymous(bool local_peer) const {
  if (!local_peer) return std::nullopt;
  return anonymous_;
}

}  // namespace kvtier::server
