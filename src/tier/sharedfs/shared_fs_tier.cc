#include "src/tier/sharedfs/shared_fs_tier.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>

#include "src/tier/shared/object_format.h"
#include "src/tier/sharedfs/fs_util.h"

namespace kvtier {

using sharedfs::FileInfo;

Result<std::unique_ptr<SharedFsTier>> SharedFsTier::Open(SharedFsTierOptions options) {
  if (options.root.empty()) return Status::InvalidArgument("SharedFsTier: root is empty");
  while (options.root.size() > 1 && options.root.back() == '/') options.root.pop_back();
  KVTIER_RETURN_IF_ERROR(options.Sanitize("SharedFsTier"));
  if (options.io_threads > 256) options.io_threads = 256;
  Result<FileInfo> root = sharedfs::Stat(options.root);
  if (!root.ok()) return root.status();
  if (!root->is_dir) return Status::InvalidArgument("SharedFsTier: root is not a directory");
  for (const char* dir : {"objects", "sessions", "tmp", "lease"}) {
    KVTIER_RETURN_IF_ERROR(
        sharedfs::MakeDirs(options.root + "/" + std::string(g4::kPrefix) + "/" + dir));
  }
  std::unique_ptr<SharedFsTier> tier(new SharedFsTier(std::move(options)));
  if (tier->options_.janitor.janitor_interval_us > 0) {
    tier->bg_thread_ = std::thread([t = tier.get()] { t->BackgroundLoop(); });
  }
  return tier;
}

SharedFsTier::SharedFsTier(SharedFsTierOptions options)
    : options_(std::move(options)), env_(options_.env), pool_(options_.io_threads) {}

SharedFsTier::~SharedFsTier() {
  {
    std::lock_guard<std::mutex> lock(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_thread_.joinable()) bg_thread_.join();
}

void SharedFsTier::BackgroundLoop() {
  std::unique_lock<std::mutex> lock(bg_mu_);
  while (!bg_stop_) {
    lock.unlock();
    Result<JanitorReport> report = RunJanitorOnce();
    if (!report.ok()) env_->Log("SharedFsTier janitor: " + report.status().ToString());
    lock.lock();
    bg_cv_.wait_for(lock, std::chrono::microseconds(options_.janitor.janitor_interval_us),
                    [this] { return bg_stop_; });
  }
}

std::optional<uint64_t> SharedFsTier::WriteTime() {
  if (options_.storage_clock) return std::nullopt;
  return env_->NowMicros();
}

Result<uint64_t> SharedFsTier::StorageNow() {
  if (!options_.storage_clock) return env_->NowMicros();
  // The mtime of a file this node just touched is the file system's (the NFS server's) now.
  const std::string probe = Abs(std::string(g4::kPrefix) + "/lease/clock." + options_.node_id);
  Status s = sharedfs::Touch(probe, std::nullopt);
  if (s.code() == StatusCode::kNotFound) {
    s = sharedfs::WriteNewFile(probe, {}, false, std::nullopt);
    if (s.code() == StatusCode::kAlreadyExists) s = Status::OK();
  }
  KVTIER_RETURN_IF_ERROR(s);
  Result<FileInfo> info = sharedfs::Stat(probe);
  if (!info.ok()) return info.status();
  return info->mtime_us;
}

std::string SharedFsTier::NewTempPath() {
  return Abs(std::string(g4::kPrefix) + "/tmp/" + options_.node_id + "." +
             std::to_string(::getpid()) + "." + std::to_string(temp_counter_++) + ".tmp");
}

Result<std::string> SharedFsTier::ObjectPath(std::string_view tenant, const BlockKey& key) const {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  return Abs(g4::ObjectName(*component, key));
}

// --- Put ------------------------------------------------------------------------------------

std::vector<Status> SharedFsTier::PutMany(std::string_view tenant,
                                          std::span<const SharedPut> puts) {
  std::vector<Status> out(puts.size());
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) {
    for (Status& s : out) s = component.status();
    return out;
  }
  pool_.ParallelFor(puts.size(), [&](size_t i) {
    out[i] = PutOne(*component, tenant, puts[i]);
    counters_.CountError(out[i]);
  });
  return out;
}

Status SharedFsTier::PutOne(const std::string& tenant_component, std::string_view tenant,
                            const SharedPut& put) {
  const std::string final_path = Abs(g4::ObjectName(tenant_component, put.key));
  // Content-addressed: an object already there holds these bytes. A stat is far cheaper than
  // writing the block again.
  if (sharedfs::Stat(final_path).ok()) {
    counters_.put_existing++;
    return Status::OK();
  }
  const uint64_t created = put.created_us != 0 ? put.created_us : env_->NowMicros();
  // Header and payload are written apart: a plain payload is the caller's value, not a copy.
  Result<g4::SealedObject> object = g4::SealObjectParts(options_.codec, tenant, put.key,
                                                        put.session, created, put.dtype,
                                                        put.value);
  if (!object.ok()) return object.status();

  const std::string temp = NewTempPath();
  KVTIER_RETURN_IF_ERROR(sharedfs::WriteNewFile(temp, object->header, options_.sync, WriteTime(),
                                                object->payload));
  // The session marker goes first: an object is never visible without its index entry, so
  // DeleteSession finds everything a session published, even after a crash here.
  if (put.session != 0) {
    Status s = WriteSessionMarker(tenant_component, put);
    if (!s.ok() && s.code() != StatusCode::kAlreadyExists) {
      (void)sharedfs::RemoveFile(temp);
      return s;
    }
  }
  bool published = false;
  KVTIER_RETURN_IF_ERROR(PublishTemp(temp, final_path, &published));
  if (!published) {
    counters_.put_existing++;
    return Status::OK();
  }
  // A DeleteSession may have removed the marker since it was written: with another node's
  // object of the same block, or taking it for a put that never finished. Made again if so,
  // so that the session's next deletion finds this object.
  if (put.session != 0) {
    Status s = WriteSessionMarker(tenant_component, put);
    if (!s.ok() && s.code() != StatusCode::kAlreadyExists) return s;
  }
  // No directory fsync: the object's bytes were synced before its name appeared, so a crash
  // can lose a just-published name (a miss later) but never expose a torn object; a second
  // journal commit per put would cost more than the block is worth to a cache.
  counters_.puts++;
  counters_.put_bytes += object->size();
  return Status::OK();
}

Status SharedFsTier::WriteSessionMarker(const std::string& tenant_component,
                                        const SharedPut& put) {
  const std::string marker = Abs(g4::SessionMarkerName(tenant_component, put.session, put.key));
  Status s = sharedfs::WriteNewFile(marker, {}, false, WriteTime());
  if (s.code() == StatusCode::kNotFound) {
    s = sharedfs::MakeDirs(sharedfs::Dirname(marker));
    if (s.ok()) s = sharedfs::WriteNewFile(marker, {}, false, WriteTime());
  }
  return s;
}

Status SharedFsTier::PublishTemp(const std::string& temp, const std::string& final_path,
                                 bool* published) {
  Status s = sharedfs::Publish(temp, final_path, published);
  if (s.code() == StatusCode::kNotFound) {  // The first file of its directory.
    s = sharedfs::MakeDirs(sharedfs::Dirname(final_path));
    if (s.ok()) s = sharedfs::Publish(temp, final_path, published);
  }
  const Status removed = sharedfs::RemoveFile(temp);
  if (!removed.ok()) env_->Log("SharedFsTier: " + removed.ToString());
  return s;
}

// --- Exists / Get ---------------------------------------------------------------------------

Result<SharedObjectInfo> SharedFsTier::ReadInfo(const std::string& path, std::string_view tenant,
                                                const BlockKey& key) {
  FileInfo file;
  Result<std::vector<std::byte>> head = sharedfs::ReadFile(path, g4::kMaxObjectHeaderBytes, &file);
  if (!head.ok()) return head.status();
  size_t header_bytes = 0;
  Result<g4::ObjectHeader> h = g4::DecodeObjectHeader(*head, &header_bytes);
  if (!h.ok()) return h.status();
  if (h->tenant != tenant || h->key != key) {
    return Status::DataLoss("G4 object names another tenant or key: " + path);
  }
  if (file.size != header_bytes + h->stored_bytes) {
    return Status::DataLoss("G4 object is truncated or has trailing bytes: " + path);
  }
  SharedObjectInfo info;
  info.value_bytes = h->value_bytes;
  info.stored_bytes = file.size;
  info.session = h->session;
  info.created_us = h->created_us;
  info.dtype = h->dtype;
  return info;
}

std::vector<std::optional<SharedObjectInfo>> SharedFsTier::ExistsMany(
    std::string_view tenant, std::span<const BlockKey> keys) {
  std::vector<std::optional<SharedObjectInfo>> out(keys.size());
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return out;
  pool_.ParallelFor(keys.size(), [&](size_t i) {
    Result<SharedObjectInfo> info = ReadInfo(Abs(g4::ObjectName(*component, keys[i])), tenant,
                                             keys[i]);
    if (info.ok()) {
      out[i] = *info;
    } else if (info.status().code() != StatusCode::kDataLoss &&
               info.status().code() != StatusCode::kFailedPrecondition) {
      counters_.CountError(info.status());  // A bad object is GetMany's to count and remove.
    }
  });
  return out;
}

void SharedFsTier::RemoveCorrupt(const std::string& path, uint64_t inode) {
  Result<FileInfo> now = sharedfs::Stat(path);
  if (!now.ok() || now->inode != inode) return;
  Status s = sharedfs::RemoveFile(path);
  if (s.ok()) {
    env_->Log("SharedFsTier: removed corrupt object " + path);
  } else {
    env_->Log("SharedFsTier: cannot remove corrupt object: " + s.ToString());
  }
}

Result<std::vector<std::byte>> SharedFsTier::GetOne(const std::string& tenant_component,
                                                    std::string_view tenant,
                                                    const BlockKey& key) {
  const std::string path = Abs(g4::ObjectName(tenant_component, key));
  auto fail = [&](Status s, bool stored_bad, uint64_t inode) -> Status {
    counters_.misses++;
    if (s.code() == StatusCode::kDataLoss) counters_.corrupt++;
    if (stored_bad) RemoveCorrupt(path, inode);
    counters_.CountError(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kFailedPrecondition
                   ? Status::OK()
                   : s);
    return s;
  };
  Result<std::unique_ptr<sharedfs::ReadOnlyFile>> file = sharedfs::ReadOnlyFile::Open(path);
  if (!file.ok()) return fail(file.status(), false, 0);
  const FileInfo& info = (*file)->info();
  // The header, then the payload straight into the buffer that is returned.
  std::array<std::byte, g4::kMaxObjectHeaderBytes> head;
  Result<size_t> n = (*file)->ReadAt(0, std::span(head).first(
                                            std::min<uint64_t>(info.size, head.size())));
  if (!n.ok()) return fail(n.status(), false, 0);
  size_t header_bytes = 0;
  bool stored_bad = false;
  Result<g4::ObjectHeader> header = g4::VerifyHeader(
      tenant, key, std::span(head).first(*n), info.size, &header_bytes, &stored_bad);
  if (!header.ok()) return fail(header.status(), stored_bad, info.inode);
  std::vector<std::byte> payload(header->stored_bytes);
  n = (*file)->ReadAt(header_bytes, payload);
  if (!n.ok()) return fail(n.status(), false, 0);
  payload.resize(*n);  // Shorter only if the file shrank: the checksum then fails.
  Result<std::vector<std::byte>> value =
      g4::OpenPayload(options_.codec, tenant, key, *header, std::move(payload), std::nullopt,
                      &stored_bad);
  if (!value.ok()) return fail(value.status(), stored_bad, info.inode);
  counters_.hits++;
  counters_.get_bytes += value->size();
  const uint64_t now = env_->NowMicros();
  if (now > info.mtime_us && now - info.mtime_us > options_.janitor.touch_interval_us) {
    if (sharedfs::Touch(path, WriteTime()).ok()) counters_.touches++;
  }
  return value;
}

std::vector<Result<std::vector<std::byte>>> SharedFsTier::GetMany(std::string_view tenant,
                                                                 std::span<const BlockKey> keys) {
  std::vector<Result<std::vector<std::byte>>> out;
  Result<std::string> component = g4::TenantComponent(tenant);
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    out.emplace_back(component.ok() ? Status::NotFound("not read") : component.status());
  }
  if (!component.ok()) return out;
  pool_.ParallelFor(keys.size(), [&](size_t i) { out[i] = GetOne(*component, tenant, keys[i]); });
  return out;
}

