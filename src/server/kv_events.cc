#include "src/server/kv_events.h"

#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string_view>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>

namespace kvtier::server {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackKey(Packer& pk, const BlockKey& key) {
  pk.pack_bin(kBlockKeySize);
  pk.pack_bin_body(reinterpret_cast<const char*>(key.data()), kBlockKeySize);
}

std::string ZmqError(std::string_view what) {
  return std::string(what) + ": " + zmq_strerror(zmq_errno());
}

// Sends `frames` as one multipart message; false when ZMQ refuses (a full queue: dropped).
bool SendMultipart(void* socket, const std::vector<std::string_view>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = (i + 1 < frames.size() ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT;
    if (zmq_send(socket, frames[i].data(), frames[i].size(), flags) < 0) return false;
  }
  return true;
}

std::string BigEndian(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(
    const EventsConfig& config, std::vector<std::string> tenant_names) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(config, std::move(tenant_names)));
  p->context_ = zmq_ctx_new();
  if (p->context_ == nullptr) return Status::Internal(ZmqError("zmq_ctx_new"));
  auto bind = [&](int type, const std::string& endpoint, int hwm, std::string* bound) -> Result<void*> {
    void* s = zmq_socket(p->context_, type);
    if (s == nullptr) return Status::Internal(ZmqError("zmq_socket"));
    const int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    if (zmq_bind(s, endpoint.c_str()) != 0) {
      const int err = zmq_errno();
      Status st = err == EINVAL || err == EPROTONOSUPPORT || err == ENOCOMPATPROTO
                      ? Status::InvalidArgument(ZmqError("events endpoint '" + endpoint + "'"))
                      : Status::Unavailable(ZmqError("cannot bind events endpoint '" + endpoint + "'"));
      zmq_close(s);
      return st;
    }
    char last[256] = {};
    size_t size = sizeof(last);
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &size);
    *bound = last;
    return s;
  };
  Result<void*> pub = bind(ZMQ_PUB, config.endpoint, 100000, &p->endpoint_);
  if (!pub.ok()) return pub.status();
  p->pub_ = *pub;
  if (!config.replay_endpoint.empty()) {
    // A whole replay and its end marker fit in the queue of one slow subscriber.
    const int hwm = static_cast<int>(std::min<uint64_t>(2ull * (config.buffer_steps + 1), INT32_MAX));
    Result<void*> replay = bind(ZMQ_ROUTER, config.replay_endpoint, hwm, &p->replay_endpoint_);
    if (!replay.ok()) return replay.status();
    p->replay_ = *replay;
    // A full queue is EAGAIN instead of a silent drop, so a snapshot's rest waits for room.
    const int mandatory = 1;
    zmq_setsockopt(p->replay_, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof(mandatory));
    p->kept_.resize(config.buffer_steps);
  }
  p->thread_ = std::thread([q = p.get()] { q->Run(); });
  return p;
}

KvEventPublisher::KvEventPublisher(const EventsConfig& config, std::vector<std::string> tenant_names)
    : config_(config), tenant_names_(std::move(tenant_names)) {}

