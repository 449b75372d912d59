// The emulated device's scheduler: a grid's blocks run one after another (in the order
// MDL_CUDA_EMULATOR chooses), and a block's threads each on a fiber of their own, run in
// turn until every one waits at a barrier or a shuffle or has exited. Then the waits are
// resolved as CUDA defines them, strictly: a shuffle completes when every lane its mask
// names has arrived at the same shuffle with the same mask; a barrier when every thread of
// the block waits at the same __syncthreads. Anything else (a thread that exited, another
// barrier, a lane missing from the mask) is reported, naming the kernel, block and thread.
// A kernel whose first launch met no barrier or shuffle afterwards runs its threads as a
// plain loop (the fast path); one that then meets a barrier is an error, never a wrong
// answer. Shared arrays are per block, poisoned at its start, and every access is checked
// for a race with another thread since the last barrier. In a ThreadSanitizer build
// (`--emulate --sanitize`, MDL_EMULATOR_TSAN) every kernel runs on fibers, which the
// sanitizer follows as threads of their own (the tsan namespace below).
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "emulator.h"

#if MDL_EMULATOR_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();  // libtsan's, not in its header
extern "C" void __tsan_ignore_thread_end();
#endif

namespace mdl {
namespace emulated {

// What ThreadSanitizer is told of the CUDA threads, in a build made for it: each fiber is
// a thread of its own to it, so two threads' accesses to the same device memory, one a
// write, with no atomic or barrier between them, are a race it reports. The blocks of a
// grid are not ordered (they run at once on a GPU); a barrier orders the threads of its
// block; the launch is ordered after what the host did before it, and the host after the
// whole grid. Outside such a build these do nothing.
namespace tsan {
#if MDL_EMULATOR_TSAN
constexpr bool on = true;
inline void* current() { return __tsan_get_current_fiber(); }
inline void* create() { return __tsan_create_fiber(0); }
// From the host into a fiber: what the host did before comes before what the fiber does.
inline void enter(void* fiber) { __tsan_switch_to_fiber(fiber, 0); }
// From a fiber back to the host: no order (the next thread of the block is not after it).
inline void leave(void* host) { __tsan_switch_to_fiber(host, __tsan_switch_to_fiber_no_sync); }
inline void release(void* sync) { __tsan_release(sync); }
inline void acquire(void* sync) { __tsan_acquire(sync); }
inline void name(void* fiber, const std::string& text) { __tsan_set_fiber_name(fiber, text.c_str()); }
// The emulator's own bookkeeping inside a fiber (poisoning a block's shared memory): not
// the kernel's accesses.
struct Unwatched {
  Unwatched() { __tsan_ignore_thread_begin(); }
  ~Unwatched() { __tsan_ignore_thread_end(); }
};
#else
constexpr bool on = false;
inline void* current() { return nullptr; }
inline void* create() { return nullptr; }
inline void enter(void*) {}
inline void leave(void*) {}
inline void release(void*) {}
inline void acquire(void*) {}
inline void name(void*, const std::string&) {}
struct Unwatched {};
#endif
}  // namespace tsan

thread_local const Coordinates* running = nullptr;

namespace {

constexpr int kWarp = 32;
constexpr std::size_t kStackBytes = 256 << 10;  // a CUDA thread's stack (its fiber's)
constexpr std::size_t kSharedBytes = 48 << 10;  // a block's static shared memory

enum class State { Runnable, Barrier, Shuffle, Exited, Failed };

struct Fiber {
  char* stack = nullptr;  // kStackBytes above a guard page
  ucontext_t context;
  void* tsan = nullptr;   // the sanitizer's thread (tsan::create), in its build
};

struct Thread {
  Coordinates at;
  int id = 0;  // linear within the block
  State state = State::Runnable;
  Site site{};                    // where it waits
  const void* address = nullptr;  // the wait's call (with site: same_wait)
  unsigned mask = 0;
  int lane_mask = 0, width = kWarp;
  uint64_t value = 0, result = 0;
  std::exception_ptr error;
  Fiber* fiber = nullptr;
  char* passed = nullptr;  // the barrier it waited at, to the sanitizer (Block::barriers)
};

struct Room {
  const void* key;
  void* data;
  SharedMark* marks;
};

// The block running on this host thread.
struct Block {
  const Grid* grid = nullptr;
  unsigned index = 0;  // linear block index
  std::vector<Thread> threads;
  Thread* current = nullptr;
  uint32_t epoch = 0;     // barriers passed
  unsigned long long launch = 0;  // the grid's number among the process's (Coordinates)
  bool fibers = false;    // else the fast path
  bool met_sync = false;  // a thread waited at a barrier or shuffle
  ucontext_t scheduler;
  // In a sanitizer build: the host's own thread to it, the block's barriers (two, taken in
  // turn, so that a thread past one does not release into the one others still leave),
  // the end of the grid (every thread releases into it; the host acquires it once every
  // block has run), which fibers the block's threads take (the grid's blocks take turns
  // over `rotations` sets of them, so that neighbouring blocks are not the same threads
  // to the sanitizer), and the kernel's name, for the fibers'.
  void* host = nullptr;
  std::unique_ptr<char[]> barriers;
  char* grid_end = nullptr;
  unsigned rotations = 1;
  std::string name;
  std::size_t shared_used = 0, marks_used = 0;  // of this host thread's SharedMemory
  std::vector<Room> rooms;
};

// The shared memory of the blocks a host thread runs, made once: each block takes what its
// arrays need from the start and poisons it (shared_room).
struct SharedMemory {
  std::vector<char> bytes = std::vector<char>(kSharedBytes);
  std::vector<SharedMark> marks = std::vector<SharedMark>(kSharedBytes);  // one an element
};

thread_local Block* block = nullptr;
thread_local std::vector<std::unique_ptr<Fiber>>
    fibers;                                   // never moved: a ucontext_t points into itself
thread_local sigjmp_buf* recovery = nullptr;  // where a fault inside a kernel lands
thread_local const void* fault_address = nullptr;
thread_local uint64_t grids_run = 0;
std::atomic<unsigned long long> launches{0};  // every grid the process runs, numbered

std::string where(const Block& b, const Thread* t) {
  std::string text = "kernel " + kernel_name(b.grid->kernel) + ", block " + std::to_string(b.index);
  if (t) text += ", thread " + std::to_string(t->id);
  return text;
}

std::string hex_mask(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}

std::string site(const Thread& t) {
  return std::string(t.site.file) + ":" + std::to_string(t.site.line);
}

// Whether two waiting threads wait at the same barrier or shuffle: the same call (its
// return address) of the same source line. Either alone may not tell two apart: Clang
// merges a barrier in each arm of an `if` into one call whose line argument it selects.
bool same_wait(const Thread& a, const Thread& b) {
  return a.address == b.address && a.site.line == b.site.line &&
         std::strcmp(a.site.file, b.site.file) == 0;
}

Block& running_block(const char* what) {
  if (!block || !block->current) throw Violation(std::string(what) + " outside a kernel");
  return *block;
}

// ---- fibers ---------------------------------------------------------------------------

Fiber& fiber(std::size_t k) {
  while (fibers.size() <= k) {
    const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw Violation("no memory for the stacks of a block's threads");
    mprotect(m, page, PROT_NONE);  // an overflow faults here
    fibers.push_back(std::make_unique<Fiber>());
    fibers.back()->stack = static_cast<char*>(m) + page;
    fibers.back()->tsan = tsan::create();
    getcontext(&fibers.back()->context);
  }
  return *fibers[k];
}

void fiber_main() {
  Block& b = *block;
  Thread& t = *b.current;
  try {
    b.grid->body();
    t.state = State::Exited;
  } catch (...) {
    t.error = std::current_exception();
    t.state = State::Failed;
  }
  tsan::release(b.grid_end);
  tsan::leave(b.host);
  swapcontext(&t.fiber->context, &b.scheduler);  // never resumed
}

void start(Block& b, Thread& t) {
  const std::size_t n = b.threads.size();
  Fiber& f = fiber(std::size_t(t.id) + b.index % b.rotations * n);
  if (tsan::on)
    tsan::name(f.tsan, b.name + ", block " + std::to_string(b.index) + ", thread " +
                           std::to_string(t.id));
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_main, 0);
  t.fiber = &f;
}

// Runs thread `t` until it waits or ends.
void resume(Block& b, Thread& t) {
  b.current = &t;
  running = &t.at;
  tsan::enter(t.fiber->tsan);
  swapcontext(&b.scheduler, &t.fiber->context);
  b.current = nullptr;
  running = nullptr;
  if (t.state == State::Failed) {
    tsan::acquire(b.grid_end);
    std::rethrow_exception(t.error);
  }
}

// A thread that waits gives the host thread back to the scheduler.
void wait(Block& b, Thread& t) {
  b.met_sync = true;
  if (tsan::on && t.state == State::Barrier) {
    t.passed = b.barriers.get() + b.epoch % 2;
    tsan::release(t.passed);
  }
  tsan::leave(b.host);
  swapcontext(&t.fiber->context, &b.scheduler);
  running = &t.at;  // resumed: the wait is over
  b.current = &t;
  if (t.passed) tsan::acquire(std::exchange(t.passed, nullptr));
}

// ---- orders ---------------------------------------------------------------------------

std::vector<int> in_order(int n, Order order, std::mt19937_64& rng) {
  std::vector<int> out(n);
  std::iota(out.begin(), out.end(), 0);
  if (order == Order::Reverse) std::reverse(out.begin(), out.end());
  if (order == Order::Shuffle) std::shuffle(out.begin(), out.end(), rng);
  return out;
}

// ---- resolving waits ------------------------------------------------------------------

const char* doing(const Thread& t) {
  switch (t.state) {
    case State::Barrier:
      return "waits at __syncthreads";
    case State::Shuffle:
      return "waits at a shuffle";
    case State::Exited:
      return "has exited";
    default:
      return "runs";
  }
}

// Completes the shuffles whose lanes have all arrived; true when one did. Throws when
// none can complete and one is waited at (lanes that can never meet).
bool resolve_shuffles(Block& b) {
  const int n = int(b.threads.size());
  bool done = false;
  std::string stuck;
  for (int w0 = 0; w0 < n; w0 += kWarp) {
    const int lanes = std::min(kWarp, n - w0);
    const Thread* first = nullptr;
    for (int l = 0; l < lanes && !first; ++l)
      if (b.threads[w0 + l].state == State::Shuffle) first = &b.threads[w0 + l];
    if (!first) continue;
    const unsigned mask = first->mask;
    std::string wrong;
    for (int l = 0; l < lanes && wrong.empty(); ++l) {
      const Thread& t = b.threads[w0 + l];
      const bool named = (mask >> l) & 1;
      if (t.state == State::Shuffle && same_wait(t, *first) && !named)
        wrong = where(b, &t) + " arrives at the shuffle at " + site(t) + " but the mask " +
                hex_mask(mask) + " of lane " + std::to_string(first->id % kWarp) +
                " leaves its lane " + std::to_string(l) + " out";
      else if (named && t.state != State::Shuffle)
        wrong = where(b, &t) + " " + doing(t) + " while lane " + std::to_string(first->id % kWarp) +
                " waits for it at the shuffle at " + site(*first) + " (its mask names lane " +
                std::to_string(l) + ")";
      else if (named && (!same_wait(t, *first) || t.mask != mask))
        wrong = where(b, &t) + " waits at the shuffle at " + site(t) + " with mask " +
                hex_mask(t.mask) + ", lane " + std::to_string(first->id % kWarp) +
                " at the one at " + site(*first) + " with mask " + hex_mask(mask) +
                ": the lanes of a warp must meet at the same shuffle";
    }
    for (int l = lanes; l < kWarp && wrong.empty(); ++l)
      if ((mask >> l) & 1)
        wrong = where(b, first) + ": the shuffle's mask names lane " + std::to_string(l) +
                ", which the block does not have";
    if (!wrong.empty()) {
      if (stuck.empty()) stuck = wrong;
      continue;
    }
    for (int l = 0; l < lanes; ++l) {
      Thread& t = b.threads[w0 + l];
      if (!((mask >> l) & 1)) continue;
      int source = l ^ t.lane_mask;
      if (t.width < kWarp && source >= (l / t.width + 1) * t.width) source = l;
      if (source >= lanes || !((mask >> source) & 1))
        throw Violation(where(b, &t) + ": the shuffle at " + site(t) + " reads lane " +
                        std::to_string(source) + ", which its mask leaves out");
      t.result = b.threads[w0 + source].value;
    }
    for (int l = 0; l < lanes; ++l)
      if ((mask >> l) & 1) b.threads[w0 + l].state = State::Runnable;
    done = true;
  }
  if (!done && !stuck.empty()) throw Violation(stuck);
  return done;
}

// Every thread waits at a barrier: the same one, or a report of which is where.
void resolve_barrier(Block& b) {
  const Thread* at = nullptr;
  for (const Thread& t : b.threads)
    if (t.state == State::Barrier) {
      at = &t;
      break;
    }
  for (const Thread& t : b.threads) {
    if (t.state == State::Exited)
      throw Violation(where(b, &t) + " has exited while thread " + std::to_string(at->id) +
                      " waits at __syncthreads at " + site(*at) +
                      ": barrier divergence (every thread of the block must reach it)");
    if (!same_wait(t, *at))
      throw Violation(where(b, &t) + " waits at __syncthreads at " + site(t) + ", thread " +
                      std::to_string(at->id) + " at the one at " + site(*at) +
                      ": barrier divergence (the threads of a block must meet at the same "
                      "barrier)");
  }
  for (Thread& t : b.threads) t.state = State::Runnable;
  ++b.epoch;
}

// ---- a block --------------------------------------------------------------------------

Coordinates coordinates(const Grid& g, unsigned linear_block, int linear_thread) {
  Coordinates c;
  c.block_dim = g.block;
  c.grid_dim = g.grid;
  c.block = {linear_block % g.grid.x, linear_block / g.grid.x % g.grid.y,
             linear_block / g.grid.x / g.grid.y};
  const unsigned t = unsigned(linear_thread);
  c.thread = {t % g.block.x, t / g.block.x % g.block.y, t / g.block.x / g.block.y};
  return c;
}

void run_threads(Block& b, const Settings& s, std::mt19937_64& rng) {
  const int n = int(b.threads.size());
  std::vector<int> order = in_order(n, s.threads, rng);
  if (!b.fibers) {
    for (int i : order) {
      Thread& t = b.threads[i];
      b.current = &t;
      running = &t.at;
      b.grid->body();
      t.state = State::Exited;
    }
    b.current = nullptr;
    running = nullptr;
    return;
  }
  for (Thread& t : b.threads) start(b, t);
  for (;;) {
    for (int i : order)
      if (b.threads[i].state == State::Runnable) resume(b, b.threads[i]);
    bool waiting = false, at_barrier = false;
    for (const Thread& t : b.threads) {
      waiting |= t.state != State::Exited;
      at_barrier |= t.state == State::Barrier;
    }
    if (!waiting) return;
    if (!resolve_shuffles(b)) {
      if (!at_barrier)
        throw Violation(where(b, nullptr) + ": no thread can go on (a bug in the emulator)");
      resolve_barrier(b);
    }
    if (s.threads == Order::Shuffle) std::shuffle(order.begin(), order.end(), rng);
  }
}

void fault_signal(int signal, siginfo_t* info, void* context);

// Runs block `index`; a fault in its code comes back here as a Violation.
void run_block(Block& b, unsigned index, const Settings& s, std::mt19937_64& rng) {
  b.index = index;
  b.epoch = 0;
  if (tsan::on) b.barriers.reset(new char[2]);  // fresh: no order from the block before
  b.shared_used = b.marks_used = 0;
  b.rooms.clear();
  for (int i = 0; i < int(b.threads.size()); ++i) {
    Thread& t = b.threads[i];
    t = Thread();
    t.id = i;
    t.at = coordinates(*b.grid, index, i);
    t.at.launch = b.launch;
  }
  sigjmp_buf landing;
  if (sigsetjmp(landing, 1)) {
    recovery = nullptr;
    Thread* t = block->current;
    block->current = nullptr;
    running = nullptr;
    const std::string what = describe_fault(fault_address);
    const bool stack = t && t->fiber && static_cast<const char*>(fault_address) < t->fiber->stack &&
                       static_cast<const char*>(fault_address) >= t->fiber->stack - 65536;
    throw Violation(where(*block, t) + (stack ? ": overflowed its stack (" +
                                                    std::to_string(kStackBytes >> 10) + " KiB)"
                                              : ": read or wrote " + what));
  }
  recovery = &landing;
  try {
    run_threads(b, s, rng);
  } catch (...) {
    recovery = nullptr;
    throw;
  }
  recovery = nullptr;
}

// What the first launch of each kernel showed: whether its threads wait for each other.
std::mutex kernels_lock;
std::map<const void*, bool> kernels_met_sync;

// ---- faults ---------------------------------------------------------------------------

struct sigaction previous_action;

void fault_signal(int signal, siginfo_t* info, void* context) {
  if (recovery) {
    fault_address = info->si_addr;
    if (block) tsan::leave(block->host);  // the landing is the host's
    siglongjmp(*recovery, 1);
  }
  // not ours: whoever handled it before (Python's faulthandler, or the default)
  if (previous_action.sa_flags & SA_SIGINFO) {
    previous_action.sa_sigaction(signal, info, context);
    return;
  }
  if (previous_action.sa_handler == SIG_IGN) return;
  if (previous_action.sa_handler != SIG_DFL) {
    previous_action.sa_handler(signal);
    return;
  }
  struct sigaction fallback{};
  fallback.sa_handler = SIG_DFL;
  sigaction(signal, &fallback, nullptr);  // the access faults again, and ends the process
}

// The signal handler runs on a stack of its own (a thread's overflow leaves none): the one
// the host thread has (Python's faulthandler makes one), else one made here.
void alternate_stack() {
  static thread_local bool done = false;
  static thread_local std::vector<char> room;
  if (done) return;
  done = true;
  stack_t st{};
  if (sigaltstack(nullptr, &st) == 0 && !(st.ss_flags & SS_DISABLE)) return;
  room.resize(std::max<std::size_t>(SIGSTKSZ, 64 << 10));
  st.ss_sp = room.data();
  st.ss_size = room.size();
  st.ss_flags = 0;
  sigaltstack(&st, nullptr);
}

}  // namespace

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action{};
    action.sa_sigaction = fault_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_action);
  });
  alternate_stack();
}

