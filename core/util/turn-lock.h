// A mutex that serves its waiters in arrival order (a ticket lock): two threads that share one
// compute backend take turns on it, and neither can starve the other by re-locking at once —
// `answer`'s retrieval worker embeds a question between two decode steps of the answering loop.
// Meets Lockable (std::lock_guard / std::unique_lock).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ragkv {

class TurnLock {
 public:
  void lock() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t ticket = next_++;
    cv_.wait(l, [&] { return serving_ == ticket; });
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++serving_;
    }
    cv_.notify_all();
  }
 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0, serving_ = 0;
};

}  // namespace ragkv