// --- Deletes --------------------------------------------------------------------------------

Status SharedFsTier::Delete(std::string_view tenant, const BlockKey& key) {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  const std::string path = Abs(g4::ObjectName(*component, key));
  Result<SharedObjectInfo> info = ReadInfo(path, tenant, key);
  Status s = sharedfs::RemoveFile(path);
  counters_.CountError(s);
  KVTIER_RETURN_IF_ERROR(s);
  if (info.ok()) {
    counters_.deletes++;
    if (info->session != 0) {
      (void)sharedfs::RemoveFile(Abs(g4::SessionMarkerName(*component, info->session, key)));
      // Another node's put of the block may have published it while its marker was still
      // there (as in DeleteSession): removed too.
      Result<SharedObjectInfo> again = ReadInfo(path, tenant, key);
      if (again.ok() && again->session == info->session) {
        KVTIER_RETURN_IF_ERROR(sharedfs::RemoveFile(path));
      }
    }
  }
  return Status::OK();
}

void SharedFsTier::RemoveEmptyDir(const std::string& path) {
  // Another node may be adding an entry: ENOTEMPTY is expected and harmless.
  (void)sharedfs::RemoveDir(path);
}

Result<std::vector<BlockKey>> SharedFsTier::DeleteSession(std::string_view tenant,
                                                          SessionId session) {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  if (session == 0) return Status::InvalidArgument("session 0 names no session");
  const std::string dir = Abs(g4::SessionPrefix(*component, session));
  Result<std::vector<std::string>> names = sharedfs::ListDir(dir);
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return std::vector<BlockKey>{};
    counters_.CountError(names.status());
    return names.status();
  }
  Mutex mu;
  std::vector<BlockKey> removed;  // Guarded by mu.
  Status first_error;  // Guarded by mu.
  pool_.ParallelFor(names->size(), [&](size_t i) {
    const std::string marker = dir + (*names)[i];
    Result<BlockKey> key = BlockKey::FromHex((*names)[i]);
    const std::string path = key.ok() ? Abs(g4::ObjectName(*component, *key)) : "";
    Status s;
    if (key.ok()) {
      // The marker's block may have been deleted and put again by another session since.
      Result<SharedObjectInfo> info = ReadInfo(path, tenant, *key);
      if (info.ok() && info->session == session) {
        s = sharedfs::RemoveFile(path);
        if (s.ok()) {
          MutexLock lock(&mu);
          removed.push_back(*key);
        }
      } else if (!info.ok() && info.status().code() == StatusCode::kDataLoss) {
        s = sharedfs::RemoveFile(path);  // Unreadable either way; it cannot be served.
      } else if (!info.ok() && info.status().code() == StatusCode::kNotFound) {
        // No object (yet): a put writes its marker before its object, so this may be a put in
        // flight. Its marker stays, for the next deletion of the session to find the object.
        return;
      }
    }
    if (s.ok()) s = sharedfs::RemoveFile(marker);
    // Another node's put of the same block may have published it between the two removals,
    // finding the marker still there: removed too. (One published later makes the marker
    // again, for the next deletion.)
    if (s.ok() && key.ok()) {
      Result<SharedObjectInfo> again = ReadInfo(path, tenant, *key);
      if (again.ok() && again->session == session) s = sharedfs::RemoveFile(path);
    }
    if (!s.ok()) {
      counters_.CountError(s);
      MutexLock lock(&mu);
      if (first_error.ok()) first_error = s;
    }
  });
  MutexLock lock(&mu);
  counters_.deletes += removed.size();
  KVTIER_RETURN_IF_ERROR(first_error);
  RemoveEmptyDir(dir);
  return removed;
}

