// WorkerPool: a fixed set of threads that runs the per-item work of one batch call in
// parallel: stat/read/write of many objects on a shared file system, where each call blocks on
// a network round trip; compressing, encrypting and verifying the blocks of a disk batch.
//
// Thread safety: thread-safe. Several callers may run batches at once; their items share the
// threads. The calling thread works on its own batch too, so a batch always makes progress.

#ifndef KVTIER_SRC_COMMON_WORKER_POOL_H_
#define KVTIER_SRC_COMMON_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "src/common/mutex.h"

namespace kvtier {

class WorkerPool {
 public:
  // `threads` background threads (0 = the caller does all the work).
  explicit WorkerPool(size_t threads);
  ~WorkerPool();  // Waits for the threads; REQUIRES: no ParallelFor running.
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Threads that run items at once, the caller's included.
  size_t parallelism() const { return threads_.size() + 1; }

  // Calls fn(i) for every i in [0, n), in parallel, and returns when all calls have returned.
  // `fn` must not throw.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Batch;
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one item of the front batch; false when there is none.
  bool RunOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  CondVar work_cv_;
  CondVar done_cv_;
  std::deque<Batch*> batches_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_COMMON_WORKER_POOL_H_
