#include "src/server/s3_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <openssl/rand.h>

#include <nlohmann/json.hpp>

#include "kvtier/env.h"
#include "src/common/byte_codec.h"
#include "src/common/checksum.h"
#include "src/server/s3_checksum.h"

namespace kvtier::server {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'S', '3'};
constexpr uint8_t kVersion = 1;
constexpr std::string_view kBucketsFile = "s3_buckets.json";
constexpr std::string_view kNamesFile = "s3_names.log";
constexpr uint8_t kNameStored = 1;
constexpr uint8_t kNameRemoved = 2;
// The journal is rewritten once it holds this many records more than twice the live names.
constexpr uint64_t kNamesSlack = 4096;

using json = nlohmann::json;

// Writes all of `text` to `fd`; false (errno set) when a write fails.
bool WriteAll(int fd, std::string_view text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Writes `text` to `path` so that a crash leaves the old file or the new one, whole.
Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Unavailable("cannot write " + tmp + ": " + std::strerror(errno));
  if (!WriteAll(fd, text)) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::Unavailable("cannot write " + tmp + ": " + why);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Unavailable("cannot replace " + path + ": " + std::strerror(errno));
  }
  const std::string dir = path.substr(0, path.find_last_of('/') + 1);
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::OK();
}

// One record of the names journal: u32 payload length | u32 CRC32C of the payload | payload:
//   u8 op | u8 tenant length | tenant | u8 bucket length | bucket | u16 key length | key
//   [stored only: u64 value size | S3ObjectHeader]
// Empty when a name does not fit the format (it is then not journaled).
std::string NameRecord(uint8_t op, std::string_view tenant, std::string_view bucket,
                       std::string_view key, const S3ObjectHeader* header) {
  if (tenant.size() > UINT8_MAX || bucket.size() > UINT8_MAX || key.size() > UINT16_MAX) return "";
  const size_t header_bytes = header != nullptr ? 8 + header->encoded_size() : 0;
  const size_t payload = 5 + tenant.size() + bucket.size() + key.size() + header_bytes;
  std::string out(8 + payload, '\0');
  const std::span<std::byte> bytes(reinterpret_cast<std::byte*>(out.data()), out.size());
  ByteWriter w(bytes.subspan(8));
  w.U8(op);
  w.U8(static_cast<uint8_t>(tenant.size()));
  w.Raw(tenant.data(), tenant.size());
  w.U8(static_cast<uint8_t>(bucket.size()));
  w.Raw(bucket.data(), bucket.size());
  w.U16(static_cast<uint16_t>(key.size()));
  w.Raw(key.data(), key.size());
  if (header != nullptr) {
    w.U64(header->encoded_size() + header->size);
    header->EncodeTo(bytes.subspan(8 + w.pos()));
  }
  ByteWriter head(bytes.first(8));
  head.U32(static_cast<uint32_t>(payload));
  head.U32(Crc32c(0, bytes.subspan(8)));
  return out;
}

std::string ReadString(ByteReader* r, size_t length) {
  std::string s(length, '\0');
  r->Raw(s.data(), s.size());
  return s;
}

}  // namespace

void S3ObjectHeader::EncodeTo(std::span<std::byte> out) const {
  ByteWriter w(out);
  w.Raw(kMagic, sizeof(kMagic));
  w.U8(kVersion);
  w.U8(static_cast<uint8_t>(content_type.size()));
  w.U16(static_cast<uint16_t>(encoded_size()));
  w.U64(size);
  w.U64(modified_us);
  w.Raw(digest.data(), digest.size());
  w.U32(parts);
  w.Raw(content_type.data(), content_type.size());
}

std::optional<S3ObjectHeader> S3ObjectHeader::Decode(std::span<const std::byte> prefix,
                                                     size_t value_size, size_t* header_bytes) {
  ByteReader r(prefix);
  char magic[sizeof(kMagic)];
  r.Raw(magic, sizeof(magic));
  const uint8_t version = r.U8();
  const uint8_t type_bytes = r.U8();
  const size_t length = r.U16();
  S3ObjectHeader h;
  h.size = r.U64();
  h.modified_us = r.U64();
  r.Raw(h.digest.data(), h.digest.size());
  h.parts = r.U32();
  h.content_type.resize(type_bytes);
  r.Raw(h.content_type.data(), type_bytes);
  if (!r.ok() || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0 || version != kVersion ||
      length != kFixedBytes + type_bytes || length > value_size || h.size != value_size - length) {
    return std::nullopt;
  }
  *header_bytes = length;
  return h;
}

