// The parts of the _kvtier extension module, each defined in its own file.

#ifndef KVTIER_PYTHON_BINDINGS_H_
#define KVTIER_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "errors.h"
#include "kvtier/block_key.h"
#include "kvtier/store.h"

namespace kvtier::python {

namespace py = pybind11;

void BindKeys(py::module_& m);        // keys.cc: Namespace, block_keys, opaque_key, resp_key
void BindClient(py::module_& m);      // client.cc: _Client
void BindShm(py::module_& m);         // shm.cc: _ShmClient, _ShmLease, _ShmAllocation
void BindLMCache(py::module_& m);     // lmcache_connector.cc: LMCacheConnector

// A client object that may be closed while other threads use it: each call holds its own
// reference, so the connections close when the last call in flight returns.
template <typename T>
class Closable {
 public:
  explicit Closable(std::unique_ptr<T> object) : object_(std::move(object)) {}

  // The object; FailedPrecondition (thrown) once closed.
  std::shared_ptr<T> get() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!object_) throw StatusError(Status::FailedPrecondition("the client is closed"));
    return object_;
  }

  void close() {
    std::shared_ptr<T> last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = std::move(object_);
    }
    py::gil_scoped_release release;
    last.reset();
  }

 private:
  std::mutex mu_;
  std::shared_ptr<T> object_;
};

// get_into's results: the sizes, None for a miss, an exception instance for another error.
py::list SizeList(const std::vector<Result<size_t>>& results);

// Runs f with the GIL released and returns what it returns.
template <typename F>
auto WithoutGil(F f) {
  py::gil_scoped_release release;
  return f();
}

// PutOptions from the binding's arguments: a parent key (or None), a session id, a dtype code
// (0: unknown).
PutOptions PutOptionsFrom(py::handle parent, uint64_t session, uint32_t dtype, size_t index);
class BorrowedBytes;
// One BlockWrite per key; `parents` is None or one parent key (or None) per key;
// `engine_hashes` None or one engine hash (an int below 2**64 or 1 to 32 bytes, or None) per key;
// `roles` None (all KV) or one BlockRole code per key.
std::vector<BlockWrite> WritesFrom(const std::vector<BlockKey>& keys,
                                   const std::vector<BorrowedBytes>& values, py::handle parents,
                                   uint64_t session, uint32_t dtype,
                                   py::handle engine_hashes = py::none(),
                                   py::handle roles = py::none());
// kvtier.Tier value for a TierLevel (2, 3, 4) or None.
py::object TierObject(std::optional<TierLevel> tier);

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_BINDINGS_H_
