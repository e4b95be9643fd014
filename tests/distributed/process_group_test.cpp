// hg::distributed on MPI, run by ctest under mpirun -np 2: every collective on every dtype
// against a reference each rank computes itself from every rank's inputs (generated from
// rank-seeded generators), async handles, the checks of bad input, and (the hidden [timeout]
// case, a ctest entry of its own) a collective that a rank never joins.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/distributed/process_group.h"

#include "test_group.h"

using namespace hg;
using namespace hg::distributed;
using Catch::Contains;
using Values = std::vector<double>;

namespace {

const std::vector<DType> kEveryDType = {kFloat32, kFloat16, kBFloat16,      kFloat64,
                                        kInt64,   kInt32,   DType::Bool,    kUInt8,
                                        kInt8,    kInt16,   kFloat8_e4m3fn, DType::Float8_e5m2};

using distributed_test::group;

Tensor make(const Values& values, DType dtype) { return tensor(values, dtype); }

Values read(const Tensor& tensor) {
  const Tensor wide = tensor.to(kFloat64).contiguous();
  const auto* data = wide.data_ptr<double>();
  return Values(data, data + wide.numel());
}

// Rank `rank`'s input of `n` elements for the collective numbered `salt`: values `dtype`
// holds exactly, so every rank knows every rank's input.
Values input_of(int rank, DType dtype, int64_t n, int salt) {
  std::mt19937_64 generator(uint64_t(1000003) * uint64_t(rank + 1) + uint64_t(salt) * 7919 +
                            uint64_t(int(dtype)));
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  std::uniform_int_distribution<int> integer(dtype == kUInt8 ? 0 : -50, 50);
  std::uniform_int_distribution<int> bit(0, 1);
  Values values(static_cast<size_t>(n));
  for (double& v : values) {
    if (dtype == DType::Bool) {
      v = bit(generator);
    } else if (is_floating_point(dtype)) {
      v = real(generator);
    } else {
      v = integer(generator);
    }
  }
  return read(make(values, dtype));  // rounded to what the dtype holds
}

// Every rank's input for collective `salt`, rank 0's first: what all_gather gathers.
Values every_input(int world, DType dtype, int64_t n, int salt) {
  Values all;
  for (int r = 0; r < world; ++r) {
    const Values block = input_of(r, dtype, n, salt);
    all.insert(all.end(), block.begin(), block.end());
  }
  return all;
}

// The largest error a reduction of `magnitude` (the sum of the inputs' magnitudes) may carry in
// `dtype`: one rounding of the result into the dtype (a 16-bit or 8-bit one reduced in float32
// may land one ulp off the float64 result rounded once: float32's own error can move it across
// a rounding boundary), or the dtype's own per-addition error for float32 and float64.
double tolerance(DType dtype, double result, double magnitude, int world) {
  const double size = std::abs(result);
  const double float32_path = magnitude * 1e-6;
  switch (dtype) {
    case kFloat16:
      return size * std::ldexp(1.0, -10) + std::ldexp(1.0, -24) + float32_path;
    case kBFloat16:
      return size * std::ldexp(1.0, -7) + float32_path;
    case kFloat8_e4m3fn:
      return size * std::ldexp(1.0, -3) + std::ldexp(1.0, -9) + float32_path;
    case DType::Float8_e5m2:
      return size * std::ldexp(1.0, -2) + std::ldexp(1.0, -16) + float32_path;
    case kFloat32:
      return magnitude * (world + 1) * std::ldexp(1.0, -24);
    case kFloat64:
      return magnitude * (world + 1) * std::ldexp(1.0, -53);
    default:
      return 0.0;  // integers and bools: exact
  }
}

// The reduction over ranks of element i of every rank's `inputs`, in float64, rounded once to
// `dtype` (bools: or), with the sum of magnitudes the error bound scales with.
struct Reference {
  Values values;
  Values magnitudes;
};

Reference reduce_reference(const std::vector<Values>& inputs, ReduceOp op, DType dtype) {
  const size_t n = inputs[0].size();
  const int world = int(inputs.size());
  Values result(n), magnitude(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double sum = 0.0, max = -INFINITY;
    for (const Values& in : inputs) {
      sum += in[i];
      max = std::max(max, in[i]);
      magnitude[i] += std::abs(in[i]);
    }
    if (dtype == DType::Bool) {
      result[i] = sum > 0 ? 1.0 : 0.0;
    } else if (op == ReduceOp::Max) {
      result[i] = max;
    } else {
      result[i] = op == ReduceOp::Avg ? sum / world : sum;
    }
  }
  return {read(make(result, dtype)), magnitude};
}

void check_reduced(const Values& got, const Reference& reference, DType dtype, int world) {
  REQUIRE(got.size() == reference.values.size());
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = tolerance(dtype, reference.values[i], reference.magnitudes[i], world);
    if (!(std::abs(got[i] - reference.values[i]) <= bound)) {
      if (++wrong <= 3) {
        UNSCOPED_INFO("element " << i << ": got " << got[i] << ", expected " << reference.values[i]
                                 << " within " << bound);
      }
    }
  }
  CHECK(wrong == 0);
}

