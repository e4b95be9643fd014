// hg::distributed's NCCL backend under mpirun -np 2, one GPU per rank: the collectives on CUDA
// tensors against a float64 reference each rank computes from every rank's inputs,
// DistributedDataParallel on CUDA gradients against one GPU on the whole batch, a group made
// as under torchrun (its unique id over a TCP store), and the watchdog's timeout. Skipped (with
// a warning) without NCCL in the build or without a GPU for every rank.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/cuda.h"
#include "halfgrad/core/random.h"
#include "halfgrad/distributed/data_parallel.h"
#include "halfgrad/distributed/nccl_process_group.h"
#include "halfgrad/distributed/process_group.h"
#include "halfgrad/distributed/tcp_store.h"
#include "halfgrad/nn/modules.h"
#include "halfgrad/ops/loss.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/optim/sgd.h"

using namespace hg;
using namespace hg::distributed;
using Catch::Contains;
using Values = std::vector<double>;

namespace {

// Every rank sees the same answer, so every rank skips together.
bool has_a_gpu_per_rank() {
  const LaunchEnvironment env = read_launch_environment();
  if (!is_nccl_available()) {
    WARN("skipped: this build has no NCCL backend");
    return false;
  }
  if (!cuda::is_available() || cuda::device_count() < env.world_size) {
    WARN("skipped: expected a GPU per rank (" << env.world_size << "), got "
                                              << (cuda::is_available() ? cuda::device_count() : 0));
    return false;
  }
  return true;
}

std::shared_ptr<ProcessGroup> shared_nccl_group() {
  static std::shared_ptr<ProcessGroup> made = [] {
    ProcessGroupOptions options;
    options.backend = Backend::Nccl;
    return init_process_group(options);
  }();
  return made;
}
ProcessGroup& nccl_group() { return *shared_nccl_group(); }

Values input_of(int rank, int64_t n, int salt) {
  std::mt19937_64 generator(uint64_t(7919) * uint64_t(rank + 1) + uint64_t(salt));
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  Values values(static_cast<size_t>(n));
  for (double& v : values) v = real(generator);
  return values;
}

Values read(const Tensor& tensor) {
  const Tensor wide = tensor.to(Device(kCPU)).to(kFloat64).contiguous();
  const auto* data = wide.data_ptr<double>();
  return Values(data, data + wide.numel());
}

// Rank r's input in `dtype` on this rank's GPU, and its values as the dtype holds them.
Tensor on_gpu(const Values& values, DType dtype, int device) {
  return tensor(values, dtype).to(Device(kCUDA, device));
}

}  // namespace

TEST_CASE("NCCL all_reduce sum avg and max match the float64 reference", "[cuda][multi-gpu]") {
  if (!has_a_gpu_per_rank()) return;
  ProcessGroup& pg = nccl_group();
  const int world = pg.world_size();
  const int64_t n = 1000;
  int salt = 0;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      INFO("dtype " << dtype_name(dtype) << " op " << reduce_op_name(op));
      ++salt;
      std::vector<Values> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(read(tensor(input_of(r, n, salt), dtype)));
      Tensor mine = on_gpu(inputs[size_t(pg.rank())], dtype, pg.local_rank());
      pg.all_reduce(mine, op)->wait();
      const Values got = read(mine);
      // NCCL reduces 16-bit values pairwise in their own precision: a bound of world ulps.
      const double relative = dtype == kFloat16    ? world * std::ldexp(1.0, -10)
                              : dtype == kBFloat16 ? world * std::ldexp(1.0, -7)
                                                   : 1e-6;
      int wrong = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        double sum = 0, max = -INFINITY, magnitude = 0;
        for (const Values& in : inputs) {
          sum += in[i];
          max = std::max(max, in[i]);
          magnitude += std::abs(in[i]);
        }
        const double expected = op == ReduceOp::Max ? max : op == ReduceOp::Avg ? sum / world : sum;
        if (!(std::abs(got[i] - expected) <= relative * magnitude)) ++wrong;
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("NCCL broadcast all_gather reduce_scatter and barrier", "[cuda][multi-gpu]") {
  if (!has_a_gpu_per_rank()) return;
  ProcessGroup& pg = nccl_group();
  const int world = pg.world_size();
  const int device = pg.local_rank();
  const int64_t n = 64;

  Tensor mine = on_gpu(input_of(pg.rank(), n, 100), kFloat32, device);
  pg.broadcast(mine, world - 1)->wait();
  CHECK(read(mine) == read(tensor(input_of(world - 1, n, 100), kFloat32)));

  const Tensor input = on_gpu(input_of(pg.rank(), n, 101), kBFloat16, device);
  Tensor gathered = on_gpu(Values(size_t(n * world), 0.0), kBFloat16, device);
  pg.all_gather(gathered, input)->wait();
  Values expected;
  for (int r = 0; r < world; ++r) {
    const Values block = read(tensor(input_of(r, n, 101), kBFloat16));
    expected.insert(expected.end(), block.begin(), block.end());
  }
  CHECK(read(gathered) == expected);

  const Tensor blocks = on_gpu(input_of(pg.rank(), n * world, 102), kFloat64, device);
  Tensor reduced = on_gpu(Values(size_t(n), 0.0), kFloat64, device);
  pg.reduce_scatter(reduced, blocks)->wait();
  const Values got = read(reduced);
  int wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int r = 0; r < world; ++r) sum += input_of(r, n * world, 102)[size_t(pg.rank() * n + i)];
    if (!(std::abs(got[size_t(i)] - sum) <= 1e-12)) ++wrong;
  }
  CHECK(wrong == 0);

  auto barrier = pg.barrier();
  barrier->wait();
  CHECK_THROWS_WITH(pg.all_reduce(tensor(Values{1.0}, kFloat32)),
                    Contains("the NCCL backend expected a tensor on cuda:"));
}