void run_grid(const Grid& g) {
  const uint64_t threads = uint64_t(g.block.x) * g.block.y * g.block.z;
  const uint64_t blocks = uint64_t(g.grid.x) * g.grid.y * g.grid.z;
  if (threads < 1 || threads > 1024 || g.block.z > 64)
    throw Violation("kernel " + kernel_name(g.kernel) + ": a block of " + std::to_string(threads) +
                    " threads; CUDA allows 1 to 1024");
  if (blocks < 1 || g.grid.x > 2147483647u || g.grid.y > 65535 || g.grid.z > 65535)
    throw Violation("kernel " + kernel_name(g.kernel) + ": a grid of " + std::to_string(g.grid.x) +
                    " x " + std::to_string(g.grid.y) + " x " + std::to_string(g.grid.z) +
                    " blocks is outside CUDA's limits");
  const Settings& s = settings();
  install_fault_handler();
  std::mt19937_64 rng(s.seed * 0x9e3779b97f4a7c15ull + grids_run++);
  int known = -1;  // what the kernel showed before: -1 nothing, 0 no waits, 1 waits
  {
    std::lock_guard<std::mutex> hold(kernels_lock);
    auto it = kernels_met_sync.find(g.kernel);
    if (it != kernels_met_sync.end()) known = it->second;
  }
  Block b;
  b.grid = &g;
  b.launch = ++launches;
  b.threads.resize(threads);
  b.fibers = s.fibers || known != 0 || tsan::on;
  std::unique_ptr<char> grid_end;
  if (tsan::on) {
    grid_end.reset(new char);
    b.host = tsan::current();
    b.grid_end = grid_end.get();
    b.rotations = unsigned(std::max<uint64_t>(1, std::min<uint64_t>(blocks, 2048 / threads)));
    b.name = "kernel " + kernel_name(g.kernel);
  }
  Block* outer = block;
  block = &b;
  try {
    for (int index : in_order(int(blocks), s.blocks, rng)) run_block(b, unsigned(index), s, rng);
  } catch (...) {
    tsan::acquire(b.grid_end);
    block = outer;
    throw;
  }
  tsan::acquire(b.grid_end);
  block = outer;
  if (known < 0) {
    std::lock_guard<std::mutex> hold(kernels_lock);
    kernels_met_sync[g.kernel] = b.met_sync;
  }
}

