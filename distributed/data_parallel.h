// nn::parallel::DistributedDataParallel (torch.nn.parallel.DistributedDataParallel): one
// model replica per process, gradients averaged over the process group in buckets while
// backward runs.
//
//   auto group = hg::distributed::init_process_group();
//   auto ddp = std::make_shared<nn::parallel::DistributedDataParallel<Net>>(net);
//   optim::AdamW opt(ddp->parameters(), {.lr = 1e-3});
//   for (...) {                                  // each rank its own share of the batch
//     amp::Autocast autocast(kBFloat16);
//     Tensor loss = cross_entropy((*ddp)(x), y);
//     scaler.scale(loss).backward();            // grads are the mean over the ranks here
//     scaler.step(opt); scaler.update();
//   }
//
// It lives in distributed/ (it needs the process group, the top layer) but keeps torch's
// namespace, nn::parallel.
//
// NOTE [Gradient buckets] At construction the parameters that require grad are laid out in
// buckets, in the reverse of parameters()' order (about the order backward produces their
// gradients), one dtype and device per bucket, the first bucket closed at first_bucket_cap_mb
// and the others at bucket_cap_mb (torch's 1 MB and 25 MB): a bucket is closed once its bytes
// reach the cap. Each bucket owns one flat buffer. A post-accumulate-grad hook on each
// parameter copies its gradient into its slot; when a bucket's last slot is filled and every
// bucket before it is launched, its all_reduce (ReduceOp::Avg, in the parameters' dtype) is
// launched at once, so communication overlaps the rest of backward. Buckets launch strictly in
// index order, so every rank issues the same collectives in the same order whatever order its
// hooks ran in. A callback queued on the backward pass (autograd::queue_callback) waits for
// every bucket when the graph is done and copies the averages back into grad(), so after
// backward() returns every rank holds the same gradients. With MPI, a collective makes
// progress when the library is called: each hook polls the buckets in flight (one MPI_Test
// each) to keep them moving. With NCCL the collectives go on the current stream (NOTE [NCCL on
// the current stream]): they overlap the host's side of backward, but on the device they run
// between backward's kernels, not beside them (torch gives them a stream of their own, which
// halfgrad's NCCL backend does not have yet).
//
// NOTE [DDP and unused parameters] By default (torch's find_unused_parameters=False) every
// parameter that requires grad must get a gradient in every synchronised backward: a bucket
// holding a parameter that got none cannot be launched. The closing callback then waits for
// the buckets that were launched and throws an hg::Error naming the parameters (and naming the
// option); a rank whose other ranks did use them is ended by the group's timeout (NOTE
// [Collective timeouts]). With find_unused_parameters, the closing callback instead fills the
// slots of the parameters this rank left without a gradient with zeros, launches the buckets
// still waiting (in index order: every rank still issues the same collectives in the same
// order, only later), and then all-reduces a map of which parameters each rank used. A
// parameter some rank used gets the average (this rank's zeros counted), creating its grad()
// where this rank had none; one no rank used keeps its grad() as it was, as in torch. It costs
// one more all_reduce a step. Unlike torch, which finds the unused parameters by walking the
// graph from the forward's outputs, halfgrad learns them at the end of backward, so a rank must
// give at least one parameter a gradient for its backward to take part.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "halfgrad/distributed/process_group.h"
#include "halfgrad/nn/module.h"

namespace hg::nn::parallel {

struct DistributedDataParallelOptions {
  // The group to average over; nullptr: distributed::default_process_group().
  std::shared_ptr<distributed::ProcessGroup> process_group = nullptr;
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  // Broadcast rank 0's buffers (running statistics) at every forward, as torch does.
  bool broadcast_buffers = true;
  // Allow parameters without a gradient in a backward (NOTE [DDP and unused parameters]).
  bool find_unused_parameters = false;
};

namespace detail {
class Reducer;
}

// The part of DistributedDataParallel that does not depend on the wrapped module's type.
class DistributedDataParallelBase : public Module {
 public:
  ~DistributedDataParallelBase() override;
  std::string name() const override { return "DistributedDataParallel"; }

  // While the returned guard lives, forward passes made through this wrapper are not
  // synchronised: their backward accumulates gradients locally (torch's no_sync()). The first
  // backward of a forward made after it is gone averages everything accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallelBase& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallelBase& ddp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  distributed::ProcessGroup& process_group() const { return *group_; }
  // The buckets, each as the indices (into parameters() of the wrapped module, counting only
  // those that require grad) of its parameters, in slot order.
  std::vector<std::vector<int64_t>> bucket_assignment() const;

  Tensor forward(const Tensor& input) override;
  Value forward_args(const Args& args) override;

 protected:
  DistributedDataParallelBase(std::shared_ptr<Module> module,
                              DistributedDataParallelOptions options);
  // Before each forward: the buffers from rank 0, and whether its backward synchronises.
  void prepare_forward();
  Module& wrapped() const { return *module_; }

 private:
  std::shared_ptr<Module> module_;
  std::shared_ptr<distributed::ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<detail::Reducer> reducer_;
  int no_sync_depth_ = 0;
};

// The wrapper of a module of type M; (*ddp)(args...) is M's call with the same arguments.
// It is itself a Module with the wrapped one as child "module", so parameters() and
// state_dict() (keys "module.<name>", as torch's) reach the replica.
template <class M = Module>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  explicit DistributedDataParallel(std::shared_ptr<M> module,
                                   DistributedDataParallelOptions options = {})
      : DistributedDataParallelBase(module, std::move(options)), typed_(std::move(module)) {}

  M& module() const { return *typed_; }

  template <class... A>
  auto operator()(A&&... args) {
    prepare_forward();
    return (*typed_)(std::forward<A>(args)...);
  }

 private:
  std::shared_ptr<M> typed_;
};

}  // namespace hg::nn::parallel
