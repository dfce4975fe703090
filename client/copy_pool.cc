#include "client/copy_pool.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace peregrine::client {
namespace {

// The bytes of all pieces are split into equal ranges, one per thread; each thread walks
// the pieces its range overlaps. Equal byte ranges (not whole pieces) keep the threads
// balanced when one tensor dominates the state.
void CopyRange(const std::vector<CopyPiece>& pieces, uint64_t begin, uint64_t end) {
  uint64_t at = 0;
  for (const CopyPiece& p : pieces) {
    const uint64_t lo = std::max(begin, at);
    const uint64_t hi = std::min(end, at + p.length);
    if (lo < hi) {
      std::memcpy(static_cast<char*>(p.dst) + (lo - at), static_cast<const char*>(p.src) + (lo - at), hi - lo);
    }
    at += p.length;
    if (at >= end) break;
  }
}

// Workers wait for a generation number to move, copy their range of the current job and
// count themselves done. The pool lives for the process (never destroyed: a worker may
// still be waiting when static destructors run).
class CopyPool {
 public:
  explicit CopyPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { Work(i); });
    for (auto& t : threads_) t.detach();
  }

  int workers() const { return static_cast<int>(threads_.size()); }

  void Run(const std::vector<CopyPiece>& pieces, uint64_t total) {
    const int n = workers() + 1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pieces_ = &pieces;
      total_ = total;
      parts_ = n;
      pending_ = workers();
      ++generation_;
    }
    start_.notify_all();
    CopyRange(pieces, 0, total / n);  // the caller takes part 0
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    pieces_ = nullptr;
  }

 private:
  void Work(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::vector<CopyPiece>* pieces;
      uint64_t begin, end;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        pieces = pieces_;
        const uint64_t part = static_cast<uint64_t>(index) + 1;
        begin = total_ / parts_ * part;
        end = part + 1 == static_cast<uint64_t>(parts_) ? total_ : total_ / parts_ * (part + 1);
      }
      CopyRange(*pieces, begin, end);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
      }
      done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::vector<CopyPiece>* pieces_ = nullptr;  // guarded by mu_
  uint64_t total_ = 0;                              // guarded by mu_
  int parts_ = 1;                                   // guarded by mu_
  int pending_ = 0;                                 // guarded by mu_
  uint64_t generation_ = 0;                         // guarded by mu_
  std::vector<std::thread> threads_;
};

std::mutex pool_mu;
CopyPool* pool = nullptr;  // guarded by pool_mu; leaked on purpose (see CopyPool)
pid_t pool_pid = 0;        // the process that created `pool`

}  // namespace

void ParallelCopy(const std::vector<CopyPiece>& pieces) {
  uint64_t total = 0;
  for (const CopyPiece& p : pieces) total += p.length;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::min(kMaxCopyThreads, cores);
  if (total < kParallelCopyMinBytes || threads < 2) {
    CopyRange(pieces, 0, total);
    return;
  }
  std::lock_guard<std::mutex> lock(pool_mu);
  if (pool == nullptr || pool_pid != getpid()) {
    // First use, or a forked child: the parent's workers do not exist here.
    pool = new CopyPool(threads - 1);
    pool_pid = getpid();
  }
  pool->Run(pieces, total);
}

}  // namespace peregrine::client