// ---- what kernels call ----------------------------------------------------------------

namespace {

// The running thread, arriving at a wait (`what`) at `site`: on the fast path there is no
// fiber to suspend it, which is an error, never a wrong answer.
Thread& arriving(Block& b, const char* what, Site site) {
  Thread& t = *b.current;
  if (!b.fibers)
    throw Violation(where(b, &t) + " met " + what + " at " + site.file + ":" +
                    std::to_string(site.line) +
                    " on the emulator's fast path (its first launch met none); run with "
                    "MDL_CUDA_EMULATOR=fibers");
  return t;
}

// Suspends `t` at the wait `state` of `site`, called from `address`.
void wait_at(Block& b, Thread& t, State state, Site site, const void* address) {
  t.state = state;
  t.site = site;
  t.address = address;
  wait(b, t);
}

}  // namespace

void barrier(Site where_from) {
  Block& b = running_block("__syncthreads");
  Thread& t = arriving(b, "__syncthreads", where_from);
  wait_at(b, t, State::Barrier, where_from, __builtin_return_address(0));
}

uint64_t shuffle_xor(unsigned mask, uint64_t bits, int lane_mask, int width, Site where_from) {
  Block& b = running_block("a shuffle");
  Thread& t = arriving(b, "a shuffle", where_from);
  if (width < 1 || width > kWarp || (width & (width - 1)))
    throw Violation(where(b, &t) + ": a shuffle of width " + std::to_string(width) +
                    " (a power of two up to 32)");
  if (!((mask >> (t.id % kWarp)) & 1))
    throw Violation(where(b, &t) + ": the shuffle at " + where_from.file + ":" +
                    std::to_string(where_from.line) + " has a mask that leaves out its own lane " +
                    std::to_string(t.id % kWarp));
  t.mask = mask;
  t.lane_mask = lane_mask;
  t.width = width;
  t.value = bits;
  wait_at(b, t, State::Shuffle, where_from, __builtin_return_address(0));
  return t.result;
}

