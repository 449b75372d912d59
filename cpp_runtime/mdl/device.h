// Where a model's memory lives and its functions run: every model's spec names a table.
// The cpu target's generated code names `mdl::host_device` (src/host_device.cpp: the
// process's own memory, copies that are memcpy, the optimizer's vectorized loops); the
// cuda target's names `mdl::cuda_device` (src/cuda_device.cu), and the runtime
// (src/model_object.h) then keeps parameters, gradients, optimizer state, inputs and the memory
// plan on the GPU. The runtime moves data only through the table, and never asks which
// it is but for `in_place`.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(__CUDACC__)
#define MDL_HOST_DEVICE __host__ __device__
#else
#define MDL_HOST_DEVICE
#endif

namespace mdl {

// One optimizer step's numbers for one parameter, computed on the host (optimizer.h):
// the per-element update `update_element` applies them on either side.
struct UpdateStep {
  int kind;                 // OptimizerConfig::Kind: 1 SGD, 2 Adam
  double lr, scale;         // scale: the global-norm clipping factor (1: none)
  double l1, l2, wd;        // penalties and weight decay added to the gradient
  double momentum;          // SGD
  bool start, nesterov;     // SGD: the first step sets the buffer
  double beta1, beta2, eps, decay;  // Adam (decay: AdamW's lr * weight_decay)
  double step, inv_c2;  // Adam: lr / (1 - beta1^t), 1 / (1 - beta2^t) (bias corrections)
};

struct Device {
  const char* name;
  int dlpack_device_type;  // how DLPack names its memory (2: kDLCUDA)
  // Throws std::runtime_error saying why when no device is usable (a model is being made).
  void (*require)();
  // A model's context for generated code (cuda/context.h): stream, cuBLAS, arenas, tapes.
  void* (*open)();
  void (*close)(void* context);
  // Waits for the context's work, then throws what device code found (an IndexError for a
  // token past the table, ...); called after every generated function.
  void (*finish)(void* context);
  // Zeroed; throws std::bad_alloc. The host's and the GPU's are kAlign-aligned (the
  // emulated device's end at a guard page instead).
  void* (*allocate)(std::size_t bytes);
  void (*release)(void* p);
  // Copies between host and device memory, finished when they return.
  void (*upload)(void* context, void* dst, const void* src, std::size_t bytes);
  void (*download)(void* context, void* dst, const void* src, std::size_t bytes);
  // A copy on the device, queued on the context's stream: its next `finish` waits for it.
  void (*copy)(void* context, void* dst, const void* src, std::size_t bytes);
  // The optimizer on the device: one step of `n` elements (`second` null but for Adam),
  // queued on the context's stream, and a gradient's sum of squares (global-norm clipping),
  // for f32 and f64.
  void (*update_f32)(void* context, const UpdateStep& s, float* w, const float* g,
                     float* first, float* second, int64_t n);
  void (*update_f64)(void* context, const UpdateStep& s, double* w, const double* g,
                     double* first, double* second, int64_t n);
  double (*sum_squares_f32)(void* context, const float* g, int64_t n);
  double (*sum_squares_f64)(void* context, const double* g, int64_t n);
  // Waits for all work on the device, whoever queued it: a tensor another library made
  // on its own stream (a __dlpack__ input used in place) is complete before a model reads it.
  void (*synchronize)();
  // Whether its memory is the caller's own, the host's: the runtime reads NumPy arguments
  // and hands out parameters where they are, copying nothing over (the host's table). A
  // device whose memory only happens to be the host's (the emulated GPU) copies as a GPU.
  bool in_place = false;
  // How many of a context's calls were captured as CUDA graphs and replayed from them
  // (mdl/cuda/graph.h); null for a device without graphs.
  void (*graph_counts)(void* context, int64_t* captured, int64_t* replayed) = nullptr;
  // Whether a host pointer is this device's memory: the emulated GPU's is the host's, so a
  // NumPy or torch view of a DeviceArray (DLPack's kDLCPU there) is read in place, as a
  // CUDA tensor is on a GPU (copied as host memory, the emulator refused it). Null where
  // no host pointer can be (a GPU's, the host's own).
  bool (*holds)(const void* p) = nullptr;
  // Throws std::runtime_error where this process may not use the device: a child forked
  // after its parent used a GPU (CUDA's rule), every call of which is refused before any
  // CUDA call. Null where any process may (the host's).
  void (*check_process)() = nullptr;
};

// The cpu target's table (src/host_device.cpp, in the runtime every module links).
extern const Device host_device;
// The cuda target's table (src/cuda_device.cu, linked only into cuda modules).
extern const Device cuda_device;

// Copies into and out of memory on `device`; nothing for no bytes (whose pointers may be
// null).
inline void upload(const Device* device, void* context, void* dst, const void* src,
                   std::size_t bytes) {
  if (bytes) device->upload(context, dst, src, bytes);
}

inline void download(const Device* device, void* context, void* dst, const void* src,
                     std::size_t bytes) {
  if (bytes) device->download(context, dst, src, bytes);
}

// The optimizer's functions of the table for a value type.
inline void apply_update(const Device& d, void* context, const UpdateStep& s, float* w,
                         const float* g, float* first, float* second, int64_t n) {
  d.update_f32(context, s, w, g, first, second, n);
}
inline void apply_update(const Device& d, void* context, const UpdateStep& s, double* w,
                         const double* g, double* first, double* second, int64_t n) {
  d.update_f64(context, s, w, g, first, second, n);
}
inline double squared_norm(const Device& d, void* context, const float* g, int64_t n) {
  return d.sum_squares_f32(context, g, n);
}
inline double squared_norm(const Device& d, void* context, const double* g, int64_t n) {
  return d.sum_squares_f64(context, g, n);
}

// `n` zeroed values of T where a model keeps its data (`device`'s memory), released with
// the buffer.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Device* device, int64_t n) : device_(device), size_(n) {
    if (n) data_ = static_cast<T*>(device->allocate(n * sizeof(T)));
  }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this == &other) return *this;
    free();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { free(); }

  T* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  void free() {
    if (data_) device_->release(data_);
    data_ = nullptr;
    size_ = 0;
  }

  const Device* device_ = nullptr;
  T* data_ = nullptr;
  int64_t size_ = 0;
};

// One element of an optimizer step (host loops and device kernels share it): `w` the
// weight, `grad` its gradient, `b` the momentum buffer or Adam's m, `v` Adam's v.
template <class T>
MDL_HOST_DEVICE inline void update_element(const UpdateStep& s, T& w, T grad, T& b, T& v) {
  double x = w;
  double g = s.scale * double(grad) + s.l2 * x + s.l1 * double((x > 0) - (x < 0)) + s.wd * x;
  if (s.kind == 1) {  // SGD
    if (s.momentum == 0) {
      w = T(x - s.lr * g);
      return;
    }
    double buf = s.start ? g : s.momentum * double(b) + g;
    b = T(buf);
    w = T(x - s.lr * (s.nesterov ? g + s.momentum * buf : buf));
    return;
  }
  x -= s.decay * x;
  double m = s.beta1 * double(b) + (1 - s.beta1) * g;
  double q = s.beta2 * double(v) + (1 - s.beta2) * g * g;
  b = T(m);
  v = T(q);
  w = T(x - s.step * m / (std::sqrt(q * s.inv_c2) + s.eps));
}

}  // namespace mdl