std::vector<ReduceOp> ops_for(DType dtype) {
  if (is_floating_point(dtype)) return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};
  return {ReduceOp::Sum, ReduceOp::Max};
}

}  // namespace

TEST_CASE("init_process_group reads mpirun's environment", "[distributed]") {
  const LaunchEnvironment env = read_launch_environment();
  CHECK(env.launcher == "mpirun");
  CHECK(group().rank() == env.rank);
  CHECK(group().world_size() == env.world_size);
  CHECK(group().local_rank() == env.local_rank);
  CHECK(group().world_size() >= 2);
  CHECK(group().backend() == Backend::Mpi);
  CHECK(is_initialized());
  CHECK(&default_process_group() == &group());
}

TEST_CASE("read_launch_environment reads torchrun's variables and rejects bad ones",
          "[distributed]") {
  // mpirun's variables win, so they are hidden while torchrun's are set, then put back.
  const char* ompi_size_text = std::getenv("OMPI_COMM_WORLD_SIZE");
  REQUIRE(ompi_size_text != nullptr);
  const std::string ompi_size = ompi_size_text;
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::setenv("RANK", "3", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("MASTER_ADDR", "node-0", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  const LaunchEnvironment env = read_launch_environment();
  CHECK(env.launcher == "torchrun");
  CHECK(env.rank == 3);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 1);
  CHECK(env.master_addr == "node-0");
  CHECK(env.master_port == 29500);
  ::setenv("RANK", "4", 1);
  CHECK_THROWS_WITH(read_launch_environment(),
                    Contains("expected a rank below the world size 4 (torchrun), got rank 4"));
  ::setenv("WORLD_SIZE", "four", 1);
  CHECK_THROWS_WITH(read_launch_environment(),
                    Contains("expected a non-negative integer in WORLD_SIZE, got 'four'"));
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    ::unsetenv(name);
  }
  ::setenv("OMPI_COMM_WORLD_SIZE", ompi_size.c_str(), 1);
  CHECK(read_launch_environment().launcher == "mpirun");
}

TEST_CASE("all_reduce sum avg and max on every dtype match the float64 reference",
          "[distributed]") {
  ProcessGroup& pg = group();
  const int world = pg.world_size();
  const int64_t n = 257;
  int salt = 0;
  for (DType dtype : kEveryDType) {
    for (ReduceOp op : ops_for(dtype)) {
      INFO("dtype " << dtype_name(dtype) << " op " << reduce_op_name(op));
      ++salt;
      std::vector<Values> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(input_of(r, dtype, n, salt));
      Tensor mine = make(inputs[size_t(pg.rank())], dtype);
      const void* storage = mine.data_ptr();
      pg.all_reduce(mine, op)->wait();
      CHECK(mine.data_ptr() == storage);  // in place
      check_reduced(read(mine), reduce_reference(inputs, op, dtype), dtype, world);
    }
  }
}

TEST_CASE("reduce_scatter on every dtype gives each rank its block's reduction", "[distributed]") {
  ProcessGroup& pg = group();
  const int world = pg.world_size();
  const int64_t block = 33;
  int salt = 100;
  for (DType dtype : kEveryDType) {
    for (ReduceOp op : ops_for(dtype)) {
      INFO("dtype " << dtype_name(dtype) << " op " << reduce_op_name(op));
      ++salt;
      std::vector<Values> inputs, my_blocks;
      for (int r = 0; r < world; ++r) {
        inputs.push_back(input_of(r, dtype, block * world, salt));
        const auto first = inputs.back().begin() + block * pg.rank();
        my_blocks.emplace_back(first, first + block);
      }
      const Tensor input = make(inputs[size_t(pg.rank())], dtype);
      const Values input_before = read(input);
      Tensor output = make(Values(size_t(block), 0.0), dtype);
      pg.reduce_scatter(output, input, op)->wait();
      check_reduced(read(output), reduce_reference(my_blocks, op, dtype), dtype, world);
      CHECK(read(input) == input_before);
    }
  }
}

TEST_CASE("broadcast and all_gather move every dtype's bits unchanged", "[distributed]") {
  ProcessGroup& pg = group();
  const int world = pg.world_size();
  const int64_t n = 65;
  int salt = 200;
  for (DType dtype : kEveryDType) {
    INFO("dtype " << dtype_name(dtype));
    for (int src : {0, world - 1}) {
      ++salt;
      Tensor mine = make(input_of(pg.rank(), dtype, n, salt), dtype);
      pg.broadcast(mine, src)->wait();
      CHECK(read(mine) == input_of(src, dtype, n, salt));
    }
    ++salt;
    const Tensor input = make(input_of(pg.rank(), dtype, n, salt), dtype);
    Tensor output = make(Values(size_t(n * world), 0.0), dtype).view({world, n});
    pg.all_gather(output, input)->wait();
    CHECK(read(output) == every_input(world, dtype, n, salt));
  }
}