std::optional<S3ObjectHeader> S3ObjectHeader::Of(const BlockHandle& handle, size_t* header_bytes) {
  std::array<std::byte, kFixedBytes + UINT8_MAX> first{};  // The header's largest size.
  size_t got = 0;
  for (std::span<const std::byte> extent : handle.extents()) {
    const size_t take = std::min(extent.size(), first.size() - got);
    std::memcpy(first.data() + got, extent.data(), take);
    got += take;
    if (got == first.size()) break;
  }
  return Decode(std::span(first.data(), got), handle.size(), header_bytes);
}

std::string S3ObjectHeader::ETag() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  if (parts > 0) out += "-" + std::to_string(parts);
  return out + "\"";
}

std::array<uint8_t, 16> ContentDigest(std::span<const std::byte> data) { return Digest128(data); }

BlockKey S3ObjectKey(std::string_view bucket, std::string_view key) {
  // A bucket name has no '/', so "s3:" + bucket + "/" + key names one object only.
  std::string name = "s3:";
  name.append(bucket).append("/").append(key);
  return NamedBlockKey(name);
}

bool ValidBucketName(std::string_view name) {
  if (name.size() < 3 || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '.' && c != '-') return false;
  }
  return name.find("..") == std::string_view::npos;
}

Result<std::unique_ptr<S3Service>> S3Service::Open(const ServerConfig& config, const Store& store) {
  std::unique_ptr<S3Service> s(new S3Service());
  s->path_ = config.data_dir + "/" + std::string(kBucketsFile);
  s->max_upload_bytes_ = config.s3.max_upload_bytes;
  s->upload_ttl_us_ = uint64_t{config.s3.upload_ttl_seconds} * 1000000;
  s->lock_us_ = uint64_t{config.s3.lock_seconds} * 1000000;
  for (const TenantConfig& t : config.tenants) {
    Result<TenantId> id = store.FindTenant(t.options.name);
    if (!id.ok()) return id.status();
    if (s->tenant_names_.size() <= id->value) s->tenant_names_.resize(id->value + 1);
    s->tenant_names_[id->value] = t.options.name;
    if (!t.s3_access_key.empty()) {
      s->keys_.Add(S3Principal{*id, t.options.name, t.s3_access_key, t.s3_secret_key});
    }
    if (config.s3.allow_anonymous && t.options.name == config.anonymous_tenant) {
      s->anonymous_ = S3Principal{*id, t.options.name, "", ""};
    }
  }
  s->names_path_ = config.data_dir + "/" + std::string(kNamesFile);
  MutexLock lock(&s->mu_);
  if (std::ifstream in(s->path_); in) {
    std::stringstream text;
    text << in.rdbuf();
    json doc = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object() || !doc["buckets"].is_array()) {
      return Status::InvalidArgument(s->path_ + " is corrupt (not the bucket list kvtierd writes)");
    }
    for (const json& b : doc["buckets"]) {
      if (!b.is_object() || !b["tenant"].is_string() || !b["name"].is_string() ||
          !b["created_us"].is_number_unsigned()) {
        return Status::InvalidArgument(s->path_ + " has a malformed bucket entry");
      }
      Result<TenantId> id = store.FindTenant(b["tenant"].get<std::string>());
      if (!id.ok()) {
        // A tenant no longer configured: its buckets stay in the file for when it returns.
        s->orphans_.push_back(b);
        continue;
      }
      s->buckets_[id->value][b["name"].get<std::string>()].created_us = b["created_us"].get<uint64_t>();
    }
  }
  s->ReplayNamesLocked(store);
  s->RewriteNamesLocked();
  return s;
}

