// Opening a Store: options checked and normalised (SanitizeOptions), the data services
// (audit log, keys, codecs), and the tiers, G2 first, then G3 and G4.

#include <bit>
#include <set>
#include <string>
#include <utility>

#include "src/engine/store_impl.h"
#include "src/services/encryption/master_key.h"
#include "src/tier/sharedfs/shared_fs_tier.h"
#ifdef KVTIER_WITH_S3
#include "src/tier/s3/s3_tier.h"
#endif

namespace kvtier {
namespace {

constexpr size_t kMaxTenantNameBytes = 128;
constexpr uint64_t kMaxBlockBytesLimit = 1 * kGiB;
constexpr uint64_t kMaxTtlSeconds = uint64_t{100} * 365 * 24 * 3600;

}  // namespace

Result<Options> SanitizeOptions(const Options& in) {
  Options o = in;
  if (o.env == nullptr) o.env = Env::Default();
  MemoryTierOptions& m = o.memory;
  if (m.page_bytes < 4 * kKiB || m.page_bytes > 2 * kMiB || !std::has_single_bit(m.page_bytes)) {
    return Status::InvalidArgument("memory.page_bytes must be a power of two from 4 KiB to 2 MiB");
  }
  if (o.max_block_bytes == 0 || o.max_block_bytes > kMaxBlockBytesLimit) {
    return Status::InvalidArgument("max_block_bytes must be from 1 byte to 1 GiB");
  }
  m.capacity_bytes -= m.capacity_bytes % m.page_bytes;
  if (m.capacity_bytes / m.page_bytes > UINT32_MAX) {
    return Status::InvalidArgument("memory.capacity_bytes over 2^32 pages; raise page_bytes");
  }
  if (m.capacity_bytes < o.max_block_bytes) {
    return Status::InvalidArgument("memory.capacity_bytes (" + std::to_string(m.capacity_bytes) +
                                   ") is smaller than max_block_bytes (" +
                                   std::to_string(o.max_block_bytes) + ")");
  }
  if (!(m.initial_reused_share >= 0.0 && m.initial_reused_share <= m.max_reused_share &&
        m.max_reused_share < 1.0)) {
    return Status::InvalidArgument(
        "memory reused shares must satisfy 0 <= initial_reused_share <= max_reused_share < 1");
  }
  if (o.payload_free && !o.disk.dir.empty()) {
    return Status::InvalidArgument("payload_free stores cannot have a disk tier");
  }
  if (o.tenants.empty()) return Status::InvalidArgument("at least one tenant is required");
  std::set<std::string> names;
  for (const TenantOptions& t : o.tenants) {
    if (t.name.empty() || t.name.size() > kMaxTenantNameBytes) {
      return Status::InvalidArgument("tenant names must be 1 to 128 bytes");
    }
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("tenant '" + t.name + "' is listed twice");
    }
    if (t.memory_budget_bytes != 0 && t.memory_budget_bytes < m.page_bytes) {
      return Status::InvalidArgument("tenant '" + t.name +
                                     "' memory_budget_bytes is below one page");
    }
    if (t.ttl_seconds > kMaxTtlSeconds || t.max_age_seconds > kMaxTtlSeconds) {
      return Status::InvalidArgument("tenant '" + t.name +
                                     "' ttl_seconds or max_age_seconds is over 100 years");
    }
  }
  if ((o.disk_data.encrypt || o.shared_data.encrypt) && o.security.master_key.empty()) {
    return Status::InvalidArgument("encrypting a tier needs security.master_key");
  }
  if (o.shared.s3_multipart_part_bytes < 5 * kMiB ||
      o.shared.s3_multipart_threshold_bytes < o.shared.s3_multipart_part_bytes) {
    return Status::InvalidArgument(
        "shared.s3_multipart_part must be at least 5 MiB (S3's smallest part), and "
        "shared.s3_multipart_threshold at least the part size");
  }
  if (o.payload_free && !o.shared.location.empty()) {
    return Status::InvalidArgument("payload_free stores cannot have a shared tier");
  }
  if (o.eviction_observer != nullptr && !o.payload_free) {
    return Status::InvalidArgument("an eviction_observer needs a payload_free store");
  }
  if (o.security.keystore_dir.empty()) o.security.keystore_dir = o.disk.dir;
  // With encrypted G4 the keys live in G4 (cluster keys); otherwise in a keystore file.
  const bool cluster_keys = !o.shared.location.empty() && o.shared_data.encrypt;
  if (!o.security.master_key.empty() && !cluster_keys && o.security.keystore_dir.empty()) {
    return Status::InvalidArgument("security.master_key needs security.keystore_dir or disk.dir");
  }
  if (o.payload_free) o.retention_scan_seconds = 0;
  return o;
}

