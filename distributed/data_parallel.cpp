// DistributedDataParallel: the checks and broadcasts at construction, and the Reducer that lays
// the gradients out in buckets and averages them while backward runs (NOTE [Gradient buckets]).
#include "halfgrad/distributed/data_parallel.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"

namespace hg::nn::parallel {

using distributed::ProcessGroup;
using distributed::ReduceOp;
using distributed::Work;

namespace detail {

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor>> params,
          std::shared_ptr<ProcessGroup> group, const DistributedDataParallelOptions& options)
      : params_(std::move(params)),
        group_(std::move(group)),
        find_unused_(options.find_unused_parameters) {
    lay_out_buckets(options);
  }

  // Separate from the constructor: the hooks hold the reducer weakly, so that a parameter
  // outliving its wrapper keeps a hook that does nothing.
  void install_hooks() {
    const std::weak_ptr<Reducer> self = weak_from_this();
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].second.register_post_accumulate_grad_hook([self, i](const Tensor& param) {
        if (std::shared_ptr<Reducer> reducer = self.lock()) reducer->on_gradient(i, param);
      });
    }
  }

  std::vector<std::vector<int64_t>> assignment() const {
    std::vector<std::vector<int64_t>> out;
    for (const Bucket& bucket : buckets_) {
      out.emplace_back(bucket.params.begin(), bucket.params.end());
    }
    return out;
  }

  // Set before each forward: whether the backward of that forward averages.
  bool sync = true;

  // A round left open (a backward that threw before its end) is closed, after waiting for the
  // buckets it launched, with an error: the gradients of that step are not averaged.
  void check_no_open_round() {
    if (!round_open_) return;
    const size_t launched = next_launch_;
    close_round();
    HG_ERROR(
        "DistributedDataParallel: expected the previous backward pass to have finished "
        "averaging the gradients before a new forward, got one that stopped after launching "
        "{} of {} buckets (did backward throw?); its gradients are not averaged",
        launched, buckets_.size());
  }

 private:
  struct Bucket {
    Tensor buffer;                // the flat gradients of its parameters
    std::vector<size_t> params;   // indices into params_, in slot order
    std::vector<int64_t> offset;  // where each one's slot starts
    size_t pending = 0;           // slots not yet filled this round
    std::shared_ptr<Work> work;
  };

  void lay_out_buckets(const DistributedDataParallelOptions& options) {
    const auto bytes_of = [](double mb) { return int64_t(mb * 1024.0 * 1024.0); };
    // Open buckets by (dtype, device); each key closes its first bucket at the first cap.
    std::map<std::tuple<int, int, int>, size_t> open;
    std::map<std::tuple<int, int, int>, int64_t> open_bytes;
    std::map<std::tuple<int, int, int>, bool> closed_one;
    for (size_t k = params_.size(); k-- > 0;) {
      const Tensor& p = params_[k].second;
      const std::tuple<int, int, int> key{int(p.dtype()), int(p.device().type),
                                          int(p.device().index)};
      auto it = open.find(key);
      if (it == open.end()) {
        buckets_.emplace_back();
        it = open.emplace(key, buckets_.size() - 1).first;
        open_bytes[key] = 0;
      }
      buckets_[it->second].params.push_back(k);
      open_bytes[key] += p.numel() * int64_t(element_size(p.dtype()));
      const int64_t cap = bytes_of(closed_one[key] ? options.bucket_cap_mb
                                                   : options.first_bucket_cap_mb);
      if (open_bytes[key] >= cap) {
        open.erase(it);
        closed_one[key] = true;
      }
    }
    // Buckets are made in the order their first parameter comes in reverse parameter order.
    std::stable_sort(buckets_.begin(), buckets_.end(), [](const Bucket& a, const Bucket& b) {
      return a.params.front() > b.params.front();
    });
    slot_of_.resize(params_.size());
    for (size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bucket = buckets_[b];
      int64_t total = 0;
      for (size_t k : bucket.params) {
        bucket.offset.push_back(total);
        slot_of_[k] = {b, bucket.offset.size() - 1};
        total += params_[k].second.numel();
      }
      const Tensor& first = params_[bucket.params.front()].second;
      bucket.buffer = zeros({total}, {.dtype = first.dtype(), .device = first.device()});
    }
    ready_.assign(params_.size(), false);
  }

  void on_gradient(size_t index, const Tensor& param) {
    if (!sync) return;
    const std::string& name = params_[index].first;
    // The averages are written into grad() in place, outside the graph: a recorded backward
    // would differentiate the local gradients, not the averaged ones.
    HG_CHECK(!autograd::is_grad_enabled(),
             "DistributedDataParallel: expected a backward without create_graph, got one with it "
             "(parameter '{}'); double backward through the averaged gradients is not supported, "
             "as in torch: compute such terms under no_sync()",
             name);
    if (!round_open_) open_round();
    HG_CHECK(!ready_[index],
             "DistributedDataParallel: parameter '{}' got a second gradient in one backward pass "
             "(a backward started inside another?); each synchronised backward gives each "
             "parameter one",
             name);
    const auto [b, slot] = slot_of_[index];
    Bucket& bucket = buckets_[b];
    const Tensor& grad = param.grad();
    HG_CHECK(grad.dtype() == bucket.buffer.dtype() && grad.device() == bucket.buffer.device(),
             "DistributedDataParallel: parameter '{}' has a {} gradient on {}, but its bucket was "
             "laid out for {} on {}; convert the model before wrapping it",
             name, grad.dtype(), grad.device(), bucket.buffer.dtype(), bucket.buffer.device());
    {
      NoGradGuard no_grad;
      bucket.buffer.narrow(0, bucket.offset[slot], grad.numel()).copy_(grad.reshape({-1}));
    }
    ready_[index] = true;
    if (--bucket.pending == 0) launch_ready_buckets();
    // MPI moves a nonblocking collective along when it is called: poll those in flight.
    for (size_t i = 0; i < next_launch_; ++i) {
      if (buckets_[i].work) buckets_[i].work->is_completed();
    }
  }

  void open_round() {
    round_open_ = true;
    next_launch_ = 0;
    std::fill(ready_.begin(), ready_.end(), false);
    for (Bucket& bucket : buckets_) {
      bucket.pending = bucket.params.size();
      bucket.work.reset();
    }
    const std::weak_ptr<Reducer> self = weak_from_this();
    autograd::queue_callback([self] {
      if (std::shared_ptr<Reducer> reducer = self.lock()) reducer->finish_round();
    });
  }

  // Buckets launch in index order only (the same collectives in the same order on every rank).
  void launch_ready_buckets() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      Bucket& bucket = buckets_[next_launch_];
      bucket.work = group_->all_reduce(bucket.buffer, ReduceOp::Avg);
      ++next_launch_;
    }
  }

  // Waits for the collectives launched and forgets the round.
  void close_round() {
    round_open_ = false;
    for (size_t i = 0; i < next_launch_; ++i) {
      if (buckets_[i].work) buckets_[i].work->wait();
    }
    if (used_work_) std::exchange(used_work_, nullptr)->wait();
  }

  // The queued callback, when backward's graph is done (NOTE [DDP and unused parameters]).
  void finish_round() {
    std::vector<size_t> unused;
    for (size_t k = 0; k < params_.size(); ++k) {
      if (!ready_[k]) unused.push_back(k);
    }
    if (!unused.empty() && !find_unused_) {
      std::string names;
      for (size_t k : unused) names += (names.empty() ? "'" : ", '") + params_[k].first + "'";
      close_round();
      HG_ERROR(
          "DistributedDataParallel: expected every parameter that requires grad to get a "
          "gradient in each synchronised backward, got none for {} on rank {}; freeze them "
          "(requires_grad false) before wrapping the model, or set find_unused_parameters",
          names, group_->rank());
    }
    Tensor used_anywhere;
    if (find_unused_) {
      {
        NoGradGuard no_grad;
        for (size_t k : unused) {
          const auto [b, slot] = slot_of_[k];
          Bucket& bucket = buckets_[b];
          bucket.buffer.narrow(0, bucket.offset[slot], params_[k].second.numel()).zero_();
          if (--bucket.pending == 0) launch_ready_buckets();
        }
      }
      // After every bucket, so that the collectives keep one order on every rank.
      std::vector<int32_t> used(params_.size());
      for (size_t k = 0; k < params_.size(); ++k) used[k] = ready_[k] ? 1 : 0;
      used_anywhere = tensor(used).to(buckets_.front().buffer.device());
      used_work_ = group_->all_reduce(used_anywhere, ReduceOp::Max);
    }
    close_round();
    std::vector<int32_t> used;
    if (used_anywhere.defined()) used = used_anywhere.to(kCPU).to_vector<int32_t>();
    NoGradGuard no_grad;
    for (const Bucket& bucket : buckets_) {
      for (size_t s = 0; s < bucket.params.size(); ++s) {
        const size_t k = bucket.params[s];
        if (!used.empty() && used[k] == 0) continue;  // no rank used it: grad() as it was
        const Tensor& param = params_[k].second;
        const Tensor average =
            bucket.buffer.narrow(0, bucket.offset[s], param.numel()).view(param.sizes());
        Tensor& grad = param.mutable_grad();
        if (grad.defined()) {
          grad.copy_(average);
        } else {
          grad = average.clone();
        }
      }
    }
  }

  std::vector<std::pair<std::string, Tensor>> params_;  // those that require grad
  std::shared_ptr<ProcessGroup> group_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> slot_of_;  // parameter -> (bucket, slot)
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  bool round_open_ = false;
  bool find_unused_ = false;
  std::shared_ptr<Work> used_work_;  // the all_reduce of the used map (find_unused_)
};

}  // namespace detail

