// The definitions behind mdl/interrupts.h, in the runtime's glue (src/python_module.cpp
// includes this once): the SIGINT handler chained in front of Python's, and what a loop's
// step does when it finds the flag set.
#pragma once

#include <pthread.h>
#include <pybind11/pybind11.h>
#include <signal.h>

#include <atomic>

#include "mdl/interrupts.h"

namespace mdl {

std::atomic<bool> interrupt_pending{false};

namespace {

namespace py = pybind11;

// The handler that was there (Python's, or another module's that chains to it), and
// Python's main thread, whose signal handlers these are. A child forked by another thread
// has that thread alone, which Python makes its main thread: the child's signal thread
// (its Ctrl-C was noted and never taken: a `while` run on for ever).
struct sigaction chained_handler;
unsigned long signal_thread = 0;

void forked_child() { signal_thread = PyThread_get_thread_ident(); }

void on_sigint(int signal, siginfo_t* info, void* context) {
  interrupt_pending.store(true, std::memory_order_relaxed);
  if (chained_handler.sa_flags & SA_SIGINFO)
    chained_handler.sa_sigaction(signal, info, context);
  else
    chained_handler.sa_handler(signal);
}

}  // namespace

// At import, with the GIL: chain in front of SIGINT's handler where it is a function
// (Python's: not where SIGINT is ignored, or kills the process as it did). A handler Python
// installs later (signal.signal) replaces this one: its loops then run to their end again.
inline void chain_interrupt_handler() {
  signal_thread = py::module_::import("threading")
                      .attr("main_thread")()
                      .attr("ident")
                      .cast<unsigned long>();
  static const bool follows_forks = pthread_atfork(nullptr, nullptr, &forked_child) == 0;
  (void)follows_forks;
  struct sigaction current;
  if (sigaction(SIGINT, nullptr, &current) != 0) return;
  const bool function = (current.sa_flags & SA_SIGINFO) ||
                        (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
  if (!function || current.sa_sigaction == &on_sigint) return;
  chained_handler = current;
  struct sigaction mine = current;
  mine.sa_flags |= SA_SIGINFO;
  mine.sa_sigaction = &on_sigint;
  sigaction(SIGINT, &mine, nullptr);
}

void take_interrupt() {
  if (PyThread_get_thread_ident() != signal_thread) return;
  interrupt_pending.store(false, std::memory_order_relaxed);
  PyGILState_STATE gil = PyGILState_Ensure();
  if (PyErr_CheckSignals() == 0) {
    PyGILState_Release(gil);
    return;
  }
  py::error_already_set raised;  // KeyboardInterrupt, or what a handler of the user's raised
  PyGILState_Release(gil);
  throw raised;
}

}  // namespace mdl
