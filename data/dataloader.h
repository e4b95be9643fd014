// DataLoader (torch.utils.data.DataLoader): batches of a Dataset, in order or shuffled, made
// on background workers ahead of the training loop.
//
//   data::DataLoader loader(dataset, {.batch_size = 32, .shuffle = true, .num_workers = 2,
//                                     .generator = &generator});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     for (const data::Batch& batch : loader) { Tensor x = batch[0], y = batch[1]; ... }
//   }
//
// Data-parallel training reads each rank's share through a sampler (data/sampler.h):
//
//   auto sampler = std::make_shared<data::DistributedSampler>(*dataset, world_size, rank);
//   data::DataLoader loader(dataset, {.batch_size = 32, .sampler = sampler});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     sampler->set_epoch(epoch);  // the same new permutation on every rank
//     for (const data::Batch& batch : loader) { ... }
//   }
//
// Each pass over the loader (each begin()) is an epoch: its order is the sampler's indices()
// when there is a sampler; with shuffle, a new permutation of the indices from the generator;
// 0..n-1 otherwise. Batches are batch_size consecutive indices of that order, the last one
// shorter unless drop_last. The collate function turns a batch's examples into the
// batch (default_collate: stack each field along a new first dim).
//
// NOTE [DataLoader workers] With num_workers > 0 the batches are made on that many threads,
// batch k on worker k % num_workers, at most prefetch_factor batches per worker ahead of the
// one the loop is at, and handed over in order, as torch's in-order workers. A batch whose
// making threw rethrows in the loop at its place. A loop left early leaves the workers idle
// once they are prefetch_factor batches ahead; the next pass (begin()) or the loader's
// destruction stops and joins them. Workers run with grad mode off, as the data pipeline
// never records. Dataset::get and the collate function must be safe to call from several
// threads at once. An iterator belongs to its pass: begin() again ends the previous pass.
//
// NOTE [DataLoader pin_memory] With pin_memory, every defined CPU tensor of a batch is copied
// into page-locked memory (Tensor::pin_memory) once collated: by the worker that made the
// batch when there are workers (where torch has one pin thread), in the loop's thread
// otherwise. Tensors already pinned, or on a CUDA device, are left as they are. Without a
// usable CUDA device (a build without the CUDA backend, or no GPU) the loader works unpinned,
// with the same batches: torch warns once there, halfgrad has no warning channel, so check
// hg::cuda::is_available() (or batch[i].is_pinned()) to know.
//
// NOTE [DataLoader resume] A DataLoader is io::Stateful (io/stateful.h), so a checkpoint saves
// where it is: state_dict() holds the order of the pass in progress and how many of its batches
// the loop has been handed (inside the loop's body for batch k: k + 1), the state of the
// loader's own generator (options.generator; the default generator travels with the checkpoint
// itself), and its sampler's state when the sampler is Stateful (DistributedSampler: its epoch).
// After load_state_dict the next begin() continues that pass: the batches after the last one
// handed out, in the saved order, drawing nothing; the passes after it draw their orders from
// the restored generator as an uninterrupted run does. The dataset's size, batch_size,
// drop_last, shuffle and whether there is a sampler (and of which kind) must be the saved
// ones: a state that does not fit is an hg::Error that changes nothing. A state saved between
// passes (none begun, or the last one finished) makes the next begin() start a new pass.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "halfgrad/core/random.h"
#include "halfgrad/data/dataset.h"
#include "halfgrad/data/sampler.h"
#include "halfgrad/io/stateful.h"

namespace hg::data {

// A batch: one tensor per field of the examples (inputs, targets, ...).
using Batch = std::vector<Tensor>;
using Collate = std::function<Batch(const std::vector<Example>&)>;

// Stacks field f of every example into batch[f] (all examples need the same number of fields,
// and each field the same shape and dtype: an hg::Error naming the field otherwise).
Batch default_collate(const std::vector<Example>& examples);

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  Collate collate_fn = default_collate;
  int num_workers = 0;             // 0: batches are made in the loop's thread
  int prefetch_factor = 2;         // batches each worker may be ahead
  Generator* generator = nullptr;  // the shuffle's generator; nullptr: default_generator()
  // Copies each batch's CPU tensors into page-locked memory (NOTE [DataLoader pin_memory]),
  // so that batch[i].to(kCUDA, /*non_blocking=*/true) overlaps with the device's work.
  bool pin_memory = false;
  // Each pass's order is sampler->indices() (a DistributedSampler for one rank's share), and
  // the loader has as many batches as sampler->size() indices make. Mutually exclusive with
  // shuffle, as in torch: a sampler that shuffles does so itself.
  std::shared_ptr<Sampler> sampler = nullptr;
};

class DataLoader : public io::Stateful {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader() override;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per pass (torch's len(loader)).
  int64_t size() const;
  const Dataset& dataset() const { return *dataset_; }

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return index_ == other.index_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, int64_t index);
    void load();
    DataLoader* loader_ = nullptr;
    int64_t index_ = 0;
    Batch batch_;
  };

  // Starts a pass (an epoch), stopping the workers of a pass still running; after
  // load_state_dict, continues the saved pass instead (NOTE [DataLoader resume]).
  Iterator begin();
  Iterator end();

  // Where the loader is, for a checkpoint (NOTE [DataLoader resume]).
  std::string state_kind() const override { return "DataLoader"; }
  io::ObjectState state_dict() const override;
  void check_state_dict(const io::ObjectState& state) const override;
  void load_state_dict(const io::ObjectState& state) override;

 private:
  Batch make_batch(const std::vector<int64_t>& order, int64_t index) const;
  Batch next_batch(int64_t index);  // from the workers, or made here without them
  void stop_workers();
  void worker_loop(int worker, int64_t first);
  int64_t pass_length() const;  // indices of one pass

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  bool pin_batches_ = false;  // pin_memory asked for, and a CUDA device is usable

  // The pass being iterated.
  std::vector<int64_t> order_;
  int64_t handed_out_ = 0;  // batches of this pass given to the loop
  bool resume_ = false;     // the next begin() continues this pass (NOTE [DataLoader resume])
  // Workers' shared state (NOTE [DataLoader workers]).
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::exception_ptr> failed_;
  int64_t consumed_ = 0;  // batches handed to the loop
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace hg::data
