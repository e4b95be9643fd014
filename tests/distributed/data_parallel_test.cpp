// nn::parallel::DistributedDataParallel under mpirun -np 2: each rank trains on its half of a
// batch, and the parameters must equal (float32: to 1e-6; bf16, fp16: within the dtype's
// error of the update) those of one model trained in the same process on the whole batch;
// GradScaler and FP16Optimizer skip the same steps on every rank; no_sync; the bucket layout;
// rank 0's state at construction; the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "halfgrad/amp/autocast.h"
#include "halfgrad/amp/fp16_optimizer.h"
#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/random.h"
#include "halfgrad/distributed/data_parallel.h"
#include "halfgrad/nn/layers.h"
#include "halfgrad/nn/modules.h"
#include "halfgrad/ops/loss.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/optim/sgd.h"

#include "test_group.h"

using namespace hg;
using hg::distributed::ProcessGroup;
using hg::nn::parallel::DistributedDataParallel;
using hg::nn::parallel::DistributedDataParallelOptions;
using Catch::Contains;

namespace {

constexpr int64_t kBatch = 8;  // the global batch; each of the two ranks takes half
// A bucket cap of one byte: every parameter closes its own bucket.
constexpr double kBucketPerParameter = 1.0 / (1024 * 1024);

using distributed_test::group;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->append(nn::Linear(6, 16));
  mlp->append(nn::ReLU());
  mlp->append(nn::Linear(16, 3));
  return mlp;
}

// Step `step`'s whole batch, the same on every rank.
struct Batch {
  Tensor x, y;
  Tensor local_x() const { return x.narrow(0, group().rank() * kBatch / 2, kBatch / 2); }
  Tensor local_y() const { return y.narrow(0, group().rank() * kBatch / 2, kBatch / 2); }
};
Batch batch_of(int step) {
  Generator gen(1000 + uint64_t(step));
  return {randn({kBatch, 6}, {}, &gen), randn({kBatch, 3}, {}, &gen)};
}

std::vector<Tensor> snapshot(const nn::Module& module) {
  std::vector<Tensor> out;
  for (const Tensor& p : module.parameters()) out.push_back(p.detach().to(kFloat64).clone());
  return out;
}

double norm_of(const std::vector<Tensor>& tensors) {
  double sum = 0;
  for (const Tensor& t : tensors) sum += hg::sum(pow(t.to(kFloat64), 2)).item<double>();
  return std::sqrt(sum);
}

std::vector<Tensor> difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(a[i].to(kFloat64) - b[i].to(kFloat64));
  return out;
}

// Rank 0's values of every tensor, on every rank.
std::vector<Tensor> rank0_copy(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) {
    Tensor copy = t.detach().contiguous().clone();
    group().broadcast(copy, 0)->wait();
    out.push_back(copy);
  }
  return out;
}

bool bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].to(kFloat64).to_vector<double>() != b[i].to(kFloat64).to_vector<double>()) {
      return false;
    }
  }
  return true;
}

// The DDP run's parameters `got` against the one-process reference's `expected`: the same bits
// on every rank, and within `relative` of how far the reference moved from `initial` (plus
// `absolute`, for parameters stored in a 16-bit dtype), which must be a real move.
void check_against_reference(const std::vector<Tensor>& got, const std::vector<Tensor>& expected,
                             const std::vector<Tensor>& initial, double relative,
                             double absolute = 0) {
  CHECK(bitwise_equal(got, rank0_copy(got)));
  const double moved = norm_of(difference(expected, initial));
  const double error = norm_of(difference(got, expected));
  INFO("moved " << moved << ", error " << error);
  CHECK(moved > 1e-2);
  CHECK(error <= relative * moved + absolute);
}

enum class Precision { Float32, BFloat16 };

