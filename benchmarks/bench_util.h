// What the hg-bench-* programs share: their common options, the interleaved timer, the
// CUDA event timer and the median. Each benchmark is one .cpp that prints JSON lines; this
// header keeps them timing alike.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "halfgrad/config.h"
#include "halfgrad/cuda/cuda.h"

#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/stream.h"
#endif

namespace hg::bench {

struct Options {
  int threads = 2;
  int reps = 10;
  int warmup = 3;
  std::string only = "all";
  std::string device = "cpu";  // "cpu" or "cuda": which sections run
  int iters = 5;               // cuda: calls between the two events of one timed repeat
};

// --threads, --reps, --warmup, --only (one of "all" and `sections`), --device and --iters on
// app.
inline void add_common_options(CLI::App& app, Options& options,
                               const std::vector<std::string>& sections) {
  std::vector<std::string> names = {"all"};
  names.insert(names.end(), sections.begin(), sections.end());
  app.add_option("--threads", options.threads, "OpenMP threads")->check(CLI::PositiveNumber);
  app.add_option("--reps", options.reps,
                 "timed calls (cuda: timed repeats) per measurement (the median is kept)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "untimed calls before timing")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--only", options.only, "the section to run")->check(CLI::IsMember(names));
  app.add_option("--device", options.device, "cpu: the CPU sections; cuda: the GPU sections")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--iters", options.iters, "cuda: calls per timed repeat (between two events)")
      ->check(CLI::PositiveNumber);
}

// Microseconds since `start` on the steady clock.
inline double micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

// A function under measurement and what it measured.
struct Candidate {
  std::string impl;    // "halfgrad", "onednn", ...
  std::string kernel;  // the kernel it ran, for the record
  std::function<void()> call;
  double us = 0;  // median time of one call
  // When set, replaces call: runs one call and returns its own time in microseconds (a peer
  // in another process times itself, leaving out the messages that drive it).
  std::function<double()> timed_call = nullptr;

  double run() {
    if (timed_call) return timed_call();
    const auto start = std::chrono::steady_clock::now();
    call();
    return micros_since(start);
  }
};

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Times every candidate: --warmup calls each, then --reps rounds that call each candidate
// once, so that a machine whose load changes during the run slows all of them alike (the
// ratios stay fair). Sets each candidate's median time.
inline void time_interleaved(const Options& options, std::vector<Candidate>& candidates) {
  for (Candidate& c : candidates) {
    for (int i = 0; i < options.warmup; ++i) c.run();
  }
  std::vector<std::vector<double>> times(candidates.size());
  for (int rep = 0; rep < options.reps; ++rep) {
    for (size_t i = 0; i < candidates.size(); ++i) times[i].push_back(candidates[i].run());
  }
  for (size_t i = 0; i < candidates.size(); ++i) candidates[i].us = median(times[i]);
}

// ---- CUDA ----------------------------------------------------------------------------------
//
// NOTE [GPU timing] Work on the GPU is enqueued, so a host clock around a call measures the
// enqueueing. Each repeat records a cuda::Event on the current stream, enqueues --iters calls,
// records a second event and waits for it; the repeat's time per call is the events' elapsed
// time over --iters. --warmup calls run first (cuBLASLt handles and plans, the caching
// allocator's first blocks, module loading), and the median over --reps repeats is kept. The
// time covers everything between the events, host gaps included: a call that waits for the
// device (item(), a copy to the CPU) pays for the idle device too, as a training loop does.
// The PyTorch twins (benchmarks/twin/*_twin.py) time with torch.cuda.Event the same way.

// --device cuda where no device is usable: the programs print the message and exit with
// kExitNoCudaDevice, which a test runner can count as skipped (CTest's SKIP_RETURN_CODE).
struct NoCudaDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};
inline constexpr int kExitNoCudaDevice = 77;

// A program's exit code for running `body`: 0 when it returns; when it throws, the message on
// stderr (after what stdout holds so far) and kExitNoCudaDevice for NoCudaDevice, else 1.
inline int exit_code_of(const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", e.what());
    return dynamic_cast<const NoCudaDevice*>(&e) != nullptr ? kExitNoCudaDevice : 1;
  }
}

// Throws NoCudaDevice unless --device cuda can run: the CUDA backend and a usable device.
inline void require_cuda(const char* program) {
  if (!hg::cuda::is_available()) {
    throw NoCudaDevice(std::string(program) +
                       ": --device cuda needs a CUDA device, but: " + hg::cuda::describe());
  }
}

// {"bench": "cuda_device", "impl": "halfgrad", "name": "..."}: the device the lines below ran on.
inline void print_cuda_device() {
  std::string name;
  for (char c : hg::cuda::describe()) {
    if (c == '"' || c == '\\') name += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) name += c;
  }
  std::printf("{\"bench\": \"cuda_device\", \"impl\": \"halfgrad\", \"name\": \"%s\"}\n",
              name.c_str());
  std::fflush(stdout);
}

// Milliseconds per call of `call` on the current CUDA stream (NOTE [GPU timing]).
inline double cuda_ms_per_call(const Options& options, const std::function<void()>& call) {
#if HALFGRAD_HAS_CUDA
  for (int i = 0; i < options.warmup; ++i) call();
  hg::cuda::synchronize();
  hg::cuda::Event start, end;
  std::vector<double> per_call;
  for (int rep = 0; rep < options.reps; ++rep) {
    start.record();
    for (int i = 0; i < options.iters; ++i) call();
    end.record();
    end.synchronize();
    per_call.push_back(double(start.elapsed_ms(end)) / options.iters);
  }
  return median(per_call);
#else
  (void)options;
  (void)call;
  throw std::runtime_error("cuda_ms_per_call: this build of halfgrad has no CUDA backend");
#endif
}

// As cuda_ms_per_call, but each call has its own pair of events and `between` runs after it,
// untimed: for a call that must be followed by another before it can run again (GradScaler's
// unscale_ and update). The repeat's time per call is the sum of its pairs over --iters.
inline double cuda_ms_per_call_between(const Options& options, const std::function<void()>& call,
                                       const std::function<void()>& between) {
#if HALFGRAD_HAS_CUDA
  for (int i = 0; i < options.warmup; ++i) {
    call();
    between();
  }
  hg::cuda::synchronize();
  std::vector<std::unique_ptr<hg::cuda::Event>> starts, ends;
  for (int i = 0; i < options.iters; ++i) {
    starts.push_back(std::make_unique<hg::cuda::Event>());
    ends.push_back(std::make_unique<hg::cuda::Event>());
  }
  std::vector<double> per_call;
  for (int rep = 0; rep < options.reps; ++rep) {
    for (int i = 0; i < options.iters; ++i) {
      starts[i]->record();
      call();
      ends[i]->record();
      between();
    }
    double total_ms = 0;
    for (int i = 0; i < options.iters; ++i) {
      ends[i]->synchronize();
      total_ms += starts[i]->elapsed_ms(*ends[i]);
    }
    per_call.push_back(total_ms / options.iters);
  }
  return median(per_call);
#else
  (void)options;
  (void)call;
  (void)between;
  throw std::runtime_error("cuda_ms_per_call_between: this build of halfgrad has no CUDA backend");
#endif
}

// hg::cuda::max_memory_allocated() in MiB.
inline double cuda_peak_mib() { return double(hg::cuda::max_memory_allocated()) / (1 << 20); }

}  // namespace hg::bench
