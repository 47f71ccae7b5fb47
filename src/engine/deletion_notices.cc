#include "src/engine/deletion_notices.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <utility>

#include "src/common/checksum.h"

namespace kvtier {
namespace {

constexpr int kTimeDigits = 20;

std::string_view ScopeName(DeletionNotice::Scope scope) {
  switch (scope) {
    case DeletionNotice::Scope::kKeys: return "keys";
    case DeletionNotice::Scope::kSession: return "session";
    case DeletionNotice::Scope::kTenant: return "tenant";
  }
  return "";
}

// The publication time a notice name starts with; 0 for a name that does not.
uint64_t NameTime(std::string_view name) {
  if (name.size() <= kTimeDigits || name[kTimeDigits] != '-') return 0;
  uint64_t t = 0;
  for (int i = 0; i < kTimeDigits; ++i) {
    const char c = name[static_cast<size_t>(i)];
    if (c < '0' || c > '9') return 0;
    t = t * 10 + static_cast<uint64_t>(c - '0');
  }
  return t;
}

std::string PaddedTime(uint64_t time_us) {
  char buf[kTimeDigits + 1];
  std::snprintf(buf, sizeof(buf), "%020llu", static_cast<unsigned long long>(time_us));
  return buf;
}

}  // namespace

std::string EncodeNotice(const DeletionNotice& notice) {
  nlohmann::ordered_json j;
  j["v"] = 1;
  j["scope"] = ScopeName(notice.scope);
  j["tenant"] = notice.tenant;
  if (notice.scope == DeletionNotice::Scope::kSession) j["session"] = notice.session;
  if (notice.shred) j["shred"] = true;
  if (notice.scope == DeletionNotice::Scope::kKeys) {
    nlohmann::json keys = nlohmann::json::array();
    for (const BlockKey& k : notice.keys) keys.push_back(k.ToHex());
    j["keys"] = std::move(keys);
  }
  j["node"] = notice.node;
  j["time_us"] = notice.time_us;
  return j.dump();
}

Result<DeletionNotice> DecodeNotice(std::span<const std::byte> body) {
  const nlohmann::json j = nlohmann::json::parse(reinterpret_cast<const char*>(body.data()),
                                                 reinterpret_cast<const char*>(body.data()) +
                                                     body.size(),
                                                 nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& why) {
    return Status::InvalidArgument("deletion notice: " + why);
  };
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("v") || j["v"] != 1) return bad("unknown version");
  DeletionNotice n;
  if (!j.contains("tenant") || !j["tenant"].is_string() || !j.contains("node") ||
      !j["node"].is_string() || !j.contains("time_us") || !j["time_us"].is_number_unsigned() ||
      !j.contains("scope") || !j["scope"].is_string()) {
    return bad("missing fields");
  }
  n.tenant = j["tenant"].get<std::string>();
  n.node = j["node"].get<std::string>();
  n.time_us = j["time_us"].get<uint64_t>();
  const std::string scope = j["scope"].get<std::string>();
  if (scope == "tenant") {
    n.scope = DeletionNotice::Scope::kTenant;
    n.shred = j.contains("shred") && j["shred"] == true;
  } else if (scope == "session") {
    n.scope = DeletionNotice::Scope::kSession;
    if (!j.contains("session") || !j["session"].is_number_unsigned()) return bad("no session");
    n.session = j["session"].get<SessionId>();
    if (n.session == 0) return bad("session 0");
  } else if (scope == "keys") {
    n.scope = DeletionNotice::Scope::kKeys;
    if (!j.contains("keys") || !j["keys"].is_array()) return bad("no keys");
    for (const nlohmann::json& k : j["keys"]) {
      if (!k.is_string()) return bad("a key that is not a string");
      Result<BlockKey> key = BlockKey::FromHex(k.get<std::string>());
      if (!key.ok()) return bad("a key that is not 64 hex digits");
      n.keys.push_back(*key);
    }
  } else {
    return bad("unknown scope '" + scope + "'");
  }
  return n;
}

std::string NoticeName(uint64_t time_us, std::string_view node, uint64_t sequence) {
  char seq[24];
  std::snprintf(seq, sizeof(seq), "%08llu", static_cast<unsigned long long>(sequence));
  return PaddedTime(time_us) + "-" + std::string(node) + "-" + seq;
}