void S3Service::ReplayNamesLocked(const Store& store) {
  std::ifstream in(names_path_, std::ios::binary);
  if (!in) return;
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data.data()), data.size());
  size_t pos = 0;
  uint64_t records = 0;
  while (bytes.size() - pos >= 8) {
    ByteReader head(bytes.subspan(pos, 8));
    const uint32_t length = head.U32();
    const uint32_t crc = head.U32();
    if (bytes.size() - pos - 8 < length) break;
    const std::span<const std::byte> payload = bytes.subspan(pos + 8, length);
    if (Crc32c(0, payload) != crc) break;
    ByteReader r(payload);
    const uint8_t op = r.U8();
    const std::string tenant = ReadString(&r, r.U8());
    const std::string bucket = ReadString(&r, r.U8());
    const std::string key = ReadString(&r, r.U16());
    std::optional<S3ObjectHeader> header;
    if (op == kNameStored) {
      const uint64_t value_size = r.U64();
      size_t header_bytes = 0;
      header = S3ObjectHeader::Decode(payload.subspan(std::min(r.pos(), payload.size())),
                                      value_size, &header_bytes);
      if (!header) break;
    } else if (op != kNameRemoved) {
      break;
    }
    if (!r.ok()) break;
    pos += 8 + length;
    ++records;
    Result<TenantId> id = store.FindTenant(tenant);
    if (!id.ok()) continue;  // A tenant no longer configured: its names go.
    auto t = buckets_.find(id->value);
    if (t == buckets_.end()) continue;
    auto b = t->second.find(bucket);
    if (b == t->second.end()) continue;
    if (header) {
      b->second.objects.insert_or_assign(key, *header);
    } else if (auto o = b->second.objects.find(key); o != b->second.objects.end()) {
      b->second.objects.erase(o);
    }
  }
  if (pos < bytes.size()) {
    Env::Default()->Log("kvtierd: " + names_path_ + " ends in a damaged record at byte " +
                        std::to_string(pos) + " (a write cut short?); the " +
                        std::to_string(records) + " records before it are kept");
  }
}