Result<std::vector<BlockKey>> SharedFsTier::DeleteTenant(std::string_view tenant) {
  Result<std::string> component = g4::TenantComponent(tenant);
  if (!component.ok()) return component.status();
  Mutex mu;
  std::vector<BlockKey> removed;  // Guarded by mu.
  Status first_error;             // Guarded by mu.
  auto note = [&](const Status& s) {
    if (s.ok() || s.code() == StatusCode::kNotFound) return;
    counters_.CountError(s);
    MutexLock lock(&mu);
    if (first_error.ok()) first_error = s;
  };
  // Objects first (what makes data readable), then the session index.
  const std::string objects = Abs(g4::TenantObjectsPrefix(*component));
  Result<std::vector<std::string>> shards = sharedfs::ListDir(objects);
  if (shards.ok()) {
    pool_.ParallelFor(shards->size(), [&](size_t i) {
      const std::string shard = objects + (*shards)[i];
      Result<std::vector<std::string>> names = sharedfs::ListDir(shard);
      if (!names.ok()) return note(names.status());
      for (const std::string& name : *names) {
        Status s = sharedfs::RemoveFile(shard + "/" + name);
        Result<BlockKey> key = g4::ObjectKey(name);  // Not a key: a temp file.
        if (s.ok() && key.ok()) {
          MutexLock lock(&mu);
          removed.push_back(*key);
        }
        note(s);
      }
      RemoveEmptyDir(shard);
    });
  } else {
    note(shards.status());
  }
  const std::string sessions = Abs(g4::TenantSessionsPrefix(*component));
  Result<std::vector<std::string>> session_dirs = sharedfs::ListDir(sessions);
  if (session_dirs.ok()) {
    pool_.ParallelFor(session_dirs->size(), [&](size_t i) {
      const std::string dir = sessions + (*session_dirs)[i];
      Result<std::vector<std::string>> names = sharedfs::ListDir(dir);
      if (!names.ok()) return note(names.status());
      for (const std::string& name : *names) note(sharedfs::RemoveFile(dir + "/" + name));
      RemoveEmptyDir(dir);
    });
  } else {
    note(session_dirs.status());
  }
  MutexLock lock(&mu);
  counters_.deletes += removed.size();
  KVTIER_RETURN_IF_ERROR(first_error);
  RemoveEmptyDir(sessions);
  RemoveEmptyDir(objects);
  return removed;
}

