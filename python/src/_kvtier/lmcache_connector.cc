// LMCacheConnector: the native connector behind kvtier.lmcache.NativeConnector, LMCache's
// `native_plugin` L2 adapter contract (lmcache/v1/distributed/l2_adapters/
// native_connector_l2_adapter.py in lmcache 0.5.x): non-blocking submit_batch_{get,set,exists,
// delete} that return a future id, one eventfd that becomes readable when operations finish,
// and drain_completions() -> [(future_id, ok, error, per-key bools or None)].
//
// Worker threads run the operations on kvtierd without the GIL: over shared memory (one
// ShmClient per worker: a get copies each block from the arena into LMCache's buffer, a set
// copies the buffer into an arena allocation) when the endpoint is kvtierd's Unix socket, else
// over the native protocol (values received straight into the buffers). LMCache's key strings
// map to kvtier keys as RESP keys do (kvtier::NamedBlockKey), so the `resp` and `native_plugin`
// adapters see the same blocks, and the tenant of the token scopes them.

#include <sys/eventfd.h>
#include <unistd.h>

#include <pybind11/stl.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "buffers.h"
#include "errors.h"
#include "kvtier/client.h"
#include "kvtier/shm_client.h"

namespace kvtier::python {
namespace {

enum class Op { kGet, kSet, kExists, kDelete };

struct Job {
  uint64_t id = 0;
  Op op = Op::kGet;
  std::vector<BlockKey> keys;
  std::vector<BorrowedBytes> buffers;  // Released with the GIL, when drained.
};

struct Completion {
  uint64_t id = 0;
  bool ok = true;
  std::string error;
  bool has_results = false;
  std::vector<bool> results;
  std::vector<BorrowedBytes> buffers;
};

// "unix:///path", "unix:/path" or "/path" give a Unix socket path; "" otherwise.
std::string UnixPath(const std::string& url) {
  if (url.starts_with("unix://")) return url.substr(7);
  if (url.starts_with("unix:")) return url.substr(5);
  if (url.starts_with("/")) return url;
  return "";
}

class LMCacheConnector {
 public:
  LMCacheConnector(const std::string& url, const std::string& token, const std::string& tenant,
                   int num_workers, bool shared_memory) {
    if (num_workers < 1) throw StatusError(Status::InvalidArgument("num_workers must be at least 1"));
    std::string unix_path = UnixPath(url);
    ClientOptions o;
    o.endpoint = unix_path.empty() ? url : "unix:" + unix_path;
    o.tenant = tenant;
    o.token = token;
    o.client_name = "kvtier-lmcache";
    o.connections = static_cast<uint32_t>(num_workers);
    WithoutGil([&] {
      client_ = ValueOrThrow(Client::Connect(o));
      if (shared_memory && !unix_path.empty()) {
        for (int i = 0; i < num_workers; ++i) {
          ShmClientOptions so;
          so.socket_path = unix_path;
          so.tenant = tenant;
          so.token = token;
          so.client_name = "kvtier-lmcache-shm";
          shm_.push_back(ValueOrThrow(ShmClient::Connect(so)));
        }
      }
      return 0;
    });
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) throw StatusError(Status::Internal("eventfd failed"));
    for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this, i] { Work(i); });
  }

  ~LMCacheConnector() { close(); }

  int event_fd() const { return event_fd_; }

  uint64_t SubmitGet(py::handle keys, py::handle views) { return Submit(Op::kGet, keys, views); }
  uint64_t SubmitSet(py::handle keys, py::handle views) { return Submit(Op::kSet, keys, views); }
  uint64_t SubmitExists(py::handle keys) { return Submit(Op::kExists, keys, py::none()); }
  uint64_t SubmitDelete(py::handle keys) { return Submit(Op::kDelete, keys, py::none()); }

  py::list Drain() {
    uint64_t count;
    ssize_t r = read(event_fd_, &count, sizeof(count));  // Resets the eventfd.
    (void)r;
    std::vector<Completion> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done.swap(completions_);
    }
    py::list out;
    for (Completion& c : done) {
      py::object results = py::none();
      if (c.has_results) {
        py::list bools(c.results.size());
        for (size_t i = 0; i < c.results.size(); ++i) bools[i] = py::bool_(c.results[i]);
        results = bools;
      }
      out.append(py::make_tuple(c.id, c.ok, c.error, results));
    }
    return out;  // `done` and its buffers go here, with the GIL held.
  }

  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
    }
    cv_.notify_all();
    WithoutGil([&] {
      for (std::thread& t : workers_) t.join();
      shm_.clear();
      client_.reset();
      return 0;
    });
    workers_.clear();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.clear();
      completions_.clear();
    }
    if (event_fd_ >= 0) ::close(event_fd_);
    event_fd_ = -1;
  }

 private:
  uint64_t Submit(Op op, py::handle keys, py::handle views) {
    Job job;
    job.op = op;
    py::sequence names = py::reinterpret_borrow<py::sequence>(keys);
    job.keys.reserve(names.size());
    for (py::handle name : names) {
      Py_ssize_t n = 0;
      const char* s = PyUnicode_AsUTF8AndSize(name.ptr(), &n);
      if (s == nullptr) {
        PyErr_Clear();
        throw StatusError(Status::InvalidArgument("LMCache keys are strings"));
      }
      job.keys.push_back(NamedBlockKey(std::string_view(s, static_cast<size_t>(n))));
    }
    if (!views.is_none()) {
      job.buffers = BorrowAll(views, op == Op::kGet, "buffer");
      if (job.buffers.size() != job.keys.size()) {
        throw StatusError(Status::InvalidArgument("one buffer per key is needed"));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) throw StatusError(Status::FailedPrecondition("the connector is closed"));
    job.id = next_id_++;
    uint64_t id = job.id;
    queue_.push_back(std::move(job));
    cv_.notify_one();
    return id;
  }

  void Work(int worker) {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (closed_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      Completion c = Run(worker, &job);
      c.id = job.id;
      c.buffers = std::move(job.buffers);
      {
        std::lock_guard<std::mutex> lock(mu_);
        completions_.push_back(std::move(c));
      }
      uint64_t one = 1;
      ssize_t w = write(event_fd_, &one, sizeof(one));
      (void)w;
    }
  }

  Completion Run(int worker, Job* job) {
    Completion c;
    const size_t n = job->keys.size();
    auto fail = [&c](const Status& s) {
      c.ok = false;
      c.error = s.ToString();
    };
    switch (job->op) {
      case Op::kGet: {
        c.has_results = true;
        c.results.assign(n, false);
        std::vector<std::span<std::byte>> outs;
        for (const BorrowedBytes& b : job->buffers) outs.push_back(b.span());
        std::vector<Result<size_t>> got =
            shm_.empty() ? client_->GetManyInto(job->keys, outs)
                         : shm_[static_cast<size_t>(worker)]->ReadMany(job->keys, outs);
        for (size_t i = 0; i < n; ++i) {
          c.results[i] = got[i].ok() && *got[i] == outs[i].size();
          if (!got[i].ok() && got[i].status().code() != StatusCode::kNotFound) fail(got[i].status());
        }
        break;
      }
      case Op::kSet: {
        std::vector<BlockWrite> writes(n);
        for (size_t i = 0; i < n; ++i) writes[i] = {job->keys[i], job->buffers[i].span(), std::nullopt, 0, std::nullopt};
        std::vector<Status> put = shm_.empty() ? client_->PutMany(writes)
                                               : shm_[static_cast<size_t>(worker)]->PutMany(writes);
        for (const Status& s : put) {
          if (!s.ok()) fail(s);
        }
        break;
      }
      case Op::kExists: {
        c.has_results = true;
        Result<std::vector<std::optional<TierLevel>>> tiers = client_->Exists(job->keys);
        c.results.assign(n, false);
        if (!tiers.ok()) {
          fail(tiers.status());
          break;
        }
        for (size_t i = 0; i < n; ++i) c.results[i] = (*tiers)[i].has_value();
        break;
      }
      case Op::kDelete: {
        c.has_results = true;
        std::vector<Status> deleted = client_->DeleteMany(job->keys);
        c.results.assign(n, false);
        for (size_t i = 0; i < n; ++i) {
          c.results[i] = deleted[i].ok();
          if (!deleted[i].ok() && deleted[i].code() != StatusCode::kNotFound) fail(deleted[i]);
        }
        break;
      }
    }
    return c;
  }

  std::unique_ptr<Client> client_;
  std::vector<std::unique_ptr<ShmClient>> shm_;  // One per worker; empty over TCP.
  int event_fd_ = -1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  uint64_t next_id_ = 1;
  std::deque<Job> queue_;
  std::vector<Completion> completions_;
};

}  // namespace