TEST_CASE("all_gather takes its input in place from its own block of the output", "[distributed]") {
  ProcessGroup& pg = group();
  const int world = pg.world_size();
  const int64_t n = 10;
  Values mine = input_of(pg.rank(), kFloat32, n, 300);
  Values start(size_t(n * world), -1.0);
  std::copy(mine.begin(), mine.end(), start.begin() + n * pg.rank());
  Tensor output = make(start, kFloat32).view({world, n});
  pg.all_gather(output, output.select(0, pg.rank()))->wait();
  CHECK(read(output) == every_input(world, kFloat32, n, 300));
}

TEST_CASE("collectives in flight complete in any wait order", "[distributed]") {
  ProcessGroup& pg = group();
  const int world = pg.world_size();
  const int64_t n = 4096;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 4; ++k) {
    tensors.push_back(make(input_of(pg.rank(), kFloat64, n, 400 + k), kFloat64));
    works.push_back(pg.all_reduce(tensors.back(), ReduceOp::Sum));
  }
  auto barrier = pg.barrier();
  for (int k = 3; k >= 0; --k) {
    works[size_t(k)]->wait();
    CHECK(works[size_t(k)]->is_completed());
    std::vector<Values> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(input_of(r, kFloat64, n, 400 + k));
    check_reduced(read(tensors[size_t(k)]), reduce_reference(inputs, ReduceOp::Sum, kFloat64),
                  kFloat64, world);
  }
  // is_completed() alone drives a collective to its end.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!barrier->is_completed() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  CHECK(barrier->is_completed());
}

TEST_CASE("barrier holds every rank until the last one arrives", "[distributed]") {
  ProcessGroup& pg = group();
  pg.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  if (pg.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pg.barrier()->wait();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(waited >= 0.25);
}

TEST_CASE("collectives reject bad tensors before any rank communicates", "[distributed]") {
  ProcessGroup& pg = group();
  const int world = pg.world_size();
  const Tensor square = make(Values(16, 1.0), kFloat32).view({4, 4});
  const Values before = read(square);
  CHECK_THROWS_WITH(pg.all_reduce(square.t()), Contains("all_reduce: expected a contiguous"));
  CHECK_THROWS_WITH(pg.all_reduce(make(Values(4, 1.0), kInt32), ReduceOp::Avg),
                    Contains("ReduceOp::Avg expected a floating-point tensor, got int32"));
  CHECK_THROWS_WITH(
      pg.broadcast(square, world),
      Contains(fmt::format("expected a source rank in [0, {}), got {}", world, world)));
  CHECK_THROWS_WITH(pg.all_gather(make(Values(5, 0.0), kFloat32), square),
                    Contains(fmt::format("expected an output of world_size * input.numel() = {} * "
                                         "16 = {} elements, got 5",
                                         world, 16 * world)));
  CHECK_THROWS_WITH(pg.all_gather(make(Values(size_t(16 * world), 0.0), kFloat64), square),
                    Contains("expected the output's dtype to be the input's float32, got float64"));
  CHECK_THROWS_WITH(pg.reduce_scatter(make(Values(3, 0.0), kFloat32), square),
                    Contains("expected an input of world_size * output.numel()"));
  CHECK_THROWS_WITH(pg.all_reduce(Tensor()), Contains("expected a defined"));
  CHECK(read(square) == before);
  // The group still works after refusing.
  Tensor ones = make(Values(3, 1.0), kInt64);
  pg.all_reduce(ones)->wait();
  CHECK(read(ones) == Values(3, double(world)));
}

// Run by its own ctest entry ("[timeout]"): rank 1 throws before the collective (a bad
// tensor), rank 0 waits for it and must get an error naming the collective, the rank and the
// timeout within about the timeout; the job then ends through MPI_Abort at exit (NOTE
// [Collective timeouts]).
TEST_CASE("a collective a rank never joins times out with an error", "[.][timeout]") {
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(2);
  const std::shared_ptr<ProcessGroup> pg = init_process_group(options);
  if (pg->rank() == 1) {
    const Tensor transposed = make(Values(6, 1.0), kFloat32).view({2, 3}).t();
    CHECK_THROWS_WITH(pg->all_reduce(transposed), Contains("expected a contiguous"));
    return;
  }
  if (pg->rank() != 0) return;
  Tensor tensor = make(Values(8, 1.0), kFloat32);
  const auto start = std::chrono::steady_clock::now();
  auto work = pg->all_reduce(tensor);
  CHECK_THROWS_WITH(work->wait(), Contains("all_reduce: rank 0 timed out after 2000 ms"));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(waited >= 2.0);
  CHECK(waited < 4.0);
  CHECK_FALSE(work->is_completed());
  CHECK_THROWS_WITH(work->wait(), Contains("all_reduce: rank 0 timed out after 2000 ms"));
  CHECK_THROWS_WITH(pg->barrier(), Contains("broken by an earlier timeout (all_reduce on rank 0"));
}
