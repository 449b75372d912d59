// The lock that models sharing parameters turn under, and who holds it, for the two ways
// a thread could wait on it for ever:
//
// - A signal handler of the user's runs inside a call, between two of its loop's steps
//   (src/interrupts.h: a script's Ctrl-C handler that saves a checkpoint), on the thread
//   that holds the lock: a call of the model from there waited on itself. There the call
//   is paused where its parameters, optimizer state and count of calls are as they were
//   before it (an update comes after every loop), so what only reads them (save(), a copy)
//   goes on without the lock, and anything else is a RuntimeError saying why.
// - A child forked while a thread of the parent was in a call (a trainer thread and a
//   forked pool) has the lock held by a thread it does not have: its calls of the model
//   are a RuntimeError saying so. (A fork in the instant between a thread's taking the
//   lock and its noting so still leaves the child's calls waiting.)
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace mdl {

// Forks this process has made the child of, counted in each child.
inline std::atomic<uint64_t>& fork_generation() {
  static std::atomic<uint64_t> generation{0};
  static const bool counted = pthread_atfork(nullptr, nullptr, [] {
    fork_generation().fetch_add(1, std::memory_order_relaxed);
  }) == 0;
  (void)counted;
  return generation;
}

struct CallLock {
  std::mutex mutex;
  std::atomic<std::thread::id> holder{};  // none while free
  std::atomic<uint64_t> generation{0};    // fork_generation() when the holder took it
};

// What a caller does with the model while it holds the lock: a call that reads only its
// parameters, optimizer state and count of calls, or anything else.
enum class Use { READS, CALL };

// A hold of a CallLock, released when it goes (or at unlock()).
class Holding {
 public:
  explicit Holding(CallLock& lock) : lock_(&lock) {}
  Holding(Holding&& other) noexcept : lock_(other.lock_), held_(other.held_) {
    other.held_ = false;
  }
  Holding(const Holding&) = delete;
  Holding& operator=(const Holding&) = delete;
  ~Holding() { unlock(); }

  // Takes the lock (the caller has released the GIL), or, where it cannot be had, goes on
  // without it (`use` READS inside a paused call on this thread) or throws naming `what`
  // ("save()") and `model`.
  void lock(const char* what, const char* model, Use use) {
    const std::thread::id holder = lock_->holder.load(std::memory_order_acquire);
    if (holder != std::thread::id()) {
      const bool forked = lock_->generation.load() != fork_generation().load();
      if (!forked && holder == std::this_thread::get_id()) {
        if (use == Use::READS) return;
        throw std::runtime_error(
            std::string(what) + ": this thread is inside a call of model " + model +
            " (or of a model sharing its parameters) that a signal handler interrupted "
            "between two steps; there only what reads the model (save(), params, a copy) "
            "may run: raise from the handler to end the call first");
      }
      if (forked)
        throw std::runtime_error(
            std::string(what) + ": model " + model + " (or a model sharing its parameters) "
            "was inside a call on another thread when this process was forked from its "
            "parent, and that call cannot end here "
            "(the thread is the parent's): fork while no thread calls the model, or make "
            "the model in the child");
    }
    lock_->mutex.lock();
    lock_->generation.store(fork_generation().load());
    lock_->holder.store(std::this_thread::get_id(), std::memory_order_release);
    held_ = true;
  }

  void unlock() {
    if (!held_) return;
    held_ = false;
    lock_->holder.store(std::thread::id(), std::memory_order_release);
    lock_->mutex.unlock();
  }

 private:
  CallLock* lock_;
  bool held_ = false;
};

}  // namespace mdl
