// profiler::Profile on the GPU: CUDA ops get device times from events read once at stop (checked
// against an event pair of the test's own around the same work), with no host wait per op.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

TEST_CASE("CUDA ops get device times from events without a host wait per op", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor a = randn({2048, 2048}).to(kGpu);
  const Tensor b = randn({2048, 2048}).to(kGpu);
  matmul(a, b);  // the GEMM library's first-call setup, outside what is measured
  cuda::synchronize();

  // The reference: the same matmuls timed by an event pair around all of them.
  constexpr int kCalls = 8;
  cuda::Event before, after;
  before.record();
  for (int i = 0; i < kCalls; ++i) matmul(a, b);
  after.record();
  after.synchronize();
  const double reference_ns = double(before.elapsed_ms(after)) * 1e6;

  profiler::Profile prof;
  for (int i = 0; i < kCalls; ++i) matmul(a, b);
  prof.stop();

  const std::vector<profiler::Event>& events = prof.events();
  double device_ns = 0.0, host_ns = 0.0;
  for (const profiler::Event& e : events) {
    CHECK(e.device == kGpu);
    CHECK(e.cuda_start_ns >= 0);
    CHECK(e.cuda_ns > 0);
    if (e.depth == 0) {
      device_ns += double(e.cuda_ns);
      host_ns += double(e.cpu_ns);
    }
    if (e.parent >= 0) {  // a child's device interval lies inside its parent's
      const profiler::Event& parent = events[size_t(e.parent)];
      CHECK(e.cuda_ns <= parent.cuda_ns);
    }
  }
  // The device time of the 8 GEMMs is the reference's (its gaps between GEMMs aside).
  CHECK(device_ns <= reference_ns * 1.05);
  CHECK(device_ns >= reference_ns * 0.5);
  // The host only enqueued them: had it waited per op, its time would cover the device's.
  CHECK(host_ns < device_ns);

  for (const profiler::KeyAverage& avg : prof.key_averages()) {
    CHECK(avg.self_cuda_time_total <= avg.cuda_time_total + 1e-9);
  }
  CHECK_THAT(prof.table(), Contains("Self CUDA time total: ") && Contains("CUDA total"));
  // The device track holds one event per op.
  const nlohmann::json trace = nlohmann::json::parse(prof.chrome_trace());
  size_t on_device = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) on_device += e.value("cat", "") == "cuda_op";
  CHECK(on_device == events.size());
}
