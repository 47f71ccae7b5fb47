// SingleFlight: concurrent requests for the same key share one computation. While one caller
// (the leader) computes a key's value, the others that ask for the key (followers) wait for it
// and each receive a copy of the leader's result, instead of computing it again. A request
// that arrives after the leader is done starts a new computation: nothing is cached. (Go's
// golang.org/x/sync/singleflight does the same for Go programs.)
//
// kvtier uses it for G4 reads: a block that many engines want at once, as a fleet fans out
// into sub-agents that share a context, is read from the shared tier once per node, not once
// per request.
//
// Thread safety: all methods may be called concurrently. `fn` runs on the leader's thread
// without the table's lock held, so it may block and may itself call Do with other keys; it
// must not call Do with a key it leads.

#ifndef KVTIER_COMMON_SINGLE_FLIGHT_H_
#define KVTIER_COMMON_SINGLE_FLIGHT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/common/mutex.h"

namespace kvtier {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlight {
 public:
  // fn() for the leader; a copy of the leader's fn() for a follower, with *followed set to
  // whether the caller was one (when `followed` is not null). REQUIRES: Value is copyable.
  template <typename Fn>
  Value Do(const Key& key, Fn&& fn, bool* followed = nullptr) {
    size_t joined = 0;
    std::vector<Value> values = DoMany(
        std::span(&key, 1), [&](std::span<const size_t>) { return std::vector<Value>{fn()}; },
        &joined);
    if (followed != nullptr) *followed = joined > 0;
    return std::move(values[0]);
  }

  // Do for several keys in one call: fn(led) computes, in one batch, the values of the keys
  // that no other caller has in flight (`led` holds their indices into `keys`, in order) and
  // returns one value per led key, in the same order; the other keys get copies of the values
  // in flight. *followed (when not null) is set to how many keys were followed.
  // REQUIRES: Value is copyable and default-constructible.
  template <typename Fn>
  std::vector<Value> DoMany(std::span<const Key> keys, Fn&& fn, size_t* followed = nullptr) {
    std::vector<Value> out(keys.size());
    std::vector<size_t> led;
    std::vector<std::shared_ptr<Flight>> leading;
    std::vector<std::pair<size_t, std::shared_ptr<Flight>>> joined;
    {
      MutexLock lock(&mu_);
      for (size_t i = 0; i < keys.size(); ++i) {
        auto [it, inserted] = flights_.try_emplace(keys[i]);
        if (inserted) {
          it->second = std::make_shared<Flight>();
          led.push_back(i);
          leading.push_back(it->second);
        } else {
          ++it->second->followers;
          joined.emplace_back(i, it->second);
        }
      }
      if (!joined.empty()) changed_.SignalAll();
    }
    if (followed != nullptr) *followed = joined.size();
    // Lead first, then follow: a caller never waits while holding flights others wait for.
    if (!led.empty()) {
      std::vector<Value> values = std::forward<Fn>(fn)(std::span<const size_t>(led));
      MutexLock lock(&mu_);
      for (size_t j = 0; j < led.size(); ++j) {
        flights_.erase(keys[led[j]]);
        if (leading[j]->followers > 0) {  // Nobody can join once it is out of the table.
          leading[j]->value.emplace(values[j]);
          leading[j]->done.SignalAll();
        }
        out[led[j]] = std::move(values[j]);
      }
    }
    if (!joined.empty()) {
      MutexLock lock(&mu_);
      for (auto& [i, flight] : joined) {
        while (!flight->value) flight->done.Wait(&mu_);
        out[i] = *flight->value;
      }
    }
    return out;
  }

  // Waits until `n` callers are waiting for the computation of `key` in flight. For tests
  // that must know a burst has gathered before its leader may finish. REQUIRES: the leader
  // does not finish before then (it would wait forever).
  void AwaitFollowers(const Key& key, size_t n) {
    MutexLock lock(&mu_);
    for (;;) {
      auto it = flights_.find(key);
      if (it != flights_.end() && it->second->followers >= n) return;
      changed_.Wait(&mu_);
    }
  }

 private:
  // Its fields are guarded by mu_; `value` is never changed once set.
  struct Flight {
    CondVar done;
    std::optional<Value> value;
    size_t followers = 0;
  };

  Mutex mu_;
  CondVar changed_;  // A follower joined.
  std::unordered_map<Key, std::shared_ptr<Flight>, Hash> flights_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_SINGLE_FLIGHT_H_