namespace {

// A number that differs when the parameters' count, shapes or dtypes differ (FNV-1a).
int64_t layout_fingerprint(const std::vector<std::pair<std::string, Tensor>>& params) {
  uint64_t hash = 1469598103934665603ull;
  const auto mix = [&hash](uint64_t value) {
    hash ^= value;
    hash *= 1099511628211ull;
  };
  for (const auto& [name, p] : params) {
    mix(uint64_t(p.dim()));
    for (int64_t size : p.sizes()) mix(uint64_t(size));
    mix(uint64_t(p.dtype()));
  }
  return int64_t(hash >> 1);
}

// Sends rank 0's values of every tensor to every rank, in place.
void broadcast_from_rank0(ProcessGroup& group, const std::vector<Tensor>& tensors) {
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> staged;  // (target, contiguous copy) pairs
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& t : tensors) {
    Tensor sent = t.is_contiguous() ? t : t.contiguous();
    works.push_back(group.broadcast(sent, 0));
    if (!t.is_contiguous()) staged.emplace_back(t, sent);
  }
  for (const std::shared_ptr<Work>& work : works) work->wait();
  for (auto& [target, sent] : staged) target.copy_(sent);
}

}  // namespace

DistributedDataParallelBase::DistributedDataParallelBase(std::shared_ptr<Module> module,
                                                         DistributedDataParallelOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  HG_CHECK(module_ != nullptr, "DistributedDataParallel: expected a module, got a null pointer");
  HG_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
           "DistributedDataParallel: expected positive bucket caps, got bucket_cap_mb {} and "
           "first_bucket_cap_mb {}",
           options_.bucket_cap_mb, options_.first_bucket_cap_mb);
  group_ = options_.process_group ? options_.process_group
                                  : distributed::shared_default_process_group();
  register_module("module", module_);

  const std::vector<std::pair<std::string, Tensor>> all = module_->named_parameters();
  const distributed::Backend backend = group_->backend();
  const std::vector<Tensor> buffers = module_->buffers();
  for (const auto& [name, p] : all) {
    const bool cpu = p.device().type == kCPU;
    HG_CHECK(cpu == (backend == distributed::Backend::Mpi),
             "DistributedDataParallel: parameter '{}' is on {}, but the process group's backend "
             "{} reduces {} tensors",
             name, p.device(), distributed::backend_name(backend),
             backend == distributed::Backend::Mpi ? "CPU" : "CUDA");
  }

  // Every rank must hold the same model: compare each rank's layout with rank 0's.
  const Device device = all.empty() ? Device(kCPU) : all.front().second.device();
  int64_t numel = 0;
  for (const auto& [name, p] : all) numel += p.numel();
  const Tensor mine = tensor(std::vector<int64_t>{int64_t(all.size()), numel,
                                                  layout_fingerprint(all)})
                          .to(device);
  const Tensor every = zeros({3 * int64_t(group_->world_size())}, {.dtype = kInt64, .device = device});
  group_->all_gather(every, mine)->wait();
  const std::vector<int64_t> layouts = every.to(kCPU).to_vector<int64_t>();
  for (int r = 1; r < group_->world_size(); ++r) {
    HG_CHECK(std::equal(layouts.begin() + 3 * r, layouts.begin() + 3 * r + 3, layouts.begin()),
             "DistributedDataParallel: expected every rank's model to have rank 0's parameters "
             "({} tensors, {} elements), got rank {} with {} tensors, {} elements{}",
             layouts[0], layouts[1], r, layouts[3 * r], layouts[3 * r + 1],
             layouts[3 * r + 2] != layouts[2] && layouts[3 * r] == layouts[0]
                 ? " and other shapes or dtypes"
                 : "");
  }

  std::vector<Tensor> state;
  for (const auto& [name, p] : all) state.push_back(p);
  state.insert(state.end(), buffers.begin(), buffers.end());
  broadcast_from_rank0(*group_, state);

  std::vector<std::pair<std::string, Tensor>> trained;
  for (const auto& entry : all) {
    if (entry.second.requires_grad()) trained.push_back(entry);
  }
  reducer_ = std::make_shared<detail::Reducer>(std::move(trained), group_, options_);
  reducer_->install_hooks();
}

DistributedDataParallelBase::~DistributedDataParallelBase() = default;

DistributedDataParallelBase::NoSync::NoSync(DistributedDataParallelBase& ddp) : ddp_(ddp) {
  ++ddp_.no_sync_depth_;
}
DistributedDataParallelBase::NoSync::~NoSync() { --ddp_.no_sync_depth_; }

std::vector<std::vector<int64_t>> DistributedDataParallelBase::bucket_assignment() const {
  return reducer_->assignment();
}

void DistributedDataParallelBase::prepare_forward() {
  reducer_->check_no_open_round();
  reducer_->sync = no_sync_depth_ == 0;
  if (options_.broadcast_buffers && group_->world_size() > 1) {
    const std::vector<Tensor> buffers = module_->buffers();
    if (!buffers.empty()) broadcast_from_rank0(*group_, buffers);
  }
}

Tensor DistributedDataParallelBase::forward(const Tensor& input) {
  prepare_forward();
  return (*module_)(input);
}

Value DistributedDataParallelBase::forward_args(const Args& args) {
  prepare_forward();
  return module_->call(args);
}

}  // namespace hg::nn::parallel
