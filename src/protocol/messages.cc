#include "src/protocol/messages.h"

namespace kvtier::protocol {

Status Malformed(std::string_view what) {
  return Status::InvalidArgument("malformed " + std::string(what) + " body");
}

Status ReadLeadingStatus(BodyReader* r) {
  Status s = r->StatusValue();
  if (!r->ok()) return Status::InvalidArgument("response body too short for its status");
  return s;
}

void EncodeHello(const HelloRequest& m, std::string* out) {
  BodyWriter w(out);
  w.U8(m.max_version);
  w.U64(m.features);
  w.String16(m.tenant);
  w.String16(m.token);
  w.String16(m.client_name);
}

Result<HelloRequest> DecodeHelloRequest(std::span<const std::byte> body) {
  BodyReader r(body);
  HelloRequest m;
  m.max_version = r.U8();
  m.features = r.U64();
  m.tenant = r.String16();
  m.token = r.String16();
  m.client_name = r.String16();
  if (!r.done()) return Malformed("HELLO");
  return m;
}

void EncodeHelloResponse(const HelloResponse& m, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U8(m.version);
  w.U64(m.features);
  w.U32(m.max_frame_bytes);
  w.U64(m.max_block_bytes);
  w.U32(m.max_batch);
  w.String16(m.tenant);
  w.String16(m.server);
}

Result<HelloResponse> DecodeHelloResponse(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  HelloResponse m;
  m.version = r.U8();
  m.features = r.U64();
  m.max_frame_bytes = r.U32();
  m.max_block_bytes = r.U64();
  m.max_batch = r.U32();
  m.tenant = r.String16();
  m.server = r.String16();
  if (!r.done()) return Malformed("HELLO response");
  return m;
}

void EncodeAuth(const AuthRequest& m, std::string* out) {
  BodyWriter w(out);
  w.String16(m.tenant);
  w.String16(m.token);
}

Result<AuthRequest> DecodeAuthRequest(std::span<const std::byte> body) {
  BodyReader r(body);
  AuthRequest m;
  m.tenant = r.String16();
  m.token = r.String16();
  if (!r.done()) return Malformed("AUTH");
  return m;
}

void EncodeKeyList(std::span<const BlockKey> keys, std::string* out) {
  BodyWriter w(out);
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const BlockKey& k : keys) w.Key(k);
}

namespace {

Result<std::vector<BlockKey>> ReadKeyList(BodyReader* r, uint32_t max_batch) {
  uint32_t count = r->U32();
  if (!r->ok()) return Malformed("key list");
  if (count > max_batch) {
    return Status::InvalidArgument("batch of " + std::to_string(count) +
                                   " keys exceeds max_batch " + std::to_string(max_batch));
  }
  if (r->remaining() != static_cast<uint64_t>(count) * kBlockKeySize) {
    return Status::InvalidArgument("key list count " + std::to_string(count) +
                                   " does not match the body length");
  }
  std::vector<BlockKey> keys;
  keys.reserve(count);
  for (uint32_t i = 0; i < count; ++i) keys.push_back(r->Key());
  return keys;
}

}  // namespace

Result<std::vector<BlockKey>> DecodeKeyList(std::span<const std::byte> body, uint32_t max_batch) {
  BodyReader r(body);
  return ReadKeyList(&r, max_batch);
}

void EncodeDelete(const DeleteRequest& m, std::string* out) {
  BodyWriter w(out);
  w.U8(static_cast<uint8_t>(m.scope));
  EncodeKeyList(m.keys, out);
}

Result<DeleteRequest> DecodeDeleteRequest(std::span<const std::byte> body, uint32_t max_batch) {
  BodyReader r(body);
  DeleteRequest m;
  uint8_t scope = r.U8();
  if (!r.ok()) return Malformed("DELETE");
  if (scope == 1 || scope == 2) {
    return Status::InvalidArgument("DELETE scope " + std::to_string(scope) +
                                   " is retired: send DELETE_SESSION or DELETE_TENANT");
  }
  if (scope != static_cast<uint8_t>(DeleteScope::kKeys)) {
    return Status::InvalidArgument("unknown DELETE scope " + std::to_string(scope));
  }
  Result<std::vector<BlockKey>> keys = ReadKeyList(&r, max_batch);
  if (!keys.ok()) return keys.status();
  m.keys = std::move(keys).value();
  return m;
}

