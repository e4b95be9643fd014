// What the hg-bench-* programs share: their common options, the interleaved timer and the
// median. Each benchmark is one .cpp that prints JSON lines; this header keeps them timing
// alike.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace hg::bench {

struct Options {
  int threads = 2;
  int reps = 10;
  int warmup = 3;
  std::string only = "all";
};

// --threads, --reps, --warmup and --only (one of "all" and `sections`) on app.
inline void add_common_options(CLI::App& app, Options& options,
                               const std::vector<std::string>& sections) {
  std::vector<std::string> names = {"all"};
  names.insert(names.end(), sections.begin(), sections.end());
  app.add_option("--threads", options.threads, "OpenMP threads")->check(CLI::PositiveNumber);
  app.add_option("--reps", options.reps, "timed calls per measurement (the median is kept)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "untimed calls before timing")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--only", options.only, "the section to run")->check(CLI::IsMember(names));
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

}  // namespace hg::bench
