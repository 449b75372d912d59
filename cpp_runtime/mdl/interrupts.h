// Ctrl-C between a loop's steps. A model's loops run natively, so Python's SIGINT handler,
// which only marks the signal for the interpreter to act on, could not stop a call until
// it returned: a `while` whose condition stays true, or 2**40 empty steps, never did. Each
// module chains a handler in front of Python's when it is imported (src/interrupts.h): it
// sets `interrupt_pending` and calls Python's. Every step of a loop in generated code (on
// the cuda target, the host's loop between launches) then polls the flag, one relaxed
// load; the main thread, which Python's signal handlers run on, runs them there
// (`PyErr_CheckSignals`) and throws the exception one raised (KeyboardInterrupt) out of
// the call.
#pragma once

#include <atomic>

namespace mdl {

// Set by the module's SIGINT handler. Both are defined once, in the runtime's glue
// (src/interrupts.h, which src/python_module.cpp alone includes).
extern std::atomic<bool> interrupt_pending;

// On Python's main thread: its signal handlers run, and what one raises is thrown as that
// Python exception. On another thread, nothing (the main thread takes the signal).
[[gnu::cold]] void take_interrupt();

inline void poll_interrupt() {
  if (__builtin_expect(interrupt_pending.load(std::memory_order_relaxed), false))
    take_interrupt();
}

}  // namespace mdl