void EncodeDeleteSession(SessionId session, std::string* out) { BodyWriter(out).U64(session); }

Result<SessionId> DecodeDeleteSessionRequest(std::span<const std::byte> body) {
  BodyReader r(body);
  SessionId session = r.U64();
  if (!r.done()) return Malformed("DELETE_SESSION");
  if (session == 0) return Status::InvalidArgument("session 0 means \"no session\"; name one");
  return session;
}

namespace {
constexpr uint8_t kHintFinished = 1u << 0;
constexpr uint8_t kHintHasPriority = 1u << 1;
}  // namespace

void EncodeHintSession(const HintSessionRequest& m, std::string* out) {
  BodyWriter w(out);
  w.U64(m.session);
  w.U32(m.hint.retain_seconds);
  w.U8(static_cast<uint8_t>((m.hint.finished ? kHintFinished : 0) |
                            (m.hint.priority ? kHintHasPriority : 0)));
  w.U8(static_cast<uint8_t>(m.hint.priority.value_or(Store::SessionPriority::kNormal)));
}

Result<HintSessionRequest> DecodeHintSessionRequest(std::span<const std::byte> body) {
  BodyReader r(body);
  HintSessionRequest m;
  m.session = r.U64();
  m.hint.retain_seconds = r.U32();
  const uint8_t flags = r.U8();
  const uint8_t priority = r.U8();
  if (!r.done()) return Malformed("HINT_SESSION");
  if (m.session == 0) return Status::InvalidArgument("session 0 means \"no session\"; name one");
  if (flags & ~(kHintFinished | kHintHasPriority)) {
    return Status::InvalidArgument("unknown HINT_SESSION flags " + std::to_string(flags));
  }
  if (priority > static_cast<uint8_t>(Store::SessionPriority::kHigh) ||
      (priority != 0 && (flags & kHintHasPriority) == 0)) {
    return Status::InvalidArgument("unknown HINT_SESSION priority " + std::to_string(priority));
  }
  m.hint.finished = (flags & kHintFinished) != 0;
  if (flags & kHintHasPriority) m.hint.priority = static_cast<Store::SessionPriority>(priority);
  return m;
}

void EncodeDeletionReport(const DeletionReport& report, bool with_shared, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U64(report.memory_blocks);
  w.U64(report.disk_blocks);
  if (with_shared) w.U64(report.shared_blocks);
}

Result<DeletionReport> DecodeDeletionReport(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  DeletionReport report;
  report.memory_blocks = r.U64();
  report.disk_blocks = r.U64();
  if (!r.done()) report.shared_blocks = r.U64();  // A server that granted kFeatureSharedReport.
  if (!r.done()) return Malformed("deletion report");
  return report;
}

void EncodeFlushReply(uint64_t written, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U64(written);
}

Result<uint64_t> DecodeFlushReply(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  const uint64_t written = r.U64();
  if (!r.done()) return Malformed("flush reply");
  return written;
}

void EncodePutDirectory(std::span<const PutEntry> entries, std::string* out) {
  BodyWriter w(out);
  w.U32(static_cast<uint32_t>(entries.size()));
  for (const PutEntry& e : entries) {
    w.Key(e.key);
    uint8_t flags = (e.parent ? kEntryHasParent : 0) | (e.session != 0 ? kEntryHasSession : 0) |
                    (e.dtype ? kEntryHasDtype : 0) | (e.engine_hash ? kEntryHasEngineHash : 0) |
                    (e.role != BlockRole::kKv ? kEntryHasRole : 0);
    w.U8(flags);
    if (e.parent) w.Key(*e.parent);
    if (e.session != 0) w.U64(e.session);
    if (e.dtype) w.U8(static_cast<uint8_t>(*e.dtype));
    if (e.engine_hash) {
      w.U8(static_cast<uint8_t>(e.engine_hash->size | (e.engine_hash->integer ? 0x80 : 0)));
      for (uint8_t b : e.engine_hash->view()) w.U8(b);
    }
    if (e.role != BlockRole::kKv) w.U8(static_cast<uint8_t>(e.role));
    w.U64(e.size);
  }
}