void BindLMCache(py::module_& m) {
  py::class_<LMCacheConnector>(m, "LMCacheConnector", R"doc(
LMCache's native_plugin L2 connector over kvtierd (see kvtier.lmcache).

url: kvtierd's Unix socket ("unix:///path/kvtierd.sock": shared memory when shared_memory is
true) or "tcp://host:port" / "tls://host:port" (the native protocol). token (and optionally
tenant) select the tenant; without them a local client acts for the daemon's anonymous tenant.
num_workers: threads (and connections) running operations in parallel.)doc")
      .def(py::init<const std::string&, const std::string&, const std::string&, int, bool>(),
           py::arg("url"), py::arg("token") = "", py::arg("tenant") = "",
           py::arg("num_workers") = 4, py::arg("shared_memory") = true)
      .def("event_fd", &LMCacheConnector::event_fd)
      .def("submit_batch_get", &LMCacheConnector::SubmitGet, py::arg("keys"), py::arg("buffers"))
      .def("submit_batch_set", &LMCacheConnector::SubmitSet, py::arg("keys"), py::arg("buffers"))
      .def("submit_batch_exists", &LMCacheConnector::SubmitExists, py::arg("keys"))
      .def("submit_batch_delete", &LMCacheConnector::SubmitDelete, py::arg("keys"))
      .def("drain_completions", &LMCacheConnector::Drain)
      .def("close", &LMCacheConnector::close);
}

}  // namespace kvtier::python