void* shared_room(const void* key, std::size_t bytes, int64_t count, SharedMark** marks) {
  Block& b = running_block("a __shared__ array");
  tsan::Unwatched unwatched;
  for (const Room& r : b.rooms)
    if (r.key == key) {
      *marks = r.marks;
      return r.data;
    }
  static thread_local SharedMemory memory;
  const std::size_t at = (b.shared_used + 15) / 16 * 16, size = bytes * std::size_t(count);
  if (at + size > kSharedBytes)
    throw Violation(where(b, b.current) + ": its __shared__ arrays need more than " +
                    std::to_string(kSharedBytes >> 10) + " KiB");
  b.shared_used = at + size;
  Room r{key, memory.bytes.data() + at, memory.marks.data() + b.marks_used};
  b.marks_used += std::size_t(count);
  std::memset(r.data, 0xff, size);  // poison: what no thread of this block wrote
  std::fill(r.marks, r.marks + count, SharedMark{-1, -1, 0, 0});
  b.rooms.push_back(r);
  *marks = r.marks;
  return r.data;
}

namespace {

std::string element(const char* name, int64_t index) {
  return std::string("shared ") + name + "[" + std::to_string(index) + "]";
}

void check_index(Block& b, const char* name, int64_t index, int64_t count) {
  if (index < 0 || index >= count)
    throw Violation(where(b, b.current) + ": " + element(name, index) + " is outside the array's " +
                    std::to_string(count) + " elements");
}

}  // namespace

