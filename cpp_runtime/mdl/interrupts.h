// Ctrl-C between a loop's steps. A model's loops run natively, so Python's SIGINT handler,
// which only marks the signal for the interpreter to act on, could not stop a call until
// it returned: a `while` whose condition stays true, or 2**40 empty steps, never did. The
// modules of a process chain one handler in front of Python's (src/interrupts.h): it sets
// the flag `interrupt_pending` points to and calls Python's. Every step of a loop in
// generated code (on the cuda target, the host's loop between launches) then polls the
// flag, two loads; the main thread, which Python's signal handlers run on, runs them there
// (`PyErr_CheckSignals`) and throws the exception one raised (KeyboardInterrupt) out of
// the call. Before a call's outermost loop, generated code chains the handler again where
// a handler installed since (`signal.signal(SIGINT, f)` after the import) replaced it.
#pragma once

#include <atomic>

namespace mdl {

// The flag the modules' SIGINT handler sets. Defined once, in the runtime's glue
// (src/interrupts.h, which src/python_module.cpp alone includes), as are the functions.
extern std::atomic<bool>* interrupt_pending;

// On Python's main thread: its signal handlers run, and what one raises is thrown as that
// Python exception. On another thread, nothing (the main thread takes the signal).
[[gnu::cold]] void take_interrupt();

// Before a call's outermost loop: the handler chained in front of SIGINT's again where a
// handler installed after the import replaced it (one sigaction call where none did).
void keep_interrupt_handler();

inline void poll_interrupt() {
  if (__builtin_expect(interrupt_pending->load(std::memory_order_relaxed), false))
    take_interrupt();
}

}  // namespace mdl
