// The emulated CUDA device's pieces, as its source files share them: the table of device
// memory (memory.cpp), errors and streams (streams.cpp), the scheduler of CUDA threads
// (scheduler.cpp), kernels' names (symbols.cpp) and the settings (settings.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace mdl {
namespace emulated {

// What the emulator found wrong with the code it runs; the message says where and what.
struct Violation : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- settings (MDL_CUDA_EMULATOR) -----------------------------------------------------

enum class Order { Forward, Reverse, Shuffle };

struct Settings {
  Order threads = Order::Forward, blocks = Order::Forward;  // who runs first between barriers
  uint64_t seed = 0;                                        // of the shuffled orders
  bool deferred = false;  // queued work runs only when its stream is synchronized
  bool fibers = false;    // every kernel on fibers (no fast path for barrier-free kernels)
  std::size_t memory = 0; // the device's memory in bytes; 0: half of the machine's
};

// The settings in force, read again whenever MDL_CUDA_EMULATOR changes; throws Violation
// for a setting it does not know.
const Settings& settings();

// ---- device memory --------------------------------------------------------------------

// Device memory: each allocation its own mapping, ending at a page no one may touch, so a
// kernel reading past its end faults (and is reported) instead of reading a neighbour.
// Poisoned (every byte 0xff); nullptr when the allocations, this one's pages with them,
// would hold more than `limit` bytes (capacity()), as a GPU's memory runs out, or mmap fails.
void* allocate(std::size_t bytes, std::size_t limit);
// The device's memory: the `memory=` setting, else half of this machine's.
std::size_t capacity();
// What an allocation of `bytes` takes of the device's memory (its whole pages and the
// guard page after them), and what the live allocations take now.
std::size_t mapped_size(std::size_t bytes);
std::size_t memory_in_use();
bool release(void* pointer);        // false when `pointer` does not start an allocation
void release_all();
// Whether [pointer, pointer + bytes) lies inside one allocation (bytes 0: the pointer lies
// inside one or at its end).
bool on_device(const void* pointer, std::size_t bytes = 0);
// `pointer` in words: which allocation, how far in, or "host memory".
std::string describe(const void* pointer);
// What a faulting address was: past the end of an allocation, a freed one, a thread's stack.
std::string describe_fault(const void* address);

// ---- errors ---------------------------------------------------------------------------

// Makes `what` the device's sticky error (as after a failed kernel): every later call
// returns `code`, and cudaGetErrorString says `what`.
void fail(cudaError_t code, const std::string& what);
cudaError_t sticky();
// An error of one call (a bad argument): returned, remembered as the last error, with text.
cudaError_t refuse(cudaError_t code, const std::string& what);
void clear_errors();

// ---- streams --------------------------------------------------------------------------

// Runs `work` in the stream's order: now, or (deferred) when the stream is synchronized. A
// Violation it throws becomes the sticky error (`what`: the operation, for its text).
void enqueue(cudaStream_t stream, std::function<void()> work);
// Runs everything queued on every stream (cudaFree, cudaDeviceSynchronize).
void drain_all();

// ---- kernels --------------------------------------------------------------------------

// Runs every thread of `grid` (throws Violation).
void run_grid(const Grid& grid);
// A kernel's name from its address ("model_0::train_0_k3", "mdl::cuda::fill_kernel<float>").
std::string kernel_name(const void* kernel);
// Guards device memory and fiber stacks: a fault inside a kernel comes back to the
// scheduler as a Violation (scheduler.cpp).
void install_fault_handler();

}  // namespace emulated
}  // namespace mdl