// Trains `steps` SGD steps with DDP on this rank's halves and a reference model on the whole
// batches; returns (ddp parameters, reference parameters, initial parameters).
struct Trained {
  std::vector<Tensor> ddp, reference, initial;
};
Trained train_both(Precision precision, DistributedDataParallelOptions options, int steps) {
  // Each rank starts from its own weights: the wrapper must replace them by rank 0's.
  auto replica = make_mlp(11 + uint64_t(group().rank()));
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(replica, options);
  auto reference = make_mlp(11);
  Trained out;
  out.initial = snapshot(*reference);
  REQUIRE(bitwise_equal(snapshot(*replica), out.initial));

  optim::SGD ddp_opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < steps; ++step) {
    const Batch b = batch_of(step);
    const bool low = precision == Precision::BFloat16;
    {
      amp::Autocast autocast(kCPU, kBFloat16, low);
      Tensor loss = mse_loss((*ddp)(b.local_x()).to(kFloat32), b.local_y());
      ddp_opt.zero_grad();
      loss.backward();
    }
    {
      amp::Autocast autocast(kCPU, kBFloat16, low);
      Tensor loss = mse_loss((*reference)(b.x).to(kFloat32), b.y);
      ref_opt.zero_grad();
      loss.backward();
    }
    ddp_opt.step();
    ref_opt.step();
  }
  out.ddp = snapshot(*replica);
  out.reference = snapshot(*reference);
  // Every rank holds the same bits.
  CHECK(bitwise_equal(out.ddp, rank0_copy(out.ddp)));
  return out;
}

}  // namespace

TEST_CASE("DDP in float32 equals one process trained on the concatenated batches", "[ddp]") {
  REQUIRE(group().world_size() == 2);
  for (const double cap : {25.0, kBucketPerParameter}) {
    INFO("bucket_cap_mb " << cap);
    DistributedDataParallelOptions options;
    options.bucket_cap_mb = cap;
    options.first_bucket_cap_mb = std::min(cap, 1.0);
    const Trained t = train_both(Precision::Float32, options, 5);
    const double error = norm_of(difference(t.ddp, t.reference)) / norm_of(t.reference);
    INFO("relative error " << error);
    CHECK(error <= 1e-6);
    CHECK(norm_of(difference(t.reference, t.initial)) > 1e-2);  // the steps did move them
  }
}

TEST_CASE("DDP lays gradients out in buckets in reverse parameter order", "[ddp]") {
  auto mlp = make_mlp(3);  // weights 16x6 and 3x16 (384 and 192 bytes), biases 16 and 3
  {
    auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(mlp);
    CHECK(ddp->bucket_assignment() == std::vector<std::vector<int64_t>>{{3, 2, 1, 0}});
  }
  {
    DistributedDataParallelOptions options;
    options.first_bucket_cap_mb = 100.0 / (1024 * 1024);  // closed by the 192-byte weight
    options.bucket_cap_mb = 400.0 / (1024 * 1024);        // 64 + 384 bytes reach it
    auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(mlp, options);
    CHECK(ddp->bucket_assignment() == std::vector<std::vector<int64_t>>{{3, 2}, {1, 0}});
  }
  {
    // A parameter that requires no grad has no slot.
    mlp->parameters()[0].requires_grad_(false);
    auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(mlp);
    CHECK(ddp->bucket_assignment() == std::vector<std::vector<int64_t>>{{2, 1, 0}});
    mlp->parameters()[0].requires_grad_(true);
  }
}

namespace {
// The default group, counting the all_reduces it is asked for.
class CountingGroup final : public ProcessGroup {
 public:
  explicit CountingGroup(ProcessGroup& inner)
      : ProcessGroup(inner.rank(), inner.world_size(), inner.local_rank(), inner.timeout()),
        inner_(inner) {}
  distributed::Backend backend() const override { return inner_.backend(); }
  std::shared_ptr<distributed::Work> all_reduce(const Tensor& t,
                                                distributed::ReduceOp op) override {
    ++all_reduces;
    return inner_.all_reduce(t, op);
  }
  std::shared_ptr<distributed::Work> broadcast(const Tensor& t, int src) override {
    return inner_.broadcast(t, src);
  }
  std::shared_ptr<distributed::Work> all_gather(const Tensor& out, const Tensor& in) override {
    return inner_.all_gather(out, in);
  }
  std::shared_ptr<distributed::Work> reduce_scatter(const Tensor& out, const Tensor& in,
                                                    distributed::ReduceOp op) override {
    return inner_.reduce_scatter(out, in, op);
  }
  std::shared_ptr<distributed::Work> barrier() override { return inner_.barrier(); }
  int all_reduces = 0;

