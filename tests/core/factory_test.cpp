// Factories (zeros, ones, full, arange, linspace, eye, tensor, from_blob, rand/randn), the CPU
// allocator's alignment, size classes and cache, and the thread count.
#include <catch2/catch.hpp>

#include <cmath>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

TEST_CASE("zeros ones full and empty make contiguous tensors of the asked dtype", "[factory]") {
  CHECK(zeros({2, 3}).dtype() == kFloat32);
  CHECK(zeros({2, 3}, kBFloat16).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({4}, {.dtype = kFloat16}).to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(ones({2}, kBool).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(empty({3, 0}).numel() == 0);
  CHECK(empty({2, 3}).is_contiguous());
  // full infers the dtype from the value, as torch.full does.
  CHECK(full({2}, 1.5).dtype() == kFloat32);
  CHECK(full({2}, 7).dtype() == kInt64);
  CHECK(full({2}, true).dtype() == kBool);
  CHECK(full({2}, 0.1, kFloat16).to_vector<Half>()[0].bits == Half(0.1).bits);
  CHECK(full({2}, int64_t(1) << 62).to_vector<int64_t>()[1] == int64_t(1) << 62);
  CHECK(full_like(ones({2, 2}, kFloat16), 3).dtype() == kFloat16);
  CHECK(zeros_like(ones({3}, kInt32)).to_vector<int32_t>() == std::vector<int32_t>{0, 0, 0});
  CHECK(scalar_tensor(4).dim() == 0);
  CHECK_THROWS_WITH(zeros({2, -1}), Contains("expected sizes >= 0, got -1"));
}

TEST_CASE("arange counts like Python's range", "[factory]") {
  CHECK(arange(5).dtype() == kInt64);
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1, 10, 3).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 7});
  CHECK(arange(10, 1, -3).to_vector<int64_t>() == std::vector<int64_t>{10, 7, 4});
  CHECK(arange(3, 3).numel() == 0);
  CHECK(arange(0.0, 1.0, 0.25).dtype() == kFloat32);
  CHECK(arange(0.0, 1.0, 0.25).to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(arange(0.0, 1.0, 0.3).numel() == 4);  // ceil(1 / 0.3)
  CHECK(arange(4, kFloat16).dtype() == kFloat16);
  CHECK_THROWS_WITH(arange(0, 5, 0), Contains("expected a nonzero step"));
  CHECK_THROWS_WITH(arange(5, 0, 1), Contains("a step of 1 never goes from 5 to 0"));
  CHECK_THROWS_WITH(arange(0.0, INFINITY), Contains("expected finite"));
}

TEST_CASE("linspace hits both ends exactly", "[factory]") {
  const std::vector<double> v = linspace(-1.0, 1.0, 5, {.dtype = kFloat64}).to_vector<double>();
  CHECK(v == std::vector<double>{-1.0, -0.5, 0.0, 0.5, 1.0});
  const std::vector<float> w = linspace(0.0, 0.3, 7).to_vector<float>();
  CHECK(w.front() == 0.0f);
  CHECK(w.back() == 0.3f);
  for (size_t i = 0; i < w.size(); ++i) CHECK(w[i] == Approx(0.05 * double(i)).epsilon(1e-6));
  CHECK(linspace(2.0, 3.0, 1).to_vector<float>() == std::vector<float>{2.0f});
  CHECK(linspace(2.0, 3.0, 0).numel() == 0);
  CHECK_THROWS_WITH(linspace(0, 1, -1), Contains("expected steps >= 0, got -1"));
}

TEST_CASE("eye puts ones on the main diagonal", "[factory]") {
  const std::vector<float> square = eye(3).to_vector<float>();
  CHECK(square == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(eye(2, 3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0});
  CHECK(eye(3, 2, {.dtype = kInt32}).to_vector<int32_t>() ==
        std::vector<int32_t>{1, 0, 0, 1, 0, 0});
  CHECK(eye(0).numel() == 0);
}

TEST_CASE("tensor copies values and rounds them once to the dtype", "[factory]") {
  CHECK(tensor({1.0, 2.0}).dtype() == kFloat32);
  CHECK(tensor(std::vector<int64_t>{1, 2}).dtype() == kInt64);
  CHECK(tensor(std::vector<int32_t>{1, 2}).dtype() == kInt32);
  CHECK(tensor(std::vector<bool>{true, false}).to_vector<bool>() == std::vector<bool>{true, false});
  Tensor shaped = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat16);
  CHECK(shaped.sizes() == Shape{2, 3});
  CHECK(shaped.dtype() == kFloat16);
  // 0.1 as float16 straight from double (0x2E66), not via float.
  CHECK(tensor({0.1}, kFloat16).to_vector<Half>()[0].bits == 0x2E66);
  CHECK_THROWS_WITH(tensor({1.0, 2.0, 3.0}, {2, 2}),
                    Contains("3 values cannot fill shape [2, 2] (4 elements)"));
}

