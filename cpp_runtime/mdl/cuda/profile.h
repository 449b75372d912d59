// A profiled cuda build's clocks (`mdlc build --profile --target cuda`, codegen/targets/
// cuda.py's time_start and time_stop): the host queues its work and goes on, so a site's
// time is the GPU's, between two events recorded on the model's stream around the site's
// work. The events are the context's, reused from call to call; each site's pair waits in
// `timed` until the function's `finish` has synchronized the stream (src/cuda_device.cu),
// which adds their times into the model's counts (mdl::ProfileCount, as the cpu target's
// host clock does).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mdl/cuda/check.h"
#include "mdl/model.h"

namespace mdl {
namespace cuda {

class Profiler {
 public:
  Profiler() = default;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  ~Profiler() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  // An event recorded on `stream` now: a site starts (its index, for `add`).
  std::size_t mark(cudaStream_t stream) {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    check(cudaEventRecord(events_[used_], stream), "cudaEventRecord");
    return used_++;
  }

  // The site that started at `start` ends now; its time goes to `count` once settled.
  void add(ProfileCount& count, std::size_t start, cudaStream_t stream) {
    timed_.push_back({&count, start, mark(stream)});
  }

  // After the stream was synchronized: each site's time into its count.
  void settle() {
    for (const Timed& t : timed_) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[t.start], events_[t.stop]),
            "cudaEventElapsedTime");
      t.count->nanoseconds += uint64_t(double(ms) * 1e6);
      ++t.count->runs;
    }
    forget();
  }

  // A call that failed: its sites' times are dropped (its events may never be reached).
  void forget() {
    timed_.clear();
    used_ = 0;
  }

 private:
  struct Timed {
    ProfileCount* count;
    std::size_t start, stop;
  };
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;  // events recorded since the last settle
  std::vector<Timed> timed_;
};

}  // namespace cuda
}  // namespace mdl