NoticeFollower::NoticeFollower(SharedTier* shared, std::string node, uint64_t margin_us,
                               uint64_t resume_us)
    : shared_(shared), node_(std::move(node)), margin_us_(margin_us), newest_us_(resume_us) {}

Result<std::vector<DeletionNotice>> NoticeFollower::Poll(uint64_t* skipped) {
  // From a margin before the newest notice seen: a notice of a node whose clock is behind
  // may sort before names already read.
  const uint64_t from = newest_us_ > margin_us_ ? newest_us_ - margin_us_ : 0;
  const std::string after = from == 0 ? std::string() : PaddedTime(from);
  Result<std::vector<SharedNotice>> notices = shared_->NoticesAfter(
      after, [&](std::string_view name) { return seen_.count(name) != 0; });
  if (!notices.ok()) return notices.status();
  std::vector<DeletionNotice> out;
  for (SharedNotice& s : *notices) {
    seen_.insert(s.name);
    newest_us_ = std::max(newest_us_, NameTime(s.name));
    Result<DeletionNotice> n = DecodeNotice(s.body);
    if (!n.ok()) {
      ++*skipped;
      continue;
    }
    if (n->node != node_) out.push_back(std::move(n).value());
  }
  // Names older than the margin are never listed again.
  const uint64_t keep_from = newest_us_ > margin_us_ ? newest_us_ - margin_us_ : 0;
  for (auto it = seen_.begin(); it != seen_.end() && NameTime(*it) < keep_from;) {
    it = seen_.erase(it);
  }
  return out;
}

namespace {

constexpr char kStateFile[] = "notice-state";
constexpr char kStateMagic[] = "kvtier-notice-state";

// "kvtier-notice-state 1 <last_read_us> <resume_us>" and the line's Checksum64 in hex.
std::string StateLine(const NoticeReadState& s) {
  return std::string(kStateMagic) + " 1 " + std::to_string(s.last_read_us) + " " +
         std::to_string(s.resume_us);
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Result<NoticeReadState> LoadNoticeReadState(Env* env, const std::string& dir) {
  const std::string path = dir + "/" + kStateFile;
  Result<std::unique_ptr<File>> file = env->OpenFile(path, {});
  if (!file.ok()) return file.status();
  std::string text(256, '\0');
  size_t n = 0;
  KVTIER_RETURN_IF_ERROR((*file)->Read(0, std::as_writable_bytes(std::span(text)), &n));
  text.resize(n);
  const auto damaged = [&] { return Status::DataLoss(path + ": damaged notice state"); };
  const size_t last_space = text.rfind(' ');
  if (text.empty() || text.back() != '\n' || last_space == std::string::npos) return damaged();
  const std::string line = text.substr(0, last_space);
  if (text.substr(last_space + 1, 16) != Hex64(Checksum64(std::as_bytes(std::span(line))))) {
    return damaged();
  }
  NoticeReadState s;
  unsigned long long last = 0, resume = 0;
  int version = 0;
  char magic[32] = {};
  if (std::sscanf(line.c_str(), "%31s %d %llu %llu", magic, &version, &last, &resume) != 4 ||
      std::string(magic) != kStateMagic || version != 1) {
    return damaged();
  }
  s.last_read_us = last;
  s.resume_us = resume;
  return s;
}

Status SaveNoticeReadState(Env* env, const std::string& dir, const NoticeReadState& state) {
  const std::string path = dir + "/" + kStateFile;
  const std::string tmp = path + ".tmp";
  const std::string line = StateLine(state);
  const std::string text = line + " " + Hex64(Checksum64(std::as_bytes(std::span(line)))) + "\n";
  {
    FileOptions create;
    create.create = true;
    create.truncate = true;
    Result<std::unique_ptr<File>> file = env->OpenFile(tmp, create);
    if (!file.ok()) return file.status();
    KVTIER_RETURN_IF_ERROR((*file)->Write(0, std::as_bytes(std::span(text))));
    KVTIER_RETURN_IF_ERROR((*file)->Sync());
  }
  KVTIER_RETURN_IF_ERROR(env->RenameFile(tmp, path));
  return env->SyncDir(dir);
}

}  // namespace kvtier
