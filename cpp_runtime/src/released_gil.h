// The GIL released around a model's native work (as py::gil_scoped_release releases it),
// the work counted so that the interpreter's exit waits for it.
//
// At exit Python runs its atexit functions, then ends each daemon thread that asks for the
// GIL back (up to Python 3.13 with pthread_exit inside PyEval_RestoreThread: its unwinding
// through a destructor that takes the GIL back aborts the process, "terminate called
// without an active exception"), then exit() destroys the runtime's statics, which a call
// still running on a daemon thread may be using (the result pool, the emulated device). So
// an atexit function (close_calls, registered by every module) waits for the calls that
// are running, and a call another thread starts after it never returns: that thread sleeps
// without the GIL until the process ends, as Python 3.14 leaves daemon threads.
#pragma once

#include <pthread.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace mdl {

namespace py = pybind11;

// The calls running with the GIL released, in this process (one count per module: each
// closes its own). Never destroyed: threads may sleep on it while exit() runs.
struct RunningCalls {
  std::mutex lock;
  std::condition_variable ended;
  int running = 0;
  bool closing = false;        // the interpreter is exiting: no new calls
  std::thread::id closer;      // the thread that exits it, whose calls still run
};

inline RunningCalls*& running_calls_here() {
  static RunningCalls* calls = new RunningCalls();
  return calls;
}

// A child forked while another thread was in a call has neither that thread nor a way to
// count its call out (and its lock may be held): it starts a count of its own.
inline RunningCalls& running_calls() {
  static const bool forks_count_anew = pthread_atfork(nullptr, nullptr, [] {
    running_calls_here() = new RunningCalls();
  }) == 0;
  (void)forks_count_anew;
  return *running_calls_here();
}

class ReleasedGil {
 public:
  ReleasedGil() {
    RunningCalls& calls = running_calls();
    std::unique_lock<std::mutex> hold(calls.lock);
    if (calls.closing && std::this_thread::get_id() != calls.closer) {
      hold.unlock();
      PyEval_SaveThread();  // for good: this thread ends with the process
      hold.lock();
      for (;;) calls.ended.wait(hold);
    }
    ++calls.running;
    hold.unlock();
    state_ = PyEval_SaveThread();
  }

  ~ReleasedGil() {
    PyEval_RestoreThread(state_);
    RunningCalls& calls = running_calls();
    {
      std::lock_guard<std::mutex> hold(calls.lock);
      --calls.running;
    }
    calls.ended.notify_all();
  }

  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* state_;
};

// At interpreter exit (atexit, with the GIL): no new calls on other threads, and a wait
// for the running ones to take the GIL back and return. Ctrl-C ends the wait.
inline void close_calls() {
  RunningCalls& calls = running_calls();
  {
    std::lock_guard<std::mutex> hold(calls.lock);
    calls.closing = true;
    calls.closer = std::this_thread::get_id();
  }
  for (;;) {
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> hold(calls.lock);
      if (calls.ended.wait_for(hold, std::chrono::milliseconds(100),
                               [&] { return calls.running == 0; }))
        return;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

}  // namespace mdl