TEST_CASE("from_blob wraps user memory without copying", "[factory]") {
  std::vector<float> memory = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(memory.data(), {2, 3}, kFloat32);
  t.select(0, 1).fill_(0);
  CHECK(memory == std::vector<float>{1, 2, 3, 0, 0, 0});
  Tensor column = from_blob(memory.data(), {2}, kFloat32, Shape{3});
  CHECK(column.to_vector<float>() == std::vector<float>{1, 0});

  int released = 0;
  {
    auto* owned = new double[4]{1, 2, 3, 4};
    Tensor wrapped = from_blob(owned, {4}, kFloat64, std::nullopt, [&released](void* p) {
      delete[] static_cast<double*>(p);
      ++released;
    });
    Tensor view = wrapped.narrow(0, 1, 2);
    wrapped = Tensor();
    CHECK(released == 0);  // the view still holds the storage
    CHECK(view.to_vector<double>() == std::vector<double>{2, 3});
  }
  CHECK(released == 1);
  CHECK_THROWS_WITH(from_blob(nullptr, {2}, kFloat32), Contains("expected a non-null pointer"));
}

TEST_CASE("rand and randn draw reproducibly from the seeded generator", "[factory][random]") {
  manual_seed(123);
  Tensor a = randn({1000});
  Tensor u = rand({1000}, kBFloat16);
  manual_seed(123);
  CHECK(randn({1000}).to_vector<float>() == a.to_vector<float>());
  const std::vector<float> uniform = u.to_vector<float>();
  CHECK(rand({1000}, kBFloat16).to_vector<float>() == uniform);
  for (float value : uniform) REQUIRE((value >= 0.0f && value < 1.0f));
  Generator own(5);
  Generator again(5);
  CHECK(rand({16}, {}, &own).to_vector<float>() == rand({16}, {}, &again).to_vector<float>());
  CHECK_THROWS_WITH(rand({2}, kInt64), Contains("rand: expected a floating dtype, got int64"));
}

TEST_CASE("the CPU allocator aligns to 64 bytes and counts live storage", "[factory][storage]") {
  const AllocatorStats before = cpu_allocator_stats();
  {
    Tensor a = empty({3}, kBFloat16);
    Tensor b = empty({1000}, kFloat64);
    CHECK(reinterpret_cast<uintptr_t>(a.data_ptr()) % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>(b.data_ptr()) % 64 == 0);
    CHECK(cpu_allocator_stats().live_allocations == before.live_allocations + 2);
    CHECK(cpu_allocator_stats().live_bytes >= before.live_bytes + 8000);
  }
  CHECK(cpu_allocator_stats().live_allocations == before.live_allocations);
  CHECK(cpu_allocator_stats().live_bytes == before.live_bytes);
}

TEST_CASE("the CPU allocator's size classes round up by at most a quarter", "[storage]") {
  size_t previous = 0;
  for (size_t n = 0; n <= 3 * kMaxCachedBlock; n += (n < 4096 ? 1 : 4093)) {
    const size_t size = cpu_allocation_size(n);
    CHECK(size >= std::max<size_t>(n, 1));
    CHECK(size % kCpuAlignment == 0);
    CHECK(size >= previous);  // monotonic
    if (n <= 512) CHECK(size == std::max<size_t>(64, (n + 63) / 64 * 64));
    if (n > 512 && n <= kMaxCachedBlock) CHECK(4 * size <= 5 * n);
    if (n > kMaxCachedBlock) CHECK(size == (n + 63) / 64 * 64);
    previous = size;
  }
  CHECK(cpu_allocation_size(kMaxCachedBlock) == kMaxCachedBlock);
}

