// Samplers (sampler.h): DistributedSampler's share of each pass, with torch's padding, cut and
// striding.
#include "halfgrad/data/sampler.h"

#include <numeric>

#include "halfgrad/core/error.h"
#include "halfgrad/ops/sampling.h"

namespace hg::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  HG_CHECK(dataset_size >= 0, "DistributedSampler: expected a dataset size >= 0, got {}",
           dataset_size);
  HG_CHECK(num_replicas >= 1, "DistributedSampler: expected num_replicas >= 1, got {}",
           num_replicas);
  HG_CHECK(rank >= 0 && rank < num_replicas,
           "DistributedSampler: expected a rank in [0, {}] for num_replicas {}, got {}",
           num_replicas - 1, num_replicas, rank);
  // torch's drop_last count, ceil((n - r) / r) when r does not divide n, is floor(n / r) (0
  // when n < r); without drop_last each rank gets ceil(n / r).
  num_samples_ = options_.drop_last ? dataset_size / num_replicas
                                    : (dataset_size + num_replicas - 1) / num_replicas;
}

DistributedSampler::DistributedSampler(const Dataset& dataset, int64_t num_replicas, int64_t rank,
                                       DistributedSamplerOptions options)
    : DistributedSampler(dataset.size(), num_replicas, rank, options) {}

std::vector<int64_t> DistributedSampler::indices() {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    // A generator of its own, so that the order depends only on (seed, epoch): the same on
    // every rank, whatever else each rank has drawn. Wrapping mod 2^64 as torch's manual_seed
    // does for a negative seed + epoch.
    Generator generator(options_.seed + uint64_t(epoch_));
    order = randperm(dataset_size_, {.dtype = kInt64}, &generator).to_vector<int64_t>();
  } else {
    order.resize(size_t(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  // Position j of the padded (or cut) order of total_size() is order[j % n]: torch pads by
  // repeating the order from its start, whole as often as needed, and drop_last keeps a
  // prefix. This rank takes positions rank, rank + num_replicas, ...
  std::vector<int64_t> share;
  share.reserve(size_t(num_samples_));
  for (int64_t j = rank_; j < total_size(); j += num_replicas_) {
    share.push_back(order[size_t(j % dataset_size_)]);
  }
  return share;
}

io::ObjectState DistributedSampler::state_dict() const {
  io::ObjectState out;
  out.values = {{"epoch", epoch_},
                {"dataset_size", dataset_size_},
                {"num_replicas", num_replicas_},
                {"rank", rank_},
                {"seed", options_.seed},
                {"shuffle", int64_t(options_.shuffle)},
                {"drop_last", int64_t(options_.drop_last)}};
  return out;
}

void DistributedSampler::check_state_dict(const io::ObjectState& state) const {
  HG_CHECK(state.values.size() == 7 && state.tensors.empty(),
           "DistributedSampler: expected the values epoch, dataset_size, num_replicas, rank, seed, "
           "shuffle and drop_last, got {} values and {} tensors",
           state.values.size(), state.tensors.size());
  state.get_int("epoch");
  const std::pair<const char*, int64_t> settings[] = {{"dataset_size", dataset_size_},
                                                      {"num_replicas", num_replicas_},
                                                      {"rank", rank_},
                                                      {"shuffle", int64_t(options_.shuffle)},
                                                      {"drop_last", int64_t(options_.drop_last)}};
  for (const auto& [key, own] : settings) {
    const int64_t saved = state.get_int(key);
    HG_CHECK(saved == own, "DistributedSampler: expected the {} of this sampler, {}, got {}", key,
             own, saved);
  }
  const uint64_t seed = state.get_uint("seed");
  HG_CHECK(seed == options_.seed,
           "DistributedSampler: expected the seed of this sampler, {}, got {}", options_.seed,
           seed);
}

void DistributedSampler::load_state_dict(const io::ObjectState& state) {
  check_state_dict(state);
  epoch_ = state.get_int("epoch");
}

}  // namespace hg::data
