// The definitions behind mdl/interrupts.h, in the runtime's glue (src/python_module.cpp
// includes this once): the SIGINT handler chained in front of Python's, and what a loop's
// step does when it finds the flag set.
//
// Every mdl module in a process shares one handler and one flag (SharedSigint, found
// through a capsule in sys.modules by the modules imported after the first), so that the
// handler can be chained again, at a call's outermost loop, once a handler installed with
// signal.signal(SIGINT, ...) after the import has replaced it: with one handler a module
// per module, two modules chaining themselves again in front of each other could make a
// cycle. It is chained again only in front of the handler it was first chained in front
// of (Python's: signal.signal installs that same C function for every Python handler), so
// nothing else's chain is changed.
#pragma once

#include <pthread.h>
#include <pybind11/pybind11.h>
#include <signal.h>

#include <atomic>

#include "mdl/interrupts.h"

namespace mdl {

namespace {

namespace py = pybind11;

// The process's one record. Its layout is fixed for the name below: a change to it
// changes the name, so that modules of two versions keep a record each.
struct SharedSigint {
  std::atomic<bool> pending{false};
  std::atomic_flag chaining = ATOMIC_FLAG_INIT;  // held while the handler is (re)installed
  void (*handler)(int, siginfo_t*, void*) = nullptr;  // the first module's on_sigint
  struct sigaction chained {};     // what `handler` calls after noting the signal
  void* in_front_of = nullptr;     // the function first chained in front of (Python's)
  // Python's main thread, whose signal handlers these are. A child forked by another
  // thread has that thread alone, which Python makes its main thread: the child's signal
  // thread (its Ctrl-C was noted and never taken: a `while` run on for ever).
  unsigned long signal_thread = 0;
};

constexpr const char* kSharedModule = "_mdl_sigint_1";
constexpr const char* kSharedCapsule = "_mdl_sigint_1.state";

std::atomic<bool> before_import{false};  // polled until the import attaches the record
SharedSigint* shared = nullptr;

void* function_of(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(action.sa_sigaction)
                                        : reinterpret_cast<void*>(action.sa_handler);
}

void on_sigint(int signal, siginfo_t* info, void* context) {
  SharedSigint* s = shared;
  s->pending.store(true, std::memory_order_relaxed);
  if (s->chained.sa_flags & SA_SIGINFO)
    s->chained.sa_sigaction(signal, info, context);
  else
    s->chained.sa_handler(signal);
}

void forked_child() {
  shared->signal_thread = PyThread_get_thread_ident();
  shared->chaining.clear();  // held by a thread the child does not have
}

// With the GIL: the process's record, made by the first module imported.
void attach_shared() {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (modules.contains(kSharedModule)) {
    py::object state = modules[kSharedModule].attr("state");
    void* found = PyCapsule_GetPointer(state.ptr(), kSharedCapsule);
    if (!found) throw py::error_already_set();
    shared = static_cast<SharedSigint*>(found);
  } else {
    shared = new SharedSigint();  // never freed: handlers run until the process ends
    shared->handler = &on_sigint;
    py::object holder = py::module_::import("types").attr("ModuleType")(
        kSharedModule, "The SIGINT handler and flag that mdl's modules share (Ctrl-C).");
    holder.attr("state") = py::capsule(shared, kSharedCapsule);
    modules[kSharedModule] = holder;
  }
  shared->signal_thread = py::module_::import("threading")
                              .attr("main_thread")()
                              .attr("ident")
                              .cast<unsigned long>();
  interrupt_pending = &shared->pending;
}

}  // namespace

std::atomic<bool>* interrupt_pending = &before_import;

// Chain the shared handler in front of SIGINT's where it is not there and the handler
// there is a function (not where SIGINT is ignored, or kills the process as it did) that
// it may stand in front of: any at the first import, after that only the one it was first
// chained in front of. One sigaction call where nothing changes (94 ns on an Intel Xeon).
void keep_interrupt_handler() {
  SharedSigint* s = shared;
  if (!s) return;
  struct sigaction current;
  if (sigaction(SIGINT, nullptr, &current) != 0) return;
  void* there = function_of(current);
  if (there == reinterpret_cast<void*>(s->handler)) return;
  const bool function = (current.sa_flags & SA_SIGINFO) ||
                        (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
  if (!function || (s->in_front_of && there != s->in_front_of)) return;
  while (s->chaining.test_and_set(std::memory_order_acquire)) {
  }
  if (sigaction(SIGINT, nullptr, &current) == 0 && function_of(current) == there) {
    s->chained = current;  // the same function as before, where it is chained again
    s->in_front_of = there;
    struct sigaction mine = current;
    mine.sa_flags |= SA_SIGINFO;
    mine.sa_sigaction = s->handler;
    sigaction(SIGINT, &mine, nullptr);
    // A Ctrl-C since that handler replaced this one reached Python's alone, which noted it
    // for the interpreter and left the flag down: the first step asks Python (it was lost,
    // and a `while` ran on until a second Ctrl-C)
    s->pending.store(true, std::memory_order_relaxed);
  }
  s->chaining.clear(std::memory_order_release);
}

// At import, with the GIL.
inline void chain_interrupt_handler() {
  attach_shared();
  static const bool follows_forks = pthread_atfork(nullptr, nullptr, &forked_child) == 0;
  (void)follows_forks;
  keep_interrupt_handler();
}

void take_interrupt() {
  if (PyThread_get_thread_ident() != shared->signal_thread) return;
  shared->pending.store(false, std::memory_order_relaxed);
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
