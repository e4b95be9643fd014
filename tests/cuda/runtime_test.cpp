// The CUDA runtime: moves between the CPU and the GPU for every dtype, item(), fill_, the
// caching allocator's reuse and counters, events, graphs (capture, replay, and the refusal of a
// host wait inside a capture), printing, and Module::to(kCUDA).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <array>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

constexpr std::array<DType, 10> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64,
                                        kInt32,   kBool,    kUInt8,    kInt8,    kInt16};

// A CPU tensor of `dtype` with varied, nonzero values (bools alternate).
Tensor varied(const Shape& sizes, DType dtype) {
  const Tensor values = arange(double(shape_numel(sizes))).reshape(sizes) * 0.37 - 5.5;
  if (dtype == kBool) return gt(values, 0.0);
  if (!is_floating_point(dtype)) return (values * 7.0).to(kInt64).to(dtype);
  return values.to(dtype);
}

}  // namespace

TEST_CASE("without a device the CUDA API answers clearly", "[cuda-runtime]") {
  if (cuda::is_available()) return;
  CHECK(cuda::device_count() == 0);
  CHECK(!cuda::describe().empty());
  CHECK_FALSE(cuda::is_bf16_supported());  // torch answers False without a device too
  CHECK_THROWS_AS(cuda::synchronize(), Error);
  CHECK_THROWS_AS(cuda::memory_allocated(), Error);
  cuda::empty_cache();  // nothing cached: a no-op, as in torch
}

TEST_CASE("is_bf16_supported follows the device's compute capability", "[cuda]") {
  HG_REQUIRE_CUDA();
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                 cuda::current_device()) == cudaSuccess);
  CHECK(cuda::is_bf16_supported() == (major >= 8));
}

TEST_CASE("tensors of every dtype go to the GPU and back bit for bit", "[cuda]") {
  HG_REQUIRE_CUDA();
  for (DType dtype : kAll) {
    CAPTURE(dtype_name(dtype));
    for (const Shape& sizes : {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{600, 1000}}) {
      const Tensor x = varied(sizes, dtype);
      const Tensor on_gpu = x.to(kCUDA);
      CHECK(on_gpu.is_cuda());
      CHECK(on_gpu.dtype() == dtype);
      CHECK(testing::bit_identical(on_gpu.to(Device(kCPU)), x));
    }
  }
}

TEST_CASE("non-contiguous tensors move as their values", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = varied({6, 8}, kFloat32);
  const Tensor t = x.transpose(0, 1);
  CHECK(testing::bit_identical(t.to(kCUDA).to(Device(kCPU)), t.contiguous()));
  const Tensor g = x.to(kCUDA).transpose(0, 1);  // strided on the GPU
  CHECK(testing::bit_identical(g.to(Device(kCPU)), t.contiguous()));
  CHECK(testing::bit_identical(g.contiguous().to(Device(kCPU)), t.contiguous()));
}

TEST_CASE("copy_ across devices converts dtype and broadcasts", "[cuda]") {
  HG_REQUIRE_CUDA();
  Tensor dst = zeros({4, 3}, {.dtype = kFloat16, .device = kCUDA});
  const Tensor row = tensor({1.5, -2.25, 3.0});  // float32 on the CPU
  dst.copy_(row);
  const Tensor want = row.expand({4, 3}).to(kFloat16);
  CHECK(testing::bit_identical(dst.to(Device(kCPU)), want.contiguous()));
  Tensor back = zeros({4, 3}, kFloat64);
  back.copy_(dst);  // GPU -> CPU, float16 -> float64
  CHECK(testing::bit_identical(back, want.to(kFloat64)));
}

TEST_CASE("item, fill_ and zeros on the GPU", "[cuda]") {
  HG_REQUIRE_CUDA();
  Tensor x = empty({5, 5}, {.dtype = kBFloat16, .device = kCUDA});
  x.fill_(2.5);
  CHECK(hg::sum(x).item<float>() == Approx(62.5));
  CHECK(full({}, 7, {.dtype = kInt32, .device = kCUDA}).item<int32_t>() == 7);
  CHECK(zeros({3}, {.device = kCUDA}).to(Device(kCPU)).to_vector<float>() ==
        std::vector<float>{0, 0, 0});
  CHECK_THROWS_WITH(zeros({2}, {.device = kCUDA}).item<float>(), Contains("one element"));
}