Result<std::vector<PutEntry>> ReadPutDirectory(BodyReader* r, std::string_view op,
                                               uint8_t known_flags, uint32_t max_batch,
                                               uint64_t max_block_bytes) {
  const std::string name(op);
  uint32_t count = r->U32();
  if (!r->ok()) return Malformed(name);
  if (count > max_batch) {
    return Status::InvalidArgument(name + " batch of " + std::to_string(count) +
                                   " blocks exceeds max_batch " + std::to_string(max_batch));
  }
  // Each entry takes at least 41 bytes (key, flags, size), so a lying count fails here before
  // any allocation.
  if (r->remaining() / (kBlockKeySize + 9) < count) return Malformed(name);
  std::vector<PutEntry> entries(count);
  for (PutEntry& e : entries) {
    e.key = r->Key();
    const uint8_t flags = r->U8();
    if (flags & ~known_flags) return Status::InvalidArgument("unknown " + name + " entry flags");
    if (flags & kEntryHasParent) e.parent = r->Key();
    if (flags & kEntryHasSession) e.session = r->U64();
    if (flags & kEntryHasDtype) {
      const uint8_t dtype = r->U8();
      if (r->ok() && KvDtypeBytes(static_cast<KvDtype>(dtype)) == 0) {
        return Status::InvalidArgument("unknown dtype " + std::to_string(dtype) + " in a " +
                                       name + " entry");
      }
      e.dtype = static_cast<KvDtype>(dtype);
    }
    if (flags & kEntryHasEngineHash) {
      const uint8_t n = r->U8();
      EngineHash h;
      h.integer = (n & 0x80) != 0;
      h.size = n & 0x7f;
      if (r->ok() && (h.size == 0 || h.size > kBlockKeySize || (h.integer && h.size > 8))) {
        return Status::InvalidArgument(name + " engine hash of " + std::to_string(h.size) +
                                       (h.integer ? " bytes (an integer takes 1 to 8)" : " bytes (1 to 32)"));
      }
      for (uint8_t j = 0; j < h.size && r->ok(); ++j) h.bytes[j] = r->U8();
      e.engine_hash = h;
    }
    if (flags & kEntryHasRole) {
      const uint8_t role = r->U8();
      if (r->ok() && role != static_cast<uint8_t>(BlockRole::kKvNeedsState) &&
          role != static_cast<uint8_t>(BlockRole::kState)) {
        return Status::InvalidArgument("unknown block role " + std::to_string(role) + " in a " +
                                       name + " entry");
      }
      e.role = static_cast<BlockRole>(role);
    }
    e.size = r->U64();
    if (!r->ok()) return Malformed(name);
    if (e.size == 0) return Status::InvalidArgument(name + " entry with an empty value");
    if (e.size > max_block_bytes) {
      return Status::InvalidArgument("value of " + std::to_string(e.size) +
                                     " bytes exceeds max_block_bytes " +
                                     std::to_string(max_block_bytes));
    }
  }
  return entries;
}

Result<PutManyHead> DecodePutManyHead(std::span<const std::byte> head, size_t body_length,
                                      uint32_t max_batch, uint64_t max_block_bytes) {
  BodyReader r(head);
  constexpr uint8_t kKnown = kEntryHasParent | kEntryHasSession | kEntryHasDtype |
                             kEntryHasEngineHash | kEntryHasRole;
  Result<std::vector<PutEntry>> entries =
      ReadPutDirectory(&r, "PUT_MANY", kKnown, max_batch, max_block_bytes);
  if (!entries.ok()) return entries.status();
  PutManyHead out{std::move(entries).value(), head.size() - r.remaining()};
  uint64_t total = 0;
  for (const PutEntry& e : out.entries) total += e.size;
  const size_t values = body_length - out.directory_bytes;
  if (total != values) {
    return Status::InvalidArgument("PUT_MANY value sizes (" + std::to_string(total) +
                                   " bytes) do not match the " + std::to_string(values) +
                                   " bytes that follow the directory");
  }
  return out;
}