// --- Deletion notices ------------------------------------------------------------------------

// Bodies are small (a scope and some keys); anything bigger is not a notice of ours.
constexpr size_t kMaxNoticeBytes = 1 << 20;

Status SharedFsTier::PublishNotice(std::string_view name, std::span<const std::byte> body) {
  if (!g4::ValidNoticeName(name)) {
    return Status::InvalidArgument("bad notice name \"" + std::string(name) + "\"");
  }
  const std::string final_path = Abs(g4::NoticesPrefix() + std::string(name));
  const std::string temp = NewTempPath();
  Status s = sharedfs::WriteNewFile(temp, body, options_.sync, WriteTime());
  bool published = false;
  if (s.ok()) s = PublishTemp(temp, final_path, &published);
  if (s.ok() && !published) s = Status::AlreadyExists("notice " + std::string(name) + " exists");
  counters_.CountError(s);
  return s;
}

Result<std::vector<SharedNotice>> SharedFsTier::NoticesAfter(std::string_view after,
                                                             const NoticeFilter& skip) {
  const std::string dir = Abs(g4::NoticesPrefix());
  Result<std::vector<std::string>> names = sharedfs::ListDir(dir);
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return std::vector<SharedNotice>();
    counters_.CountError(names.status());
    return names.status();
  }
  std::vector<std::string> wanted;
  for (std::string& name : *names) {
    if (name > after && g4::ValidNoticeName(name) && !(skip && skip(name))) {
      wanted.push_back(std::move(name));
    }
  }
  std::sort(wanted.begin(), wanted.end());
  std::vector<SharedNotice> out(wanted.size());
  std::vector<Status> errors(wanted.size());
  pool_.ParallelFor(wanted.size(), [&](size_t i) {
    sharedfs::FileInfo info;
    Result<std::vector<std::byte>> body =
        sharedfs::ReadFile(dir + wanted[i], kMaxNoticeBytes, &info);
    if (!body.ok()) {
      errors[i] = body.status();
      return;
    }
    out[i] = {std::move(wanted[i]), info.mtime_us, std::move(body).value()};
  });
  // A notice removed by the janitor meanwhile is simply gone.
  std::vector<SharedNotice> read;
  for (size_t i = 0; i < out.size(); ++i) {
    if (errors[i].ok()) {
      read.push_back(std::move(out[i]));
    } else if (errors[i].code() != StatusCode::kNotFound) {
      counters_.CountError(errors[i]);
      return errors[i];
    }
  }
  return read;
}