TEST_CASE("DDP over NCCL equals one GPU trained on the concatenated batches",
          "[cuda][multi-gpu]") {
  if (!has_a_gpu_per_rank()) return;
  ProcessGroup& pg = nccl_group();
  const Device gpu(kCUDA, pg.local_rank());
  const auto make = [&](uint64_t seed) {
    manual_seed(seed);
    auto mlp = std::make_shared<nn::Sequential>();
    mlp->append(nn::Linear(6, 16));
    mlp->append(nn::ReLU());
    mlp->append(nn::Linear(16, 3));
    mlp->to(gpu);
    return mlp;
  };
  auto replica = make(5 + uint64_t(pg.rank()));  // rank 0's weights replace these
  nn::parallel::DistributedDataParallelOptions options;
  options.process_group = shared_nccl_group();
  // A cap of one byte: a bucket per parameter, launched in turn.
  options.first_bucket_cap_mb = options.bucket_cap_mb = 1.0 / (1024 * 1024);
  auto ddp = std::make_shared<nn::parallel::DistributedDataParallel<nn::Sequential>>(replica,
                                                                                     options);
  auto reference = make(5);
  std::vector<Values> initial;
  for (const Tensor& p : reference->parameters()) initial.push_back(read(p));
  optim::SGD ddp_opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  const int64_t per_rank = 4, batch = per_rank * pg.world_size();
  for (int step = 0; step < 5; ++step) {
    Generator gen(300 + uint64_t(step));
    const Tensor x = randn({batch, 6}, {}, &gen).to(gpu), y = randn({batch, 3}, {}, &gen).to(gpu);
    ddp_opt.zero_grad();
    mse_loss((*ddp)(x.narrow(0, pg.rank() * per_rank, per_rank)),
             y.narrow(0, pg.rank() * per_rank, per_rank))
        .backward();
    ddp_opt.step();
    ref_opt.zero_grad();
    mse_loss((*reference)(x), y).backward();
    ref_opt.step();
  }
  const std::vector<Tensor> got = replica->parameters(), expected = reference->parameters();
  double error = 0, moved = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const Values g = read(got[i]), e = read(expected[i]);
    Tensor copy = got[i].detach().clone();
    pg.broadcast(copy, 0)->wait();
    CHECK(read(copy) == g);  // every rank holds the same bits
    for (size_t k = 0; k < g.size(); ++k) {
      error = std::max(error, std::abs(g[k] - e[k]));
      moved = std::max(moved, std::abs(e[k] - initial[i][k]));
    }
  }
  INFO("max error " << error << ", max move " << moved);
  CHECK(moved > 1e-2);
  CHECK(error <= 1e-3 * moved);
}

TEST_CASE("NCCL group made as under torchrun exchanges its id over the TCP store",
          "[cuda][multi-gpu]") {
  if (!has_a_gpu_per_rank()) return;
  // A port free on rank 0, sent to every rank over MPI; the group itself needs no MPI.
  auto mpi = init_process_group({.backend = Backend::Mpi, .timeout = std::chrono::seconds(60)});
  int port = 0;
  if (mpi->rank() == 0) port = TCPStore("127.0.0.1", 0, 1, true).port();
  Tensor sent = tensor(Values{double(port)}, kInt64);
  mpi->broadcast(sent, 0)->wait();
  LaunchEnvironment env = read_launch_environment();
  env.launcher = "torchrun";
  env.master_addr = "127.0.0.1";
  env.master_port = int(sent.data_ptr<int64_t>()[0]);
  auto group = make_nccl_process_group(env, {.backend = Backend::Nccl});
  CHECK(group->rank() == env.rank);
  CHECK(group->world_size() == env.world_size);
  Tensor mine = on_gpu(Values{double(env.rank + 1)}, kFloat32, env.local_rank);
  group->all_reduce(mine)->wait();
  CHECK(read(mine) == Values{double(env.world_size * (env.world_size + 1) / 2)});
  group->barrier()->wait();
  cuda::synchronize();
}

// Last: rank 0 is left with an aborted communicator. Rank 1 never joins rank 0's all_reduce.
TEST_CASE("NCCL watchdog aborts a collective past the group's timeout", "[cuda][multi-gpu]") {
  if (!has_a_gpu_per_rank()) return;
  ProcessGroupOptions options;
  options.backend = Backend::Nccl;
  options.timeout = std::chrono::milliseconds(1000);
  // Never destroyed: destroying a communicator whose peer aborted may wait on that peer.
  static auto* group = new std::shared_ptr<ProcessGroup>(init_process_group(options));
  ProcessGroup& pg = **group;
  if (pg.rank() == 0) {
    Tensor mine = on_gpu(Values{1.0}, kFloat32, pg.local_rank());
    auto work = pg.all_reduce(mine);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    bool threw = false;
    while (!threw && std::chrono::steady_clock::now() < deadline) {
      try {
        work->is_completed();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      } catch (const hg::Error& error) {
        threw = true;
        CHECK_THAT(error.what(), Contains("all_reduce: rank 0 timed out after 1000 ms"));
      }
    }
    CHECK(threw);
    CHECK_THROWS_WITH(work->wait(), Contains("all_reduce: rank 0 timed out after 1000 ms"));
    CHECK_THROWS_WITH(pg.barrier(), Contains("barrier: expected a usable process group, got one "
                                             "broken by the NCCL watchdog: all_reduce: rank 0"));
  }
  nccl_group().barrier()->wait();
  cuda::synchronize();
}