 private:
  ProcessGroup& inner_;
};
}  // namespace

TEST_CASE("DDP launches a bucket's all_reduce while backward still runs", "[ddp]") {
  auto mlp = make_mlp(4);
  auto counting = std::make_shared<CountingGroup>(group());
  // Hooks registered before the wrapper's run before its own: they see how many buckets were
  // launched when the first layer's gradients, the last of backward, arrive.
  std::vector<int> launched_at;
  for (size_t i : {size_t(0), size_t(1)}) {
    mlp->parameters()[i].register_post_accumulate_grad_hook(
        [&](const Tensor&) { launched_at.push_back(counting->all_reduces); });
  }
  DistributedDataParallelOptions options;
  options.process_group = counting;
  options.first_bucket_cap_mb = options.bucket_cap_mb = kBucketPerParameter;
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(mlp, options);
  REQUIRE(ddp->bucket_assignment().size() == 4);
  const Batch b = batch_of(0);
  mse_loss((*ddp)(b.local_x()), b.local_y()).backward();
  REQUIRE(launched_at.size() == 2);
  // The second layer's weight and bias had their buckets on the wire before either gradient
  // of the first layer existed.
  CHECK(std::min(launched_at[0], launched_at[1]) >= 2);
  CHECK(counting->all_reduces == 4);
}

TEST_CASE("DDP under bf16 autocast stays within bfloat16's error of one process", "[ddp]") {
  const Trained t = train_both(Precision::BFloat16, {}, 5);
  check_against_reference(t.ddp, t.reference, t.initial, 2e-2);
}

TEST_CASE("DDP with fp16 and GradScaler skips on every rank a step one rank overflowed", "[ddp]") {
  auto replica = make_mlp(21 + uint64_t(group().rank()));
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(replica);
  auto reference = make_mlp(21);
  const std::vector<Tensor> initial = snapshot(*reference);
  optim::SGD ddp_opt(ddp->parameters(), {.lr = 0.1});
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1});
  amp::GradScaler ddp_scaler({.init_scale = 1024.0, .growth_interval = 2});
  amp::GradScaler ref_scaler({.init_scale = 1024.0, .growth_interval = 2});
  constexpr int kSkipped = 2;
  for (int step = 0; step < 6; ++step) {
    Batch b = batch_of(step);
    if (step == kSkipped) {
      // An inf in rank 1's half only: rank 0's own gradients are finite.
      b.x = b.x.clone();
      b.x.narrow(0, kBatch - 1, 1).fill_(std::numeric_limits<double>::infinity());
    }
    const std::vector<Tensor> before = snapshot(*replica);
    {
      amp::Autocast autocast(kCPU, kFloat16);
      Tensor loss = mse_loss((*ddp)(b.local_x()).to(kFloat32), b.local_y());
      ddp_opt.zero_grad();
      ddp_scaler.scale(loss).backward();
    }
    const bool stepped = ddp_scaler.step(ddp_opt);
    ddp_scaler.update();
    {
      amp::Autocast autocast(kCPU, kFloat16);
      Tensor loss = mse_loss((*reference)(b.x).to(kFloat32), b.y);
      ref_opt.zero_grad();
      ref_scaler.scale(loss).backward();
    }
    const bool ref_stepped = ref_scaler.step(ref_opt);
    ref_scaler.update();

    INFO("step " << step << " on rank " << group().rank());
    CHECK(stepped == (step != kSkipped));
    CHECK(ref_stepped == stepped);
    CHECK(ddp_scaler.get_scale() == ref_scaler.get_scale());
    if (step == kSkipped) CHECK(bitwise_equal(snapshot(*replica), before));
  }
  check_against_reference(snapshot(*replica), snapshot(*reference), initial, 1e-2);
}

