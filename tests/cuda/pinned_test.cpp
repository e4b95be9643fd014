// Pinned (page-locked) host memory on a CUDA device: pin_memory() and the factories'
// pin_memory option, copies from pinned memory with non_blocking (cudaMemcpyAsync on the
// current stream), the caching host allocator's rule that a block a pending copy reads is not
// handed out again (NOTE [Pinned host memory]), and DataLoader's pin_memory.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

namespace {

// Holds the current stream of kGpu behind a host function until open() (or, so that a
// mistake cannot hang the test, until 20 seconds passed): work enqueued after it is pending
// for certain while the gate is closed.
class StreamGate {
 public:
  StreamGate() {
    REQUIRE(cudaLaunchHostFunc(cuda::current_stream(kGpu.index), &StreamGate::wait, this) ==
            cudaSuccess);
  }
  ~StreamGate() { open(); }
  void open() { open_.store(true); }

 private:
  static void wait(void* self) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!static_cast<StreamGate*>(self)->open_.load() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::atomic<bool> open_{false};
};

}  // namespace

TEST_CASE("pinned tensors report is_pinned and keep their values", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = randn({5, 7});
  const Tensor p = x.pin_memory();
  CHECK(p.is_pinned());
  CHECK_FALSE(x.is_pinned());
  CHECK(p.is_cpu());
  CHECK(p.to_vector<float>() == x.to_vector<float>());
  CHECK(p.pin_memory().is_same(p));      // already pinned: returned as is
  CHECK(p.transpose(0, 1).is_pinned());  // views share the pinned storage
  // A non-contiguous source is pinned as a contiguous copy of its values.
  const Tensor pt = x.transpose(0, 1).pin_memory();
  CHECK(pt.is_pinned());
  CHECK(pt.to_vector<float>() == x.transpose(0, 1).contiguous().to_vector<float>());
  // Factories: empty and zeros take the option; results of ops and *_like are pageable.
  const Tensor z = zeros({3, 4}, {.dtype = kFloat16, .pin_memory = true});
  CHECK(z.is_pinned());
  CHECK(z.to_vector<float>() == std::vector<float>(12, 0.0f));
  CHECK(empty({0}, {.pin_memory = true}).is_pinned());
  CHECK_FALSE(empty_like(p).is_pinned());
  CHECK_FALSE(add(p, p).is_pinned());
  CHECK_THROWS_WITH(to_cuda(x).pin_memory(), Catch::Contains("expected a CPU tensor"));
}

TEST_CASE("a non_blocking copy from pinned memory is right after synchronize", "[cuda]") {
  HG_REQUIRE_CUDA();
  // A small copy (direct) and one above the staging threshold (1 MiB), with and without
  // non_blocking, each against the pageable copy of the same values.
  for (int64_t numel : {int64_t(1000), int64_t(3) << 20}) {
    const Tensor x = randn({numel});
    const Tensor p = x.pin_memory();
    const Tensor async = p.to(kGpu, /*non_blocking=*/true);
    const Tensor blocking = p.to(kGpu);
    cuda::synchronize();
    CHECK(values_of(async) == values_of(x));
    CHECK(values_of(blocking) == values_of(x));
  }
}

TEST_CASE("a blocking copy from pinned memory may be followed by writes to it", "[cuda]") {
  HG_REQUIRE_CUDA();
  // Without non_blocking the copy must not read the pinned source after to() returns: with
  // the stream held, the source is overwritten before the copy can run.
  const Tensor x = randn({4096});
  Tensor p = x.pin_memory();
  Tensor y;
  {
    StreamGate gate;
    y = p.to(kGpu);
    p.fill_(-7.0);
  }
  cuda::synchronize();
  CHECK(values_of(y) == values_of(x));
}

TEST_CASE("a pinned block is not reused while a copy from it is pending", "[cuda]") {
  HG_REQUIRE_CUDA();
  constexpr int64_t kNumel = 1234567;  // 4.9 MB: a size class no other test uses
  const Tensor x = randn({kNumel});
  Tensor source = x.pin_memory();
  const void* first_block = source.data_ptr();
  (void)empty({kNumel}, {.pin_memory = true});  // a second block of the class, freed: cached
  Tensor y;
  {
    StreamGate gate;  // the copy below stays pending until the gate opens
    y = source.to(kGpu, /*non_blocking=*/true);
    source = Tensor();  // the source is gone, its copy has not run
    Tensor reused = empty({kNumel}, {.pin_memory = true});
    CHECK(reused.data_ptr() != first_block);
    reused.fill_(-1.0);
    gate.open();
    cuda::synchronize();
  }
  CHECK(values_of(y) == values_of(x));
  // Once the copy ran, its block is cached again: two requests get both blocks back.
  const Tensor a = empty({kNumel}, {.pin_memory = true});
  const Tensor b = empty({kNumel}, {.pin_memory = true});
  CHECK((a.data_ptr() == first_block || b.data_ptr() == first_block));
  cuda::host_empty_cache();
}

TEST_CASE("DataLoader with pin_memory yields pinned batches", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = randn({10, 3});
  const Tensor labels = arange(10, kInt64);
  auto dataset = std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, labels});
  for (int workers : {0, 2}) {
    data::DataLoader loader(dataset, {.batch_size = 4, .num_workers = workers, .pin_memory = true});
    int64_t first = 0;
    for (const data::Batch& batch : loader) {
      CHECK(batch[0].is_pinned());
      CHECK(batch[1].is_pinned());
      const Tensor on_gpu = batch[0].to(kGpu, /*non_blocking=*/true);
      cuda::synchronize();
      const int64_t rows = batch[0].size(0);
      CHECK(values_of(on_gpu) == values_of(x.narrow(0, first, rows)));
      CHECK(host(batch[1].to(kGpu, true)).to_vector<int64_t>() ==
            labels.narrow(0, first, rows).to_vector<int64_t>());
      first += rows;
    }
    CHECK(first == 10);
  }
}
