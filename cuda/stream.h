// Streams, events and the device guard: the pieces of the CUDA runtime kernels and their
// launchers need. Free of fmt (NOTE [CUDA headers without fmt] in probe.h), so .cu files
// include it too.
//
// NOTE [One current stream per device] Each thread has one current stream per device. Until a
// StreamGuard says otherwise it is halfgrad's own stream of that device, created on first use
// with cudaStreamNonBlocking: it is not the legacy default stream, so a CUDA graph can capture
// it, and work on it does not serialize with other libraries' default-stream work. Every op
// enqueues on the current stream; the host waits only in item(), copies to the CPU and
// synchronize().
#pragma once

#include <cuda_runtime.h>

#include "halfgrad/cuda/kernel_args.h"

namespace hg::cuda {

// halfgrad's stream of `device` (-1: the current device), or the one a StreamGuard set.
cudaStream_t current_stream(int device = -1);

// Makes `device` current for the calling thread until destroyed (cudaSetDevice both ways).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// Makes `stream` the calling thread's current stream of `device` until destroyed.
class StreamGuard {
 public:
  StreamGuard(cudaStream_t stream, int device = -1);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

// A CUDA event (timing enabled): record it on a stream, wait on it, time between two.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream = nullptr);  // null: the current stream
  void synchronize() const;                    // the host waits for the recorded work
  bool query() const;                          // true once the recorded work ran
  // Milliseconds from this event to `end` (both recorded and completed).
  float elapsed_ms(const Event& end) const;
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A CUDA graph of the work enqueued on the current stream between capture_begin and
// capture_end; replay() enqueues all of it again with one launch, on the stream current when
// it is called (as torch.cuda.CUDAGraph.replay). Memory the captured work
// allocates comes from a pool private to the graph (NOTE [Graph memory pools] in
// allocator.cpp), so the addresses the graph baked in stay valid for every replay.
// Capturing fails (hg::Error) when the captured work needs the host: a copy to the CPU,
// item(), synchronize().
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void capture_begin();
  void capture_end();
  void replay();
  bool captured() const { return exec_ != nullptr; }

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int pool_ = 0;  // the allocator pool of this graph's memory (0: none yet)
};

namespace detail {
// The device-error slot of `device` (-1: current) for kernels to report into (a pointer
// valid on the device and the host).
DeviceErrorSlot* device_error_slot(int device = -1);
// Throws hg::Error for a report in the slot of `device`, and clears it. Called after the host
// waited for the device.
void raise_device_error(int device);

}  // namespace detail

}  // namespace hg::cuda
