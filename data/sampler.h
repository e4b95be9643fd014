// Samplers (torch.utils.data.Sampler): the order of indices a DataLoader reads in each pass,
// and DistributedSampler, each rank's share of the dataset for data-parallel training.
//
//   auto sampler = std::make_shared<data::DistributedSampler>(*dataset, world_size, rank);
//   data::DataLoader loader(dataset, {.batch_size = 32, .sampler = sampler});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler->set_epoch(epoch);  // a new permutation, the same on every rank
//     for (const data::Batch& batch : loader) { ... }
//   }
#pragma once

#include <cstdint>
#include <vector>

#include "halfgrad/data/dataset.h"
#include "halfgrad/io/stateful.h"

namespace hg::data {

// Where a DataLoader takes each pass's order from. indices() is called once per pass (each
// DataLoader::begin()), in the loop's thread, before the workers start; it must return size()
// indices, each in [0, dataset size).
class Sampler {
 public:
  virtual ~Sampler() = default;
  // The order of one pass.
  virtual std::vector<int64_t> indices() = 0;
  // How many indices one pass yields (torch's len(sampler)).
  virtual int64_t size() const = 0;
};

struct DistributedSamplerOptions {
  bool shuffle = true;  // a permutation from seed + epoch; in index order otherwise
  uint64_t seed = 0;    // must be the same on every rank
  // Drops the tail so that every rank gets floor(n / num_replicas) indices; otherwise the order
  // is padded from its start to ceil(n / num_replicas) indices per rank.
  bool drop_last = false;
};

// One rank's share of a dataset of n examples (torch.utils.data.distributed.DistributedSampler):
// each pass takes an order of 0..n-1 (a permutation seeded with seed + epoch when shuffling),
// pads it by repeating it from its start (as many times as needed when n < num_replicas) to
// total_size = num_replicas * ceil(n / num_replicas), or with drop_last cuts it to
// num_replicas * floor(n / num_replicas), and gives rank the indices at rank, rank +
// num_replicas, ... of that. The ranks' shares are disjoint up to the padding and together
// cover every index (all but the cut tail with drop_last).
//
// The permutation comes from a Generator of its own, seeded with seed + epoch (mod 2^64) each
// pass, so every rank with the same seed and epoch draws the same permutation, and the default
// generator is never touched. It is halfgrad's randperm, not torch's: the shuffled order differs
// from torch's for the same seed, while the padding, cut and striding are torch's exactly.
//
// It is io::Stateful: its state is its epoch, with its dataset size, num_replicas, rank, seed,
// shuffle and drop_last, which must match on load (a job resumed with another world size has
// other shares). A DataLoader saves its sampler's state with its own (NOTE [DataLoader resume]).
class DistributedSampler : public Sampler, public io::Stateful {
 public:
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank,
                     DistributedSamplerOptions options = {});
  // The dataset's size, read once here: the dataset must keep it (as torch assumes).
  DistributedSampler(const Dataset& dataset, int64_t num_replicas, int64_t rank,
                     DistributedSamplerOptions options = {});

  std::vector<int64_t> indices() override;
  int64_t size() const override { return num_samples_; }

  // The epoch the next pass shuffles with; call it before each epoch's pass, or every epoch
  // gets the same order.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }
  // Indices of one pass over all ranks, padding included.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

  std::string state_kind() const override { return "DistributedSampler"; }
  io::ObjectState state_dict() const override;
  void check_state_dict(const io::ObjectState& state) const override;
  void load_state_dict(const io::ObjectState& state) override;

 private:
  int64_t dataset_size_ = 0;
  int64_t num_replicas_ = 1;
  int64_t rank_ = 0;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace hg::data
