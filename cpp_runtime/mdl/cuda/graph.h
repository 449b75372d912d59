// A generated function's work as one CUDA graph (docs/cuda.md, "CUDA graphs"): a function
// whose host code reads nothing back from the device queues the same kernels, products
// and copies, on the same arguments, whenever it is called with the same dims and
// memory. Such a call replays the graph captured from an earlier one: one launch instead
// of one a kernel, and no host work between the kernels (a B=1 LSTM's 35 steps are 70
// launches otherwise).
//
// How a call knows it may replay: the function's host code first runs dry, recording what
// it would queue (every launch, cuBLAS product and copy goes through `launch`, `gemm` and
// `copy`, which record instead of queueing while a Signature is recording): the graph is
// replayed only when that record is byte for byte the one it was captured from. So nothing
// the code reads on the host (dims, pointers, the dropout key) can differ unseen. A record
// seen for the second time in a row is captured; a first one runs as it is. The generated
// code (codegen/targets/cuda.py) wraps only functions that draw no random numbers on the
// host and read nothing back to it, since their host code runs twice, but for a loop's
// branch conditions that are there before the dry run: memory the function does not
// write, or what kernels it queues even while dry (launch_now) compute from its inputs
// (KeptReads below).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mdl/cuda/check.h"

namespace mdl {
namespace cuda {

// What a function's host code queued, in order: each operation's kind and arguments.
class Signature {
 public:
  template <class... A>
  void add(const void* operation, const A&... values) {
    append(operation);
    (append(values), ...);
  }
  void clear() { bytes_.clear(); }
  bool empty() const { return bytes_.empty(); }
  bool operator==(const Signature& other) const { return bytes_ == other.bytes_; }

 private:
  template <class V>
  void append(const V& v) {
    static_assert(std::is_trivially_copyable<V>::value, "a launch argument is plain bytes");
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(V));
  }
  std::string bytes_;
};

// The Signature this thread's dry run records into; null when work is queued for real.
inline Signature*& recording() {
  static thread_local Signature* now = nullptr;
  return now;
}

// A function that runs dry must not do `what` (its host code would do it twice, or read
// what nothing wrote yet): codegen/targets/cuda.py wraps no function that does.
inline void host_work(const char* what) {
  if (recording())
    throw Error(std::string("internal error: a function captured as a CUDA graph ") + what +
                " (codegen/targets/cuda.py should not have wrapped it)");
}

// What a function running as a graph read on the host of memory it does not write (a
// backward's branch conditions, which the training forward wrote: `read_steps_before` in
// mdl/cuda/transfers.h): read once, in the dry run, and kept for the call's later pass, which
// may be a capture, where no copy to the host may be queued. Null outside a GraphCall.
struct KeptReads {
  std::vector<std::string> values;
  std::size_t next = 0;  // the next read of this pass
};
inline KeptReads*& kept_reads() {
  static thread_local KeptReads* now = nullptr;
  return now;
}

// One function's graph in a model's context: the record it was captured from, the record
// of the last call that was not replayed (captured when the next call matches it).
struct FunctionGraph {
  Signature captured_from, candidate;
  cudaGraphExec_t exec = nullptr;

  FunctionGraph() = default;
  FunctionGraph(const FunctionGraph&) = delete;
  FunctionGraph& operator=(const FunctionGraph&) = delete;
  ~FunctionGraph() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

// A model's graphs, one per function of its module that may be captured (named by a
// static of the function's own), and how many were captured and replayed (a model's
// `cuda_graphs`).
struct GraphTable {
  bool enabled = true;  // MDL_CUDA_GRAPHS=0 turns them off (src/cuda_device.cu)
  int64_t captured = 0, replayed = 0;
  std::map<const void*, std::unique_ptr<FunctionGraph>> functions;

  FunctionGraph& at(const void* function) {
    std::unique_ptr<FunctionGraph>& graph = functions[function];
    if (!graph) graph = std::make_unique<FunctionGraph>();
    return *graph;
  }
};

// One call of a function that may be captured: the generated code runs its body while
// `pass()` says so, `for (GraphCall run(g.graphs, &site, g.stream); run.pass();) { body }`.
// The body runs dry first (recording its Signature); then the graph is replayed, or the
// body runs again, captured into the graph when its record is the previous call's, else as
// it is.
class GraphCall {
 public:
  GraphCall(GraphTable& table, const void* function, cudaStream_t stream)
      : table_(table), graph_(table.at(function)), stream_(stream) {
    kept_reads() = &reads_;
  }
  GraphCall(const GraphCall&) = delete;
  GraphCall& operator=(const GraphCall&) = delete;

  ~GraphCall() {
    kept_reads() = nullptr;
    if (step_ == Step::Dry) recording() = nullptr;
    if (step_ == Step::Capturing) {  // the body threw: the stream stops capturing
      cudaGraph_t graph = nullptr;
      if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
      cudaGetLastError();
    }
  }

  bool pass() {
    switch (step_) {
      case Step::Start:
        if (!table_.enabled) return go(Step::Eager);
        signature_.clear();
        recording() = &signature_;
        return go(Step::Dry);
      case Step::Dry:
        recording() = nullptr;
        if (graph_.exec && signature_ == graph_.captured_from) {
          step_ = Step::Done;
          check(cudaGraphLaunch(graph_.exec, stream_), "cudaGraphLaunch");
          ++table_.replayed;
          return false;
        }
        if (!signature_.empty() && signature_ == graph_.candidate) {
          check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                "cudaStreamBeginCapture");
          return go(Step::Capturing);
        }
        graph_.candidate = signature_;
        return go(Step::Eager);
      case Step::Capturing:
        step_ = Step::Done;
        capture_and_launch();
        return false;
      default:
        step_ = Step::Done;
        return false;
    }
  }

 private:
  enum class Step { Start, Dry, Eager, Capturing, Done };

  bool go(Step next) {
    step_ = next;
    reads_.next = 0;  // a pass after the dry run reads what the dry run read
    return true;
  }

  void capture_and_launch() {
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(made, "cudaGraphInstantiate");
    if (graph_.exec) cudaGraphExecDestroy(graph_.exec);
    graph_.exec = exec;
    graph_.captured_from = std::move(signature_);
    graph_.candidate.clear();
    ++table_.captured;
    check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  }

  GraphTable& table_;
  FunctionGraph& graph_;
  cudaStream_t stream_;
  Signature signature_;
  KeptReads reads_;
  Step step_ = Step::Start;
};

}  // namespace cuda
}  // namespace mdl