void S3Service::RewriteNamesLocked() {
  if (names_.fd >= 0) ::close(names_.fd);
  names_.fd = -1;
  std::string text;
  uint64_t live = 0;
  for (const auto& [tenant, buckets] : buckets_) {
    for (const auto& [bucket, state] : buckets) {
      for (const auto& [key, header] : state.objects) {
        text += NameRecord(kNameStored, tenant_names_[tenant], bucket, key, &header);
        ++live;
      }
    }
  }
  names_records_ = names_live_ = live;
  Status written = WriteFileAtomically(names_path_, text);
  if (written.ok()) {
    names_.fd = ::open(names_path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (names_.fd < 0) written = Status::Unavailable(names_path_ + ": " + std::strerror(errno));
  }
  if (!written.ok() && !names_warned_) {
    names_warned_ = true;
    Env::Default()->Log("kvtierd: S3 object names are not journaled (listings will not outlive a "
                        "restart): " + written.ToString());
  }
}

void S3Service::JournalLocked(uint8_t op, TenantId tenant, std::string_view bucket,
                              std::string_view key, const S3ObjectHeader* header) {
  if (names_.fd < 0) return;
  if (!WriteAll(names_.fd, NameRecord(op, tenant_names_[tenant.value], bucket, key, header))) {
    // A record cut short would end the journal's replay there: start it afresh instead.
    RewriteNamesLocked();
    return;
  }
  if (++names_records_ > 2 * names_live_ + kNamesSlack) RewriteNamesLocked();
}

Status S3Service::SaveLocked() {
  json list = json::array();
  for (const auto& [tenant, buckets] : buckets_) {
    for (const auto& [name, state] : buckets) {
      list.push_back({{"tenant", tenant_names_[tenant]}, {"name", name}, {"created_us", state.created_us}});
    }
  }
  for (const json& orphan : orphans_) list.push_back(orphan);
  return WriteFileAtomically(path_, json{{"buckets", list}}.dump(1) + "\n");
}

Status S3Service::CreateBucket(TenantId tenant, std::string_view name, uint64_t now_us) {
  MutexLock lock(&mu_);
  TenantBuckets& buckets = buckets_[tenant.value];
  if (buckets.find(name) != buckets.end()) return Status::OK();
  buckets[std::string(name)].created_us = now_us;
  Status saved = SaveLocked();
  if (!saved.ok()) buckets.erase(buckets.find(name));
  return saved;
}

bool S3Service::HasBucket(TenantId tenant, std::string_view name) const {
  MutexLock lock(&mu_);
  auto t = buckets_.find(tenant.value);
  return t != buckets_.end() && t->second.find(name) != t->second.end();
}

std::vector<S3Service::Bucket> S3Service::ListBuckets(TenantId tenant) const {
  MutexLock lock(&mu_);
  std::vector<Bucket> out;
  auto t = buckets_.find(tenant.value);
  if (t == buckets_.end()) return out;
  for (const auto& [name, state] : t->second) out.push_back({name, state.created_us});
  return out;
}

Status S3Service::DeleteBucket(TenantId tenant, std::string_view name) {
  MutexLock lock(&mu_);
  auto t = buckets_.find(tenant.value);
  if (t == buckets_.end()) return Status::NotFound("no such bucket");
  auto b = t->second.find(name);
  if (b == t->second.end()) return Status::NotFound("no such bucket");
  if (!b->second.objects.empty()) return Status::FailedPrecondition("the bucket is not empty");
  BucketState removed = std::move(b->second);
  t->second.erase(b);
  Status saved = SaveLocked();
  if (!saved.ok()) t->second[std::string(name)] = std::move(removed);
  return saved;
}

void S3Service::NameStored(TenantId tenant, std::string_view bucket, std::string_view key,
                           const S3ObjectHeader& header) {
  MutexLock lock(&mu_);
  auto t = buckets_.find(tenant.value);
  if (t == buckets_.end()) return;
  auto b = t->second.find(bucket);
  if (b == t->second.end()) return;
  if (b->second.objects.insert_or_assign(std::string(key), header).second) ++names_live_;
  JournalLocked(kNameStored, tenant, bucket, key, &header);
}

void S3Service::NameRemoved(TenantId tenant, std::string_view bucket, std::string_view key) {
  MutexLock lock(&mu_);
  auto t = buckets_.find(tenant.value);
  if (t == buckets_.end()) return;
  auto b = t->second.find(bucket);
  if (b == t->second.end()) return;
  auto o = b->second.objects.find(key);
  if (o == b->second.objects.end()) return;
  b->second.objects.erase(o);
  --names_live_;
  JournalLocked(kNameRemoved, tenant, bucket, key, nullptr);
}

std::optional<S3ObjectHeader> S3Service::Named(TenantId tenant, std::string_view bucket,
                                               std::string_view key) const {
  MutexLock lock(&mu_);
  auto t = buckets_.find(tenant.value);
  if (t == buckets_.end()) return std::nullopt;
  auto b = t->second.find(bucket);
  if (b == t->second.end()) return std::nullopt;
  auto o = b->second.objects.find(key);
  if (o == b->second.objects.end()) return std::nullopt;
  return o->second;
}

std::vector<std::pair<std::string, S3ObjectHeader>> S3Service::ListNames(
    TenantId tenant, std::string_view bucket, std::string_view prefix,
    std::string_view start_after, size_t max) const {
  MutexLock lock(&mu_);
  std::vector<std::pair<std::string, S3ObjectHeader>> out;
  auto t = buckets_.find(tenant.value);
  if (t == buckets_.end()) return out;
  auto b = t->second.find(bucket);
  if (b == t->second.end()) return out;
  const auto& objects = b->second.objects;
  const std::string_view from = start_after > prefix ? start_after : prefix;
  for (auto it = objects.lower_bound(from); it != objects.end() && out.size() < max; ++it) {
    if (it->first == start_after) continue;
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    out.emplace_back(it->first, it->second);
  }
  return out;
}

std::string S3Service::StartUpload(TenantId tenant, std::string_view bucket, std::string_view key,
                                   std::string content_type, uint64_t now_us) {
  std::array<uint8_t, 16> random{};
  RAND_bytes(random.data(), static_cast<int>(random.size()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (uint8_t b : random) {
    id.push_back(kHex[b >> 4]);
    id.push_back(kHex[b & 15]);
  }
  auto upload = std::make_shared<Upload>();
  upload->tenant = tenant;
  upload->bucket = bucket;
  upload->key = key;
  upload->content_type = std::move(content_type);
  upload->created_us = upload->touched_us = now_us;
  MutexLock lock(&mu_);
  ExpireUploadsLocked(now_us);
  uploads_.emplace(id, std::move(upload));
  return id;
}

S3Service::Upload* S3Service::FindUploadLocked(TenantId tenant, std::string_view id,
                                               std::string_view bucket, std::string_view key) const {
  auto it = uploads_.find(id);
  if (it == uploads_.end()) return nullptr;
  Upload* u = it->second.get();
  return u->tenant == tenant && u->bucket == bucket && u->key == key ? u : nullptr;
}

void S3Service::ExpireUploadsLocked(uint64_t now_us) {
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    Upload& u = *it->second;
    if (!u.completing && now_us - std::min(now_us, u.touched_us) > upload_ttl_us_) {
      for (const auto& [number, part] : u.parts) upload_bytes_ -= part.size;
      it = uploads_.erase(it);
    } else {
      ++it;
    }
  }
}

Status S3Service::AddPart(TenantId tenant, std::string_view upload_id, std::string_view bucket,
                          std::string_view key, uint32_t number, Part part) {
  MutexLock lock(&mu_);
  ExpireUploadsLocked(part.modified_us);
  Upload* u = FindUploadLocked(tenant, upload_id, bucket, key);
  if (u == nullptr) return Status::NotFound("no such upload");
  if (u->completing) return Status::FailedPrecondition("the upload is being completed");
  auto old = u->parts.find(number);
  const uint64_t freed = old == u->parts.end() ? 0 : old->second.size;
  if (upload_bytes_ - freed + part.size > max_upload_bytes_) {
    return Status::ResourceExhausted("unfinished multipart uploads hold s3.max_upload_bytes");
  }
  upload_bytes_ += part.size - freed;
  u->touched_us = part.modified_us;
  u->parts[number] = std::move(part);
  return Status::OK();
}

bool S3Service::TakesParts(TenantId tenant, std::string_view upload_id, std::string_view bucket,
                           std::string_view key) const {
  MutexLock lock(&mu_);
  const Upload* u = FindUploadLocked(tenant, upload_id, bucket, key);
  return u != nullptr && !u->completing;
}

Result<std::shared_ptr<S3Service::Upload>> S3Service::BeginComplete(TenantId tenant,
                                                                   std::string_view upload_id,
                                                                   std::string_view bucket,
                                                                   std::string_view key) {
  MutexLock lock(&mu_);
  Upload* u = FindUploadLocked(tenant, upload_id, bucket, key);
  if (u == nullptr) return Status::NotFound("no such upload");
  if (u->completing) return Status::FailedPrecondition("the upload is being completed");
  u->completing = true;
  return uploads_.find(upload_id)->second;
}

void S3Service::ResumeUpload(const std::shared_ptr<Upload>& upload) {
  MutexLock lock(&mu_);
  upload->completing = false;
}

Status S3Service::EndUpload(TenantId tenant, std::string_view upload_id, std::string_view bucket,
                            std::string_view key) {
  MutexLock lock(&mu_);
  Upload* u = FindUploadLocked(tenant, upload_id, bucket, key);
  if (u == nullptr) return Status::NotFound("no such upload");
  for (const auto& [number, part] : u->parts) upload_bytes_ -= part.size;
  uploads_.erase(uploads_.find(upload_id));
  return Status::OK();
}

Result<std::vector<std::pair<uint32_t, S3Service::Part>>> S3Service::ListParts(
    TenantId tenant, std::string_view upload_id, std::string_view bucket,
    std::string_view key) const {
  MutexLock lock(&mu_);
  const Upload* u = FindUploadLocked(tenant, upload_id, bucket, key);
  if (u == nullptr) return Status::NotFound("no such upload");
  std::vector<std::pair<uint32_t, Part>> out;
  for (const auto& [number, part] : u->parts) {
    Part meta;
    meta.size = part.size;
    meta.digest = part.digest;
    meta.modified_us = part.modified_us;
    out.emplace_back(number, std::move(meta));
  }
  return out;
}

void S3Service::LockCreated(TenantId tenant, const BlockKey& key, uint64_t now_us) {
  MutexLock lock(&mu_);
  locks_.push_back({tenant, key, now_us});
  NoteOldestLockLocked();
}

bool S3Service::LockReleased(TenantId tenant, const BlockKey& key) {
  MutexLock lock(&mu_);
  for (auto it = locks_.begin(); it != locks_.end(); ++it) {
    if (it->tenant == tenant && it->key == key) {
      locks_.erase(it);
      NoteOldestLockLocked();
      return true;
    }
  }
  return false;
}

void S3Service::NoteOldestLockLocked() {
  oldest_lock_us_.store(locks_.empty() ? UINT64_MAX : locks_.front().created_us,
                        std::memory_order_relaxed);
}

std::vector<std::pair<TenantId, BlockKey>> S3Service::ExpiredLocks(uint64_t now_us) {
  const uint64_t oldest = oldest_lock_us_.load(std::memory_order_relaxed);
  if (oldest == UINT64_MAX || now_us - std::min(now_us, oldest) < lock_us_) return {};
  MutexLock lock(&mu_);
  std::vector<std::pair<TenantId, BlockKey>> out;
  size_t n = 0;
  while (n < locks_.size() && now_us - std::min(now_us, locks_[n].created_us) >= lock_us_) {
    out.emplace_back(locks_[n].tenant, locks_[n].key);
    ++n;
  }
  locks_.erase(locks_.begin(), locks_.begin() + static_cast<ptrdiff_t>(n));
  NoteOldestLockLocked();
  return out;
}

}  // namespace kvtier::server
