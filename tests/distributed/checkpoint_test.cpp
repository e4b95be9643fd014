// distributed::save_checkpoint / load_checkpoint under mpirun -np 2: a DDP run with dropout
// (each rank its own masks) stopped, saved by rank 0 and resumed on every rank ends with the
// same bits as the run that never stopped; a failed write or read is an error on every rank.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include <unistd.h>

#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/random.h"
#include "halfgrad/distributed/checkpoint.h"
#include "halfgrad/distributed/data_parallel.h"
#include "halfgrad/nn/modules.h"
#include "halfgrad/ops/loss.h"
#include "halfgrad/optim/adam.h"

#include "test_group.h"

using namespace hg;
using hg::distributed::ProcessGroup;
using hg::nn::parallel::DistributedDataParallel;
using Catch::Contains;

namespace {

using distributed_test::group;

// A directory every rank names alike: rank 0's pid decides it.
std::filesystem::path shared_directory() {
  const Tensor pid = tensor(std::vector<int64_t>{int64_t(::getpid())});
  group().broadcast(pid, 0)->wait();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("hg-ddp-checkpoint-" + std::to_string(pid.item<int64_t>()));
  if (group().rank() == 0) std::filesystem::create_directories(dir);
  group().barrier()->wait();
  return dir;
}

struct Run {
  std::shared_ptr<nn::Sequential> net;
  std::shared_ptr<DistributedDataParallel<nn::Sequential>> ddp;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;

  explicit Run(uint64_t seed) {
    manual_seed(seed);
    net = std::make_shared<nn::Sequential>();
    net->append(nn::Linear(5, 12));
    net->append(nn::Dropout(0.3));
    net->append(nn::Linear(12, 2));
    ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(net);
    opt = std::make_unique<optim::AdamW>(ddp->parameters(), optim::AdamWOptions{.lr = 1e-2});
    scaler = std::make_unique<amp::GradScaler>(amp::GradScalerOptions{.init_scale = 256.0});
  }

  void step(int k) {
    Generator data(500 + uint64_t(k) * 2 + uint64_t(group().rank()));
    const Tensor x = randn({4, 5}, {}, &data), y = randn({4, 2}, {}, &data);
    opt->zero_grad();
    scaler->scale(mse_loss((*ddp)(x), y)).backward();
    scaler->step(*opt);
    scaler->update();
  }

  std::vector<std::vector<double>> state() const {
    std::vector<std::vector<double>> out;
    for (const Tensor& p : net->parameters()) out.push_back(p.to_vector<double>());
    out.push_back({scaler->get_scale()});
    return out;
  }
};

}  // namespace

TEST_CASE("A DDP run saved by rank 0 resumes bit-identically on every rank", "[ddp]") {
  const std::filesystem::path dir = shared_directory();
  const std::string path = (dir / "step3.safetensors").string();

  Run straight(7);
  // Each rank draws its own dropout masks from here on.
  manual_seed(900 + uint64_t(group().rank()));
  for (int k = 0; k < 3; ++k) straight.step(k);
  distributed::save_checkpoint(path, *straight.net, *straight.opt, *straight.scaler,
                               {{"step", "3"}});
  CHECK(std::filesystem::exists(path));
  for (int k = 3; k < 6; ++k) straight.step(k);

  Run resumed(8);  // other weights, and another generator state, until the load
  manual_seed(12345);
  const auto extra =
      distributed::load_checkpoint(path, *resumed.net, *resumed.opt, *resumed.scaler);
  CHECK(extra == std::map<std::string, std::string>{{"step", "3"}});
  for (int k = 3; k < 6; ++k) resumed.step(k);

  CHECK(resumed.state() == straight.state());
  // Dropout drew differently on the two ranks, yet the averaged parameters agree.
  const Tensor first = straight.net->parameters()[0].detach().clone();
  const Tensor rank0 = first.clone();
  group().broadcast(rank0, 0)->wait();
  CHECK(first.to_vector<double>() == rank0.to_vector<double>());

  group().barrier()->wait();
  if (group().rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("A checkpoint that cannot be written or read is an error on every rank", "[ddp]") {
  Run run(9);
  CHECK_THROWS_WITH(distributed::save_checkpoint("/nonexistent-dir/x.safetensors", *run.net,
                                                 *run.opt, *run.scaler),
                    group().rank() == 0 ? Contains("nonexistent-dir")
                                        : Contains("rank 0 could not write"));
  // Only rank 1's path is missing: rank 0 loads, and still reports rank 1's failure.
  const std::filesystem::path dir = shared_directory();
  const std::string good = (dir / "good.safetensors").string();
  distributed::save_checkpoint(good, *run.net, *run.opt, *run.scaler);
  const std::string path = group().rank() == 1 ? (dir / "missing.safetensors").string() : good;
  CHECK_THROWS_WITH(distributed::load_checkpoint(path, *run.net, *run.opt, *run.scaler),
                    group().rank() == 1 ? Contains("missing.safetensors")
                                        : Contains("rank 1 could not load"));
  group().barrier()->wait();
  if (group().rank() == 0) std::filesystem::remove_all(dir);
}