Result<std::vector<BlockWrite>> DecodePutMany(std::span<const std::byte> body, uint32_t max_batch,
                                              uint64_t max_block_bytes) {
  Result<PutManyHead> head = DecodePutManyHead(body, body.size(), max_batch, max_block_bytes);
  if (!head.ok()) return head.status();
  BodyReader r(body.subspan(head->directory_bytes));
  std::vector<BlockWrite> writes;
  writes.reserve(head->entries.size());
  for (const PutEntry& e : head->entries) {
    writes.push_back({e.key, r.Bytes(e.size), e.parent, e.session, e.dtype, e.engine_hash, e.role});
  }
  return writes;
}

void EncodeStatusOnly(const Status& status, std::string* out) {
  BodyWriter(out).StatusValue(status);
}

void EncodeItemStatuses(std::span<const Status> statuses, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(statuses.size()));
  for (const Status& s : statuses) w.StatusValue(s);
}

Result<std::vector<Status>> DecodeItemStatuses(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  uint32_t count = r.U32();
  // Each status takes at least 3 bytes.
  if (!r.ok() || r.remaining() / 3 < count) return Malformed("status list");
  std::vector<Status> statuses;
  statuses.reserve(count);
  for (uint32_t i = 0; i < count; ++i) statuses.push_back(r.StatusValue());
  if (!r.done()) return Malformed("status list");
  return statuses;
}

void EncodePrefixMatch(const PrefixMatch& match, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(match.num_blocks));
  for (TierLevel t : match.tiers) w.U8(static_cast<uint8_t>(t));
}

Result<PrefixMatch> DecodePrefixMatch(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  uint32_t n = r.U32();
  if (!r.ok() || r.remaining() != n) return Malformed("LOOKUP_PREFIX response");
  PrefixMatch m;
  m.num_blocks = n;
  for (uint32_t i = 0; i < n; ++i) m.tiers.push_back(static_cast<TierLevel>(r.U8()));
  return m;
}

void EncodeResumeRequest(const ResumeRequest& m, std::string* out) {
  BodyWriter w(out);
  w.U32(m.query.keys_per_block);
  w.U8(m.query.all_lengths ? kResumeAllLengths : 0);
  w.U8(static_cast<uint8_t>(m.query.groups.size()));
  for (const StateGroup& g : m.query.groups) {
    w.U32(g.window_blocks);
    w.String16(g.name);
  }
  EncodeKeyList(m.keys, out);
}

Result<ResumeRequest> DecodeResumeRequest(std::span<const std::byte> body, uint32_t max_batch) {
  BodyReader r(body);
  ResumeRequest m;
  m.query.keys_per_block = r.U32();
  const uint8_t flags = r.U8();
  const uint8_t groups = r.U8();
  if (!r.ok()) return Malformed("LOOKUP_RESUME");
  if (flags & ~kResumeAllLengths) return Status::InvalidArgument("unknown LOOKUP_RESUME flags");
  if (groups > kMaxStateGroups) {
    return Status::InvalidArgument("LOOKUP_RESUME names " + std::to_string(groups) +
                                   " state groups; at most " + std::to_string(kMaxStateGroups));
  }
  m.query.all_lengths = (flags & kResumeAllLengths) != 0;
  for (uint8_t i = 0; i < groups; ++i) {
    StateGroup g;
    g.window_blocks = r.U32();
    g.name = r.String16();
    if (!r.ok()) return Malformed("LOOKUP_RESUME");
    m.query.groups.push_back(std::move(g));
  }
  Result<std::vector<BlockKey>> keys = ReadKeyList(&r, max_batch);
  if (!keys.ok()) return keys.status();
  m.keys = std::move(keys).value();
  return m;
}

void EncodeResumeMatch(const ResumeMatch& match, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(match.kv_blocks));
  w.U32(static_cast<uint32_t>(match.resume_blocks));
  w.U32(static_cast<uint32_t>(match.tiers.size()));
  for (TierLevel t : match.tiers) w.U8(static_cast<uint8_t>(t));
  w.U8(static_cast<uint8_t>(match.group_blocks.size()));
  for (uint32_t n : match.group_blocks) w.U32(n);
  w.U32(static_cast<uint32_t>(match.resumable.size()));
  for (uint32_t n : match.resumable) w.U32(n);
}