namespace {

Result<encryption::MasterKey> LoadMasterKey(const std::string& source) {
  if (source.starts_with("file:")) return encryption::MasterKey::LoadFile(source.substr(5));
  if (source.starts_with("env:")) {
    return encryption::MasterKey::FromEnvironment(source.substr(4).c_str());
  }
  return Status::InvalidArgument(
      "security.master_key must be \"file:<path>\" or \"env:<VARIABLE>\"");
}

Result<StoreServices> OpenServices(const Options& o) {
  StoreServices services;
  if (!o.security.audit_log_path.empty()) {
    Result<std::unique_ptr<audit::AuditLog>> log =
        audit::AuditLog::Open(o.env, o.security.audit_log_path, {});
    if (!log.ok()) return log.status();
    services.audit = std::move(log).value();
  }
  if (!o.security.master_key.empty()) {
    Result<encryption::MasterKey> master = LoadMasterKey(o.security.master_key);
    if (!master.ok()) return master.status();
    encryption::KeyManagerOptions key_options;
    key_options.audit = services.audit.get();
    if (!o.shared.location.empty() && o.shared_data.encrypt) {
      // Nodes that share G4 share its data keys: they live there (docs/security.md).
      Result<std::unique_ptr<encryption::ClusterKeyManager>> keys =
          encryption::ClusterKeyManager::Create(o.env, *master, key_options);
      if (!keys.ok()) return keys.status();
      services.cluster_keys = keys->get();
      services.keys = std::move(keys).value();
    } else {
      KVTIER_RETURN_IF_ERROR(o.env->CreateDir(o.security.keystore_dir));
      Result<std::unique_ptr<encryption::KeyManager>> keys =
          encryption::KeyManager::Open(o.env, o.security.keystore_dir, *master, key_options);
      if (!keys.ok()) return keys.status();
      services.keys = std::move(keys).value();
    }
  }
  if (!o.disk.dir.empty()) {
    Result<std::unique_ptr<BlockCodec>> codec = BlockCodec::Create(o.disk_data, services.keys.get());
    if (!codec.ok()) return codec.status();
    services.disk_codec = std::move(codec).value();
  }
  if (!o.shared.location.empty()) {
    Result<std::unique_ptr<BlockCodec>> codec =
        BlockCodec::Create(o.shared_data, services.keys.get());
    if (!codec.ok()) return codec.status();
    services.shared_codec = std::move(codec).value();
  }
  return services;
}

SharedJanitorOptions JanitorOptions(const SharedTierOptions& o) {
  SharedJanitorOptions j;
  j.capacity_bytes = o.capacity_bytes;
  j.tenant_quota_bytes = o.tenant_quota_bytes;
  j.ttl_us = o.ttl_seconds * 1000000;
  j.janitor_interval_us = o.janitor_interval_seconds * 1000000;
  j.lease_us = o.janitor_lease_seconds * 1000000;
  j.notice_retention_us = o.notice_retention_seconds * 1000000;
  j.clock_margin_us = j.lease_us / 6;
  return j;
}

// G4 from SharedTierOptions::location: a shared file system directory or an S3 bucket.
Result<std::unique_ptr<SharedTier>> OpenSharedTier(const Options& o, BlockCodec* codec) {
  const SharedTierOptions& so = o.shared;
  if (so.location.starts_with("s3://")) {
#ifdef KVTIER_WITH_S3
    S3TierOptions s3;
    s3.client.endpoint = so.s3_endpoint;
    s3.client.bucket = so.location.substr(5);
    s3.client.region = so.s3_region;
    s3.client.path_style = so.s3_path_style;
    s3.check_before_put = so.s3_check_before_put;
    s3.client.connect_timeout_ms = so.s3_connect_timeout_ms;
    s3.client.request_timeout_ms = so.s3_request_timeout_ms;
    s3.client.max_retries = so.s3_max_retries;
    s3.multipart_threshold_bytes = so.s3_multipart_threshold_bytes;
    s3.multipart_part_bytes = so.s3_multipart_part_bytes;
    s3.client.credentials.access_key_id = so.s3_access_key;
    s3.client.credentials.secret_access_key = so.s3_secret_key;
    s3.node_id = so.node_id;
    s3.janitor = JanitorOptions(so);
    s3.codec = codec;
    s3.env = o.env;
    Result<std::unique_ptr<S3Tier>> tier = S3Tier::Open(std::move(s3));
    if (!tier.ok()) return tier.status();
    return std::unique_ptr<SharedTier>(std::move(tier).value());
#else
    return Status::InvalidArgument("this build has no S3 support (KVTIER_WITH_S3=OFF)");
#endif
  }
  std::string root = so.location.starts_with("file:") ? so.location.substr(5) : so.location;
  if (!root.starts_with("/")) {
    return Status::InvalidArgument("shared.location must be an absolute path, file:<path> or "
                                   "s3://<bucket>, not '" + so.location + "'");
  }
  SharedFsTierOptions fs;
  fs.root = root;
  fs.node_id = so.node_id;
  fs.sync = so.sync;
  fs.janitor = JanitorOptions(so);
  fs.codec = codec;
  fs.env = o.env;
  Result<std::unique_ptr<SharedFsTier>> tier = SharedFsTier::Open(std::move(fs));
  if (!tier.ok()) return tier.status();
  return std::unique_ptr<SharedTier>(std::move(tier).value());
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const Options& options) {
  Result<Options> sanitized = SanitizeOptions(options);
  if (!sanitized.ok()) return sanitized.status();
  std::vector<MemoryTier::TenantConfig> tenants;
  for (const TenantOptions& t : sanitized->tenants) {
    tenants.push_back({t.name, t.memory_budget_bytes, static_cast<uint32_t>(t.ttl_seconds),
                       static_cast<uint32_t>(t.max_age_seconds)});
  }
  Result<std::unique_ptr<MemoryTier>> memory =
      MemoryTier::Open(sanitized->memory, sanitized->payload_free, std::move(tenants),
                       sanitized->env);
  if (!memory.ok()) return memory.status();
  Result<StoreServices> services = OpenServices(*sanitized);
  if (!services.ok()) return services.status();
  std::unique_ptr<DiskTier> disk;
  if (!sanitized->disk.dir.empty()) {
    std::vector<DiskTenantConfig> disk_tenants;
    for (const TenantOptions& t : sanitized->tenants) {
      disk_tenants.push_back(
          {t.name, t.disk_budget_bytes, t.ttl_seconds * 1000000, t.max_age_seconds * 1000000});
    }
    Result<std::unique_ptr<DiskTier>> opened =
        DiskTier::Open(sanitized->disk, std::move(disk_tenants), sanitized->env,
                       services->disk_codec.get());
    if (!opened.ok()) return opened.status();
    disk = std::move(opened).value();
  }
  std::unique_ptr<SharedTier> shared;
  if (!sanitized->shared.location.empty()) {
    Result<std::unique_ptr<SharedTier>> opened =
        OpenSharedTier(*sanitized, services->shared_codec.get());
    if (!opened.ok()) return opened.status();
    shared = std::move(opened).value();
    if (services->cluster_keys != nullptr) {
      KVTIER_RETURN_IF_ERROR(services->cluster_keys->Attach(shared.get()));
    }
  }
  return std::unique_ptr<Store>(new StoreImpl(*sanitized, std::move(services).value(),
                                              std::move(memory).value(), std::move(disk),
                                              std::move(shared)));
}

}  // namespace kvtier