KvEventPublisher::~KvEventPublisher() {
  {
    MutexLock l(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (replay_ != nullptr) zmq_close(replay_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (context_ != nullptr) zmq_ctx_term(context_);
}

void KvEventPublisher::Enqueue(const Event& e) {
  MutexLock l(&mu_);
  if (queue_.size() >= config_.max_queue) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(e);
}

void KvEventPublisher::OnStored(uint32_t tenant, const BlockKey& key, const BlockKey* parent,
                                BlockMedium medium, const EngineHash* engine_hash) {
  Event e{Kind::kStored, medium, parent != nullptr, tenant, key, parent ? *parent : BlockKey{},
          engine_hash ? std::optional(*engine_hash) : std::nullopt};
  Enqueue(e);
}

void KvEventPublisher::OnRemoved(uint32_t tenant, const BlockKey& key, BlockMedium medium) {
  Enqueue(Event{Kind::kRemoved, medium, false, tenant, key, BlockKey{}, std::nullopt});
}

void KvEventPublisher::OnCleared(uint32_t tenant) {
  Enqueue(Event{Kind::kCleared, BlockMedium::kCpu, false, tenant, BlockKey{}, BlockKey{},
                std::nullopt});
}

void KvEventPublisher::SetStore(const Store* store, bool announce) {
  MutexLock s(&store_mu_);
  store_ = store;
  MutexLock l(&mu_);
  announce_ = store != nullptr && announce;
}

void KvEventPublisher::Run() {
  for (;;) {
    // Waits batch_ms (answering replay requests meanwhile), then sends what came. A listing
    // under way takes a step each time round instead of waiting.
    zmq_pollitem_t item{replay_, 0, ZMQ_POLLIN, 0};
    const long wait = listings_.empty() ? static_cast<long>(config_.batch_ms) : 0;
    if (zmq_poll(&item, replay_ != nullptr ? 1 : 0, wait) > 0) ServeReplay();
    std::vector<Event> events;
    bool stop;
    {
      MutexLock l(&mu_);
      stop = stopping_;
      if (std::exchange(announce_, false)) listings_.push_front(Listing{});
      // While an announcement is under way live events wait, and go out after it: each says
      // the last word on its block, whether the listing read the block before or after.
      if (stop || listings_.empty() || listings_.front().requester) events.swap(queue_);
    }
    if (!events.empty()) Publish(std::move(events));
    if (stop) return;
    if (!listings_.empty()) StepListing();
    if (!replay_outbox_.empty()) FlushReplayOutbox();
  }
}

void KvEventPublisher::StepListing() {
  Listing& l = listings_.front();
  Result<std::vector<HeldBlock>> part = std::vector<HeldBlock>{};
  {
    MutexLock s(&store_mu_);
    if (store_ == nullptr) {  // The Store is going away: so is what a listing would say.
      listings_.clear();
      return;
    }
    part = store_->ListHeld(TenantId{l.tenant}, &l.cursor, kListSlots);
  }
  if (part.ok()) l.held.insert(l.held.end(), part->begin(), part->end());
  if (part.ok() && l.cursor != Store::kHeldEnd) return;

  // The tenant's listing is complete: G2 before G3, each chain's blocks after their parents.
  std::stable_sort(l.held.begin(), l.held.end(), [](const HeldBlock& a, const HeldBlock& b) {
    return std::pair(a.medium, a.depth) < std::pair(b.medium, b.depth);
  });
  std::vector<Event> events;
  events.reserve(l.held.size() + 1);
  events.push_back(Event{Kind::kCleared, BlockMedium::kCpu, false, l.tenant, BlockKey{},
                         BlockKey{}, std::nullopt});
  for (const HeldBlock& b : l.held) {
    events.push_back(Event{Kind::kStored, b.medium, b.parent.has_value(), l.tenant, b.key,
                           b.parent.value_or(BlockKey{}), std::nullopt});
  }
  const Namer name = [this](uint32_t tenant, const BlockKey& key) { return NameOf(tenant, key); };
  const std::string topic = Topic(l.tenant);
  const double ts = NowSeconds();
  for (size_t begin = 0; begin < events.size(); begin += kSnapshotBatch) {
    std::vector<const Event*> batch;
    for (size_t i = begin; i < std::min(events.size(), begin + kSnapshotBatch); ++i) {
      batch.push_back(&events[i]);
    }
    std::string payload = EncodeBatch(ts, batch, name);
    if (l.requester) {
      replay_outbox_.push_back({*l.requester, "", topic, BigEndian(l.seq), std::move(payload)});
    } else {
      Send(l.tenant, std::move(payload));
    }
  }
  l.held.clear();
  l.cursor = 0;
  if (++l.tenant < tenant_names_.size()) return;
  if (l.requester) replay_outbox_.push_back({*l.requester, "", "", std::string(8, '\xff'), ""});
  listings_.pop_front();
}

void KvEventPublisher::FlushReplayOutbox() {
  while (!replay_outbox_.empty()) {
    const std::vector<std::string>& m = replay_outbox_.front();
    if (!SendMultipart(replay_, {m.begin(), m.end()})) {
      if (zmq_errno() == EAGAIN) return;  // The requester's queue is full: later.
      // The requester went away: the rest of its snapshot goes nowhere.
      const std::string gone = m[0];
      std::erase_if(replay_outbox_, [&](const auto& x) { return x[0] == gone; });
      continue;
    }
    replay_outbox_.pop_front();
  }
}

std::string KvEventPublisher::Topic(uint32_t tenant) const {
  return config_.topic_prefix + (tenant < tenant_names_.size() ? tenant_names_[tenant] : "");
}

const EngineHash* KvEventPublisher::NameOf(uint32_t tenant, const BlockKey& key) const {
  auto it = named_.find(TenantKey{tenant, key});
  return it == named_.end() ? nullptr : &it->second;
}

void KvEventPublisher::Publish(std::vector<Event> events) {
  events_.fetch_add(events.size(), std::memory_order_relaxed);
  std::map<uint32_t, std::vector<const Event*>> by_tenant;  // Each tenant's, in order.
  for (const Event& e : events) {
    by_tenant[e.tenant].push_back(&e);
    if (e.engine_hash && config_.max_engine_hashes > 0) {
      const TenantKey k{e.tenant, e.key};
      if (named_.insert_or_assign(k, *e.engine_hash).second) named_order_.push_back(k);
      while (named_order_.size() > config_.max_engine_hashes) {
        named_.erase(named_order_.front());
        named_order_.pop_front();
      }
    }
  }
  const Namer name = [this](uint32_t tenant, const BlockKey& key) { return NameOf(tenant, key); };
  const double ts = NowSeconds();
  for (const auto& [tenant, list] : by_tenant) Send(tenant, EncodeBatch(ts, list, name));
}

void KvEventPublisher::Send(uint32_t tenant, std::string payload) {
  Sent sent;
  sent.seq = next_seq_++;
  sent.topic = Topic(tenant);
  sent.payload = std::move(payload);
  const std::string seq = BigEndian(sent.seq);
  // A PUB socket drops what a slow subscriber cannot take; replay serves it again.
  SendMultipart(pub_, {sent.topic, seq, sent.payload});
  messages_.fetch_add(1, std::memory_order_relaxed);
  if (!kept_.empty()) {
    kept_[kept_next_] = std::move(sent);
    kept_next_ = (kept_next_ + 1) % kept_.size();
  }
}

void KvEventPublisher::ServeReplay() {
  for (;;) {
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, replay_, frames.empty() ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&msg);
        return;  // Nothing (more) waiting.
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    // [identity, empty, start] or [identity, empty, "kvtier-snapshot"]: anything else is
    // not a request and is ignored.
    if (frames.size() != 3 || !frames[1].empty()) continue;
    if (frames[2] == kSnapshotRequest) {
      snapshots_.fetch_add(1, std::memory_order_relaxed);
      Listing l;
      l.requester = frames[0];
      l.seq = next_seq_;
      listings_.push_back(std::move(l));
      continue;
    }
    if (frames[2].size() != 8) continue;
    uint64_t start = 0;
    for (char c : frames[2]) start = (start << 8) | static_cast<uint8_t>(c);
    replays_.fetch_add(1, std::memory_order_relaxed);
    const std::string& id = frames[0];
    for (size_t i = 0; i < kept_.size(); ++i) {  // Oldest first.
      const Sent& s = kept_[(kept_next_ + i) % kept_.size()];
      if (s.payload.empty() || s.seq < start) continue;
      const std::string seq = BigEndian(s.seq);
      SendMultipart(replay_, {id, "", s.topic, seq, s.payload});
    }
    SendMultipart(replay_, {id, "", "", std::string(8, '\xff'), ""});
  }
}

std::string KvEventPublisher::EncodeBatch(double ts, const std::vector<const Event*>& events,
                                          const Namer& name) {
  // Runs: consecutive stores of one medium where each block's parent is the previous block
  // become one BlockStored; consecutive removals of one medium one BlockRemoved.
  std::vector<std::pair<size_t, size_t>> runs;  // [begin, end) into `events`.
  for (size_t i = 0; i < events.size(); ++i) {
    if (!runs.empty()) {
      const Event& prev = *events[i - 1];
      const Event& e = *events[i];
      const bool joins =
          e.kind == prev.kind && e.medium == prev.medium && e.kind != Kind::kCleared &&
          (e.kind == Kind::kRemoved || (e.has_parent && e.parent == prev.key));
      if (joins) {
        runs.back().second = i + 1;
        continue;
      }
    }
    runs.emplace_back(i, i + 1);
  }
  msgpack::sbuffer buf;
  Packer pk(&buf);
  const auto block = [&](uint32_t tenant, const BlockKey& key) {
    const EngineHash* h = name(tenant, key);
    if (h == nullptr) {
      PackKey(pk, key);
    } else if (h->integer) {
      uint64_t v = 0;
      for (uint8_t b : h->view()) v = (v << 8) | b;
      pk.pack_uint64(v);
    } else {
      pk.pack_bin(h->size);
      pk.pack_bin_body(reinterpret_cast<const char*>(h->bytes.data()), h->size);
    }
  };
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(runs.size()));
  for (const auto& run : runs) {
    const size_t begin = run.first, end = run.second;  // Plain names: lambdas capture them.
    const Event& first = *events[begin];
    const auto hashes = [&] {
      pk.pack_array(static_cast<uint32_t>(end - begin));
      for (size_t i = begin; i < end; ++i) block(events[i]->tenant, events[i]->key);
    };
    switch (first.kind) {
      case Kind::kStored:
        pk.pack_map(8);
        PackStr(pk, "type");
        PackStr(pk, "BlockStored");
        PackStr(pk, "block_hashes");
        hashes();
        PackStr(pk, "parent_block_hash");
        if (first.has_parent) {
          block(first.tenant, first.parent);
        } else {
          pk.pack_nil();
        }
        PackStr(pk, "token_ids");
        pk.pack_array(0);
        PackStr(pk, "block_size");
        pk.pack_uint32(0);
        PackStr(pk, "lora_id");
        pk.pack_nil();
        PackStr(pk, "medium");
        PackStr(pk, BlockMediumName(first.medium));
        PackStr(pk, "lora_name");
        pk.pack_nil();
        break;
      case Kind::kRemoved:
        pk.pack_map(3);
        PackStr(pk, "type");
        PackStr(pk, "BlockRemoved");
        PackStr(pk, "block_hashes");
        hashes();
        PackStr(pk, "medium");
        PackStr(pk, BlockMediumName(first.medium));
        break;
      case Kind::kCleared:
        pk.pack_map(1);
        PackStr(pk, "type");
        PackStr(pk, "AllBlocksCleared");
        break;
    }
  }
  pk.pack_nil();  // data_parallel_rank
  return std::string(buf.data(), buf.size());
}

}  // namespace kvtier::server