TEST_CASE("the caching allocator reuses blocks and counts them", "[cuda]") {
  HG_REQUIRE_CUDA();
  cuda::synchronize();
  const int64_t before = cuda::memory_allocated();
  const void* first = nullptr;
  {
    Tensor a = empty({1 << 20}, {.device = kCUDA});  // 4 MiB
    first = a.data_ptr();
    CHECK(cuda::memory_allocated() == before + (int64_t(4) << 20));
    CHECK(cuda::max_memory_allocated() >= before + (int64_t(4) << 20));
  }
  CHECK(cuda::memory_allocated() == before);
  CHECK(cuda::memory_reserved() >= (int64_t(4) << 20));
  Tensor b = empty({1 << 20}, {.device = kCUDA});
  CHECK(b.data_ptr() == first);  // the same block, no cudaMalloc
  // Sizes are rounded: 512 bytes below 1 MiB.
  Tensor small = empty({3}, {.device = kCUDA});
  CHECK(cuda::memory_allocated() == before + (int64_t(4) << 20) + 512);
  cuda::reset_peak_memory_stats();
  CHECK(cuda::max_memory_allocated() == cuda::memory_allocated());
  b = Tensor();
  small = Tensor();
  cuda::empty_cache();
  CHECK(cuda::memory_allocated() == before);
}

TEST_CASE("poisoned allocations start as all-ones bytes", "[cuda]") {
  HG_REQUIRE_CUDA();
  testing::PoisonCudaAllocations poison;
  const Tensor x = empty({64}, {.device = kCUDA});
  for (float v : x.to(Device(kCPU)).to_vector<float>()) CHECK(std::isnan(v));
  const Tensor i = empty({4}, {.dtype = kInt64, .device = kCUDA});
  CHECK(i.to(Device(kCPU)).to_vector<int64_t>() == std::vector<int64_t>(4, -1));
}

TEST_CASE("an out-of-memory request is an hg::Error naming the sizes", "[cuda]") {
  HG_REQUIRE_CUDA();
  CHECK_THROWS_WITH(empty({int64_t(1) << 50}, {.dtype = kFloat32, .device = kCUDA}),
                    Contains("CUDA out of memory"));
}

TEST_CASE("events time work on the current stream", "[cuda]") {
  HG_REQUIRE_CUDA();
  cuda::Event start, end;
  Tensor x = randn({1024, 1024}, {.device = kCUDA});
  start.record();
  for (int i = 0; i < 10; ++i) x = x * 1.0001;
  end.record();
  end.synchronize();
  CHECK(end.query());
  CHECK(start.elapsed_ms(end) >= 0.0f);
}

TEST_CASE("a captured graph replays its work, in place", "[cuda]") {
  HG_REQUIRE_CUDA();
  Tensor x = full({256}, 1.0, {.device = kCUDA});
  Tensor y = zeros({256}, {.device = kCUDA});
  y.add_(x);  // warm-up outside the capture
  cuda::Graph graph;
  graph.capture_begin();
  y.add_(x * 2.0);
  graph.capture_end();
  // Capturing ran nothing: y is still 1.
  CHECK(hg::sum(y).item<float>() == Approx(256.0));
  graph.replay();
  graph.replay();
  CHECK(hg::sum(y).item<float>() == Approx(256.0 * 5));
  x.fill_(-1.0);  // the graph reads x's memory as it is at replay
  graph.replay();
  CHECK(hg::sum(y).item<float>() == Approx(256.0 * 3));
}

TEST_CASE("a host wait inside a capture fails the capture with a clear error", "[cuda]") {
  HG_REQUIRE_CUDA();
  Tensor x = full({16}, 1.0, {.device = kCUDA});
  cuda::Graph graph;
  graph.capture_begin();
  Tensor s = hg::sum(x);
  CHECK_THROWS_WITH(s.item<float>(), Contains("captured"));
  CHECK_THROWS_AS(graph.capture_end(), Error);
}

TEST_CASE("printing a GPU tensor shows its values and device", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = tensor({1.0, 2.0, 3.5}).to(kCUDA);
  const std::string text = fmt::format("{}", x);
  CHECK_THAT(text, Contains("3.5") && Contains("device=cuda:0"));
}

TEST_CASE("Module::to(kCUDA) moves every parameter and buffer, integer ones too", "[cuda]") {
  HG_REQUIRE_CUDA();
  nn::BatchNorm2d bn(3);
  const Tensor weight = bn.weight;
  bn.to(Device(kCUDA));
  for (const auto& [name, t] : bn.named_parameters()) CHECK(t.is_cuda());
  for (const auto& [name, t] : bn.named_buffers()) {
    CAPTURE(name);
    CHECK(t.is_cuda());
  }
  CHECK(weight.is_cuda());  // the same parameter tensor, now on the GPU
}
