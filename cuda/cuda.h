// The CUDA runtime as halfgrad's users see it (torch.cuda's names). These functions exist in
// every build; a build without the CUDA backend answers that no device is available, and
// the calls that need a device throw hg::Error saying so.
//
//   if (hg::cuda::is_available()) {
//     Tensor x = hg::randn({1024, 1024}, {.device = hg::kCUDA});
//     Tensor y = hg::matmul(x, x);              // enqueued on the current stream
//     hg::cuda::synchronize();                  // the host waits here, and in item()/to(kCPU)
//     fmt::print("{} MiB\n", hg::cuda::max_memory_allocated() >> 20);
//   }
#pragma once

#include <cstdint>
#include <string>

namespace hg::cuda {

// True when halfgrad was built with its CUDA backend.
bool is_compiled();
// True when the CUDA backend is built and at least one device is usable.
bool is_available();
// The number of usable devices (0 without the backend, without a driver or without a GPU).
int device_count();
// Whether the current device computes in bfloat16 (compute capability 8.0 and later, as
// torch.cuda.is_bf16_supported); false where no device is usable.
bool is_bf16_supported();
// Why no device is available, or the name of device 0 ("NVIDIA H100 80GB HBM3").
std::string describe();

// The calling thread's current device (0 until set_device changes it).
int current_device();
void set_device(int device);
// Waits until everything enqueued on every stream of `device` (-1: the current device) ran.
void synchronize(int device = -1);
// True while the calling thread's current stream of `device` (-1: the current device) is
// capturing a CUDA graph (torch.cuda.is_current_stream_capturing). False without the backend.
bool is_current_stream_capturing(int device = -1);

// The caching allocator's counters for `device` (-1: the current device), in bytes:
// memory_allocated is what live tensors hold, max_memory_allocated its peak since the start
// or the last reset_peak_memory_stats; memory_reserved adds the cached free blocks.
int64_t memory_allocated(int device = -1);
int64_t max_memory_allocated(int device = -1);
int64_t memory_reserved(int device = -1);
void reset_peak_memory_stats(int device = -1);
// Returns the cached free blocks of every device to the driver (live tensors are untouched).
void empty_cache();
// Returns the cached free blocks of page-locked host memory (Tensor::pin_memory) to the driver;
// blocks a pending copy still reads stay (torch's torch._C._host_emptyCache).
void host_empty_cache();

namespace detail {
// Testing hook: while on, every new allocation (cached or not) is filled with 0xFF bytes on
// the current stream before it is handed out. Returns the previous setting.
bool set_allocation_poison(bool on);
}  // namespace detail

}  // namespace hg::cuda
