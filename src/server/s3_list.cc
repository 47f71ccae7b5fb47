#include "src/server/s3_list.h"

#include <algorithm>
#include <vector>

#include "src/server/s3_service.h"

namespace kvtier::server {

S3Reply ListObjectsV2(const ServerContext* ctx, const S3Auth& auth, TenantId tenant,
                      const std::string& bucket) {
  S3Listing l;
  l.bucket = bucket;
  l.prefix = QueryValue(auth, "prefix").value_or("");
  l.delimiter = QueryValue(auth, "delimiter").value_or("");
  l.token = QueryValue(auth, "continuation-token").value_or("");
  l.start_after = QueryValue(auth, "start-after").value_or("");
  l.max = ctx->config->s3.max_list_keys;
  if (std::optional<std::string> m = QueryValue(auth, "max-keys"); m && !m->empty()) {
    if (m->size() > 9 || m->find_first_not_of("0123456789") != std::string::npos) {
      return S3ErrorReply({400, "InvalidArgument", "max-keys must be a non-negative integer"}, "/" + bucket);
    }
    l.max = std::min<size_t>(l.max, std::stoul(*m));
  }
  // The continuation token is the last name returned; the names are listed in order.
  std::string after = !l.token.empty() ? l.token : l.start_after;
  std::vector<BlockKey> probe;
  while (l.objects.size() + l.prefixes.size() < l.max) {
    const size_t want = l.max - l.objects.size() - l.prefixes.size();
    auto names = ctx->s3->ListNames(tenant, bucket, l.prefix, after, want + 1);
    if (names.empty()) break;
    // Names whose objects were evicted or expired are forgotten as they are met.
    probe.clear();
    for (const auto& [name, header] : names) probe.push_back(S3ObjectKey(bucket, name));
    for (size_t i = 0; i < names.size(); ++i) {
      after = names[i].first;
      Result<PrefixMatch> m = ctx->store->LookupPrefix(tenant, std::span(&probe[i], 1));
      if (!m.ok() || m->num_blocks == 0) {
        ctx->s3->NameRemoved(tenant, bucket, names[i].first);
        continue;
      }
      if (l.objects.size() + l.prefixes.size() == l.max) {
        l.truncated = true;
        break;
      }
      const std::string& name = names[i].first;
      if (!l.delimiter.empty()) {
        const size_t d = name.find(l.delimiter, l.prefix.size());
        if (d != std::string::npos) {
          std::string common = name.substr(0, d + l.delimiter.size());
          if (l.prefixes.empty() || l.prefixes.back() != common) l.prefixes.push_back(common);
          l.last = name;
          continue;
        }
      }
      l.objects.push_back({name, names[i].second});
      l.last = name;
    }
    if (l.truncated || names.size() < want + 1) break;
  }
  return {200, {{"Content-Type", "application/xml"}}, ListBucketResultXml(l)};
}

}  // namespace kvtier::server