namespace {
std::unique_ptr<optim::Optimizer> sgd_of(std::vector<Tensor> masters) {
  return std::make_unique<optim::SGD>(std::move(masters), optim::SGDOptions{.lr = 0.1});
}
}  // namespace

TEST_CASE("FP16Optimizer works under DDP with float16 gradients averaged", "[ddp]") {
  auto replica = make_mlp(31 + uint64_t(group().rank()));
  replica->half();
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(replica);
  auto reference = make_mlp(31);
  reference->half();
  const std::vector<Tensor> initial = snapshot(*reference);
  // A static scale: the reference takes exactly the same steps.
  amp::FP16Optimizer ddp_opt(ddp->parameters(), sgd_of, {.static_loss_scale = 128.0});
  amp::FP16Optimizer ref_opt(reference->parameters(), sgd_of, {.static_loss_scale = 128.0});
  for (int step = 0; step < 4; ++step) {
    const Batch b = batch_of(step);
    ddp_opt.zero_grad();
    ddp_opt.backward(mse_loss((*ddp)(b.local_x().to(kFloat16)).to(kFloat32), b.local_y()));
    CHECK(ddp_opt.step());
    ref_opt.zero_grad();
    ref_opt.backward(mse_loss((*reference)(b.x.to(kFloat16)).to(kFloat32), b.y));
    CHECK(ref_opt.step());
  }
  // float16 parameters: a rounding of each (2^-11 relative) on top of the update's error.
  const std::vector<Tensor> expected = snapshot(*reference);
  check_against_reference(snapshot(*replica), expected, initial, 2e-2,
                          std::ldexp(1.0, -10) * norm_of(expected));
}

TEST_CASE("FP16Optimizer's dynamic scale skips the same steps on every rank under DDP",
          "[ddp]") {
  auto replica = make_mlp(33 + uint64_t(group().rank()));
  replica->half();
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(replica);
  // 2^20: the first steps overflow float16. Rank 1's inputs are 8 times rank 0's, so its own
  // gradients overflow first; the averaged ones overflow on both ranks together.
  amp::FP16Optimizer opt(ddp->parameters(), sgd_of,
                         {.dynamic_loss_scale = true,
                          .dynamic_loss_args = {.init_scale = 1048576.0}});
  std::vector<double> pattern;  // per step: stepped, then the loss scale
  for (int step = 0; step < 12; ++step) {
    const Batch b = batch_of(step);
    const Tensor x = b.local_x() * (group().rank() == 1 ? 8.0 : 1.0);
    opt.zero_grad();
    opt.backward(mse_loss((*ddp)(x.to(kFloat16)).to(kFloat32), b.local_y()));
    pattern.push_back(opt.step() ? 1.0 : 0.0);
    pattern.push_back(opt.loss_scale());
  }
  const std::vector<Tensor> mine = {tensor(pattern, kFloat64)};
  CHECK(bitwise_equal(mine, rank0_copy(mine)));
  int skipped = 0;
  for (size_t i = 0; i < pattern.size(); i += 2) skipped += pattern[i] == 0.0;
  CHECK(skipped >= 1);
  CHECK(skipped < 12);
  CHECK(bitwise_equal(replica->parameters(), rank0_copy(replica->parameters())));
}

TEST_CASE("no_sync accumulates locally and the next synchronised backward averages the sum",
          "[ddp]") {
  auto replica = make_mlp(41);
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(replica);
  auto reference = make_mlp(41);
  const Batch b = batch_of(0);
  const Tensor x = b.local_x(), y = b.local_y();
  {
    auto guard = ddp->no_sync();
    (mse_loss((*ddp)(x.narrow(0, 0, 2)), y.narrow(0, 0, 2)) * 0.5).backward();
  }
  // Not averaged: the ranks' gradients differ.
  const std::vector<Tensor> local = {replica->parameters()[0].grad().clone()};
  CHECK((group().rank() == 0) == bitwise_equal(local, rank0_copy(local)));
  (mse_loss((*ddp)(x.narrow(0, 2, 2)), y.narrow(0, 2, 2)) * 0.5).backward();

  mse_loss((*reference)(b.x), b.y).backward();
  const std::vector<Tensor> got = replica->parameters();
  const std::vector<Tensor> expected = reference->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    const double error =
        hg::max(abs(got[i].grad().to(kFloat64) - expected[i].grad().to(kFloat64))).item<double>();
    const double scale = hg::max(abs(expected[i].grad())).item<double>();
    INFO("parameter " << i << ": error " << error << " of " << scale);
    CHECK(error <= 1e-6 * scale);
  }
}