TEST_CASE("the CPU allocator reuses freed blocks and bounds its cache", "[storage]") {
  cpu_empty_cache();
  const AllocatorStats start = cpu_allocator_stats();
  CHECK(start.cached_bytes == 0);
  CHECK(start.cached_blocks == 0);
  void* first = nullptr;
  {
    Tensor a = empty({1000}, kFloat32);
    first = a.data_ptr();
    CHECK(cpu_allocator_stats().live_bytes ==
          start.live_bytes + int64_t(cpu_allocation_size(4000)));
  }
  const AllocatorStats freed = cpu_allocator_stats();
  CHECK(freed.live_bytes == start.live_bytes);
  CHECK(freed.live_allocations == start.live_allocations);
  CHECK(freed.cached_bytes == int64_t(cpu_allocation_size(4000)));
  CHECK(freed.cached_blocks == 1);
  {
    Tensor b = empty({990}, kFloat32);  // the same size class: the same block again
    CHECK(b.data_ptr() == first);
    CHECK(cpu_allocator_stats().cached_bytes == 0);
  }
  CHECK(cpu_allocator_stats().cached_bytes == int64_t(cpu_allocation_size(4000)));  // b's block
  cpu_empty_cache();
  {
    // Blocks of the largest class fill the cache up to its bound; the rest go back.
    std::vector<Tensor> blocks;
    const int64_t count = int64_t(kMaxCachedBytes / kMaxCachedBlock) + 8;
    for (int64_t i = 0; i < count; ++i) blocks.push_back(empty({int64_t(kMaxCachedBlock)}, kBool));
    blocks.clear();
    CHECK(cpu_allocator_stats().cached_bytes == int64_t(kMaxCachedBytes));
    CHECK(cpu_allocator_stats().live_bytes == start.live_bytes);
  }
  cpu_empty_cache();
  {
    // A block above the largest class is kept by its exact size and handed out again only for
    // that size; they fill their own bound, kMaxCachedLargeBytes.
    const size_t large = kMaxCachedBlock + 4096;
    Tensor big = empty({int64_t(large)}, kBool);
    void* block = big.data_ptr();
    big = Tensor();
    CHECK(cpu_allocator_stats().cached_bytes == int64_t(large));
    Tensor other = empty({int64_t(large) + 64}, kBool);  // another size: a new block
    CHECK(other.data_ptr() != block);
    Tensor same = empty({int64_t(large) - 10}, kBool);  // the same 64-byte rounded size
    CHECK(same.data_ptr() == block);
    CHECK(cpu_allocator_stats().cached_bytes == 0);
    same = Tensor();
    other = Tensor();
    CHECK(cpu_allocator_stats().cached_blocks == 2);
    std::vector<Tensor> blocks;
    const int64_t count = int64_t(kMaxCachedLargeBytes / (4 * kMaxCachedBlock)) + 4;
    for (int64_t i = 0; i < count; ++i) {
      blocks.push_back(empty({int64_t(4 * kMaxCachedBlock)}, kBool));
    }
    blocks.clear();
    CHECK(cpu_allocator_stats().cached_bytes <= int64_t(kMaxCachedLargeBytes));
    CHECK(cpu_allocator_stats().cached_bytes >=
          int64_t(kMaxCachedLargeBytes - 4 * kMaxCachedBlock));
    CHECK(cpu_allocator_stats().live_bytes == start.live_bytes);
    // Each bound is its own: with more large bytes cached than kMaxCachedBytes, a small block
    // is still kept, and served again without the system.
    REQUIRE(cpu_allocator_stats().cached_bytes > int64_t(kMaxCachedBytes));
    { Tensor small = empty({1000}, kFloat32); }
    const AllocatorStats before_small = cpu_allocator_stats();
    { Tensor small = empty({1000}, kFloat32); }
    CHECK(cpu_allocator_stats().system_allocations == before_small.system_allocations);
    CHECK(cpu_allocator_stats().total_allocations == before_small.total_allocations + 1);
  }
  cpu_empty_cache();
  CHECK(cpu_allocator_stats().cached_bytes == 0);
  CHECK(cpu_allocator_stats().cached_blocks == 0);
}

TEST_CASE("set_num_threads sets the CPU thread count", "[parallel]") {
  const int before = get_num_threads();
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  // Results do not depend on the thread count (each element is a pure function).
  manual_seed(9);
  const std::vector<float> one = randn({100000}).to_vector<float>();
  set_num_threads(2);
  CHECK(get_num_threads() == 2);
  manual_seed(9);
  CHECK(randn({100000}).to_vector<float>() == one);
  CHECK_THROWS_WITH(set_num_threads(0), Contains("expected at least 1 thread, got 0"));
  set_num_threads(before);
}