// --- Cluster records ---------------------------------------------------------------------

Status SharedFsTier::CreateRecord(std::string_view name, std::span<const std::byte> body) {
  KVTIER_RETURN_IF_ERROR(g4::CheckRecordName(name));
  if (body.size() > kMaxRecordBytes) return Status::InvalidArgument("record too large");
  // As an object: written whole and synced under a temp name, then linked to its name, which
  // fails for every writer but one.
  const std::string temp = NewTempPath();
  Status s = sharedfs::WriteNewFile(temp, body, /*sync=*/true, WriteTime());
  bool published = false;
  if (s.ok()) s = PublishTemp(temp, Abs(g4::RecordsPrefix() + std::string(name)), &published);
  if (s.ok() && !published) return Status::AlreadyExists("record " + std::string(name) + " exists");
  counters_.CountError(s);
  return s;
}

Result<std::vector<std::byte>> SharedFsTier::ReadRecord(std::string_view name) {
  KVTIER_RETURN_IF_ERROR(g4::CheckRecordName(name));
  FileInfo info;
  Result<std::vector<std::byte>> body =
      sharedfs::ReadFile(Abs(g4::RecordsPrefix() + std::string(name)), kMaxRecordBytes, &info);
  counters_.CountError(body.status());
  return body;
}

Result<std::vector<std::string>> SharedFsTier::ListRecords(std::string_view prefix) {
  Result<std::vector<std::string>> names = sharedfs::ListDir(Abs(g4::RecordsPrefix()));
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return std::vector<std::string>();
    counters_.CountError(names.status());
    return names.status();
  }
  std::vector<std::string> out;
  for (std::string& n : *names) {
    if (n.starts_with(prefix) && g4::ValidRecordName(n)) out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status SharedFsTier::DeleteRecord(std::string_view name) {
  KVTIER_RETURN_IF_ERROR(g4::CheckRecordName(name));
  const Status s = sharedfs::RemoveFile(Abs(g4::RecordsPrefix() + std::string(name)));
  counters_.CountError(s);
  return s;
}

SharedTierStats SharedFsTier::Stats() const { return counters_.Snapshot(); }

}  // namespace kvtier