TEST_CASE("DDP starts every rank from rank 0's parameters and buffers", "[ddp]") {
  manual_seed(51 + uint64_t(group().rank()));
  auto net = std::make_shared<nn::Sequential>();
  net->append(nn::Linear(4, 5));
  net->append(nn::BatchNorm1d(5));
  auto& norm = dynamic_cast<nn::BatchNorm1d&>(*net->children()[1]);
  norm.running_mean.fill_(double(group().rank() + 5));
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(net);
  CHECK(bitwise_equal(net->parameters(), rank0_copy(net->parameters())));
  CHECK(all(eq(norm.running_mean, 5.0)).item<bool>());

  // broadcast_buffers: each forward starts from rank 0's buffers.
  norm.running_var.fill_(double(group().rank() + 2));
  ddp->eval();
  NoGradGuard no_grad;
  (*ddp)(ones({3, 4}));
  CHECK(all(eq(norm.running_var, 2.0)).item<bool>());
}

namespace {
// A module with a parameter its forward never uses.
struct TwoHeads : nn::Module {
  TwoHeads() {
    used = register_module("used", std::make_shared<nn::Linear>(6, 3));
    unused = register_module("unused", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override { return (*used)(x); }
  std::shared_ptr<nn::Linear> used, unused;
};
}  // namespace

TEST_CASE("A parameter without a gradient is an error naming it on every rank", "[ddp]") {
  manual_seed(61);
  auto net = std::make_shared<TwoHeads>();
  auto ddp = std::make_shared<DistributedDataParallel<TwoHeads>>(net);
  const Batch b = batch_of(0);
  Tensor loss = mse_loss((*ddp)(b.local_x()), b.local_y());
  CHECK_THROWS_WITH(loss.backward(), Contains("'unused.weight'") && Contains("'unused.bias'") &&
                                         Contains("requires_grad false") &&
                                         Contains("find_unused_parameters"));
  // Frozen, the same model trains: the next backward averages.
  ddp.reset();  // its hooks would still average for it
  net->unused->weight.requires_grad_(false);
  net->unused->bias.requires_grad_(false);
  auto frozen = std::make_shared<DistributedDataParallel<TwoHeads>>(net);
  mse_loss((*frozen)(b.local_x()), b.local_y()).backward();
  const std::vector<Tensor> grad = {net->used->weight.grad().clone()};
  CHECK(bitwise_equal(grad, rank0_copy(grad)));
}

namespace {
// Head a on every rank, head b on rank 1 only (when `use_b`), head c on none.
struct Branches : nn::Module {
  Branches() {
    a = register_module("a", std::make_shared<nn::Linear>(6, 3));
    b = register_module("b", std::make_shared<nn::Linear>(6, 3));
    c = register_module("c", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override { return use_b ? (*a)(x) + (*b)(x) : (*a)(x); }
  std::shared_ptr<nn::Linear> a, b, c;
  bool use_b = false;
};
}  // namespace

TEST_CASE("find_unused_parameters averages what any rank used and leaves what none used",
          "[ddp]") {
  manual_seed(81);
  auto net = std::make_shared<Branches>();
  net->use_b = group().rank() == 1;
  DistributedDataParallelOptions options;
  options.find_unused_parameters = true;
  // A bucket per parameter: b's launch late on rank 0, which gives b no gradient.
  options.first_bucket_cap_mb = options.bucket_cap_mb = kBucketPerParameter;
  auto ddp = std::make_shared<DistributedDataParallel<Branches>>(net, options);
  manual_seed(81);
  auto reference = std::make_shared<Branches>();
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    const Batch batch = batch_of(round);
    for (const Tensor& p : net->parameters()) p.mutable_grad() = Tensor();
    for (const Tensor& p : reference->parameters()) p.mutable_grad() = Tensor();
    mse_loss((*ddp)(batch.local_x()), batch.local_y()).backward();
    // The reference: rank 0's rows through a, rank 1's through a + b, one mean over all.
    const Tensor x0 = batch.x.narrow(0, 0, kBatch / 2);
    const Tensor x1 = batch.x.narrow(0, kBatch / 2, kBatch / 2);
    reference->use_b = false;
    const Tensor top = (*reference)(x0);
    reference->use_b = true;
    const Tensor bottom = (*reference)(x1);
    mse_loss(cat({top, bottom}, 0), batch.y).backward();

    for (const auto& head : {std::pair{net->a, reference->a}, std::pair{net->b, reference->b}}) {
      for (const auto& [got, want] : {std::pair{head.first->weight, head.second->weight},
                                      std::pair{head.first->bias, head.second->bias}}) {
        REQUIRE(got.grad().defined());  // also on rank 0, which gave b no gradient
        const double error =
            hg::max(abs(got.grad().to(kFloat64) - want.grad().to(kFloat64))).item<double>();
        CHECK(error <= 1e-6 * hg::max(abs(want.grad())).item<double>());
      }
    }
    CHECK_FALSE(net->c->weight.grad().defined());  // no rank used c
    CHECK_FALSE(net->c->bias.grad().defined());
  }
}

TEST_CASE("DDP refuses a backward with create_graph and keeps working after it", "[ddp]") {
  auto replica = make_mlp(91);
  auto ddp = std::make_shared<DistributedDataParallel<nn::Sequential>>(replica);
  const Batch b = batch_of(0);
  Tensor loss = mse_loss((*ddp)(b.local_x()), b.local_y());
  CHECK_THROWS_WITH(loss.backward(Tensor(), /*retain_graph=*/false, /*create_graph=*/true),
                    Contains("without create_graph") && Contains("no_sync"));
  // Under no_sync a gradient penalty's double backward is the user's own business.
  {
    auto guard = ddp->no_sync();
    Tensor local = mse_loss((*ddp)(b.local_x()), b.local_y());
    const Tensor g = autograd::grad({local}, {replica->parameters()[0]}, {}, true, true)[0];
    CHECK(g.requires_grad());
  }
  for (const Tensor& p : replica->parameters()) p.mutable_grad() = Tensor();
  // The refused backward opened no round: the next forward and backward average as usual.
  mse_loss((*ddp)(b.local_x()), b.local_y()).backward();
  const std::vector<Tensor> grad = {replica->parameters()[0].grad().clone()};
  CHECK(bitwise_equal(grad, rank0_copy(grad)));
}

TEST_CASE("Ranks holding different models are an error at construction", "[ddp]") {
  manual_seed(71);
  auto net = std::make_shared<nn::Sequential>();
  net->append(nn::Linear(6, group().rank() == 0 ? 16 : 17));
  CHECK_THROWS_WITH(std::make_shared<DistributedDataParallel<nn::Sequential>>(net),
                    Contains("rank 0's parameters") && Contains("got rank 1"));
  auto same_count = std::make_shared<nn::Sequential>();
  same_count->append(nn::Linear(6, 16));
  if (group().rank() == 1) same_count->half();
  CHECK_THROWS_WITH(std::make_shared<DistributedDataParallel<nn::Sequential>>(same_count),
                    Contains("other shapes or dtypes"));
  CHECK_THROWS_WITH(
      std::make_shared<DistributedDataParallel<nn::Sequential>>(net,
                                                                DistributedDataParallelOptions{
                                                                    .bucket_cap_mb = 0}),
      Contains("positive bucket caps"));
}
