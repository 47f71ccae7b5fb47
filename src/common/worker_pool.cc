#include "src/common/worker_pool.h"

namespace kvtier {

struct WorkerPool::Batch {
  const std::function<void(size_t)>* fn = nullptr;
  size_t n = 0;
  size_t next = 0;      // Next index to hand out.
  size_t finished = 0;  // Calls that have returned.
};

WorkerPool::WorkerPool(size_t threads) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

bool WorkerPool::RunOne() {
  if (batches_.empty()) return false;
  Batch* b = batches_.front();
  const size_t i = b->next++;
  if (b->next == b->n) batches_.pop_front();
  mu_.Unlock();
  (*b->fn)(i);
  mu_.Lock();
  if (++b->finished == b->n) done_cv_.SignalAll();
  return true;
}

void WorkerPool::WorkerLoop() {
  MutexLock lock(&mu_);
  while (true) {
    if (RunOne()) continue;
    if (stop_) return;
    work_cv_.Wait(&mu_);
  }
}

void WorkerPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || threads_.empty()) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Batch batch;
  batch.fn = &fn;
  batch.n = n;
  MutexLock lock(&mu_);
  batches_.push_back(&batch);
  work_cv_.SignalAll();
  // Work on any batch while ours is unfinished (ours is handed out in order, so it drains).
  while (batch.finished < batch.n) {
    if (batch.next < batch.n && RunOne()) continue;
    done_cv_.Wait(&mu_);
  }
}

}  // namespace kvtier