Result<ResumeMatch> DecodeResumeMatch(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  ResumeMatch m;
  m.kv_blocks = r.U32();
  m.resume_blocks = r.U32();
  const uint32_t tiers = r.U32();
  if (!r.ok() || r.remaining() < tiers) return Malformed("LOOKUP_RESUME response");
  for (uint32_t i = 0; i < tiers; ++i) m.tiers.push_back(static_cast<TierLevel>(r.U8()));
  const uint8_t groups = r.U8();
  for (uint8_t i = 0; i < groups && r.ok(); ++i) m.group_blocks.push_back(r.U32());
  const uint32_t lengths = r.U32();
  if (!r.ok() || r.remaining() / 4 != lengths) return Malformed("LOOKUP_RESUME response");
  for (uint32_t i = 0; i < lengths; ++i) m.resumable.push_back(r.U32());
  if (!r.done()) return Malformed("LOOKUP_RESUME response");
  return m;
}

void EncodeExists(std::span<const uint8_t> tiers, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(tiers.size()));
  for (uint8_t t : tiers) w.U8(t);
}

Result<std::vector<uint8_t>> DecodeExists(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  uint32_t n = r.U32();
  if (!r.ok() || r.remaining() != n) return Malformed("EXISTS response");
  std::vector<uint8_t> tiers(n);
  for (uint32_t i = 0; i < n; ++i) tiers[i] = r.U8();
  return tiers;
}

void EncodeAuthResponse(std::string_view tenant, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.String16(tenant);
}

Result<std::string> DecodeAuthResponse(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  std::string tenant = r.String16();
  if (!r.done()) return Malformed("AUTH response");
  return tenant;
}

void EncodeStats(std::string_view tenant, std::span<const NamedCounter> counters,
                 std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.String16(tenant);
  w.U16(static_cast<uint16_t>(counters.size()));
  for (const NamedCounter& c : counters) {
    w.String16(c.name);
    w.U64(c.value);
  }
}

Result<StatsReply> DecodeStats(std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  StatsReply reply;
  reply.tenant = r.String16();
  uint16_t n = r.U16();
  for (uint16_t i = 0; i < n && r.ok(); ++i) {
    NamedCounter c;
    c.name = r.String16();
    c.value = r.U64();
    reply.counters.push_back(std::move(c));
  }
  if (!r.done()) return Malformed("STATS response");
  return reply;
}

void EncodeGetDirectory(std::span<const Result<BlockHandle>> items, std::string* out) {
  BodyWriter w(out);
  w.StatusValue(Status::OK());
  w.U32(static_cast<uint32_t>(items.size()));
  for (const Result<BlockHandle>& item : items) {
    w.StatusValue(item.status());
    if (item.ok()) w.U64(item->size());
  }
}

Result<std::vector<Result<std::span<const std::byte>>>> DecodeGetMany(
    std::span<const std::byte> body) {
  BodyReader r(body);
  KVTIER_RETURN_IF_ERROR(ReadLeadingStatus(&r));
  uint32_t count = r.U32();
  if (!r.ok() || r.remaining() / 3 < count) return Malformed("GET_MANY response");
  std::vector<Status> statuses(count);
  std::vector<uint64_t> sizes(count, 0);
  uint64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    statuses[i] = r.StatusValue();
    if (statuses[i].ok()) sizes[i] = r.U64();
    if (!r.ok() || sizes[i] > r.remaining()) return Malformed("GET_MANY response");
    total += sizes[i];
  }
  if (total != r.remaining()) return Malformed("GET_MANY response");
  std::vector<Result<std::span<const std::byte>>> items;
  items.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (statuses[i].ok()) {
      items.emplace_back(r.Bytes(sizes[i]));
    } else {
      items.emplace_back(std::move(statuses[i]));
    }
  }
  return items;
}

Status DecodeResponseStatus(std::span<const std::byte> body) {
  BodyReader r(body);
  Status s = r.StatusValue();
  if (!r.ok()) return Status(StatusCode::kUnknown, "response body too short for its status");
  return s;
}

}  // namespace kvtier::protocol