void shared_read(const char* name, int64_t index, int64_t count, SharedMark* mark) {
  Block& b = running_block("a __shared__ array");
  check_index(b, name, index, count);
  const int t = b.current->id;
  const uint32_t now = b.epoch + 1;
  if (!mark->wrote)
    throw Violation(where(b, b.current) + " reads " + element(name, index) +
                    " before any thread of the block wrote it");
  if (mark->wrote == now && mark->writer != t)
    throw Violation(where(b, b.current) + " reads " + element(name, index) + ", which thread " +
                    std::to_string(mark->writer) +
                    " wrote since the last __syncthreads: a race (a barrier is missing between "
                    "the write and the read)");
  if (mark->read != now) {
    mark->read = now;
    mark->reader = t;
  } else if (mark->reader != t) {
    mark->reader = -2;
  }
}

void shared_write(const char* name, int64_t index, int64_t count, SharedMark* mark) {
  Block& b = running_block("a __shared__ array");
  check_index(b, name, index, count);
  const int t = b.current->id;
  const uint32_t now = b.epoch + 1;
  if (mark->wrote == now && mark->writer != t)
    throw Violation(where(b, b.current) + " writes " + element(name, index) + ", which thread " +
                    std::to_string(mark->writer) +
                    " also wrote since the last __syncthreads: a race");
  if (mark->read == now && mark->reader != t)
    throw Violation(where(b, b.current) + " writes " + element(name, index) + ", which " +
                    (mark->reader == -2 ? std::string("other threads")
                                        : "thread " + std::to_string(mark->reader)) +
                    " read since the last __syncthreads: a race (a barrier is missing between "
                    "the read and the write)");
  mark->wrote = now;
  mark->writer = t;
}

}  // namespace emulated
}  // namespace mdl
