// DataLoader (dataloader.h): the batch order of a pass, collation, pinning, and the workers
// (NOTE [DataLoader workers], NOTE [DataLoader pin_memory]).
#include "halfgrad/data/dataloader.h"

#include <numeric>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/cuda.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/sampling.h"

namespace hg::data {

Batch default_collate(const std::vector<Example>& examples) {
  HG_CHECK(!examples.empty(), "default_collate: expected at least one example");
  const size_t fields = examples[0].size();
  Batch batch;
  for (size_t f = 0; f < fields; ++f) {
    std::vector<Tensor> column;
    for (size_t e = 0; e < examples.size(); ++e) {
      HG_CHECK(examples[e].size() == fields,
               "default_collate: example {} has {} fields, example 0 has {}", e, examples[e].size(),
               fields);
      const Tensor& t = examples[e][f];
      HG_CHECK(t.defined(), "default_collate: field {} of example {} is undefined", f, e);
      if (!column.empty()) {
        HG_CHECK(t.sizes() == column.front().sizes(),
                 "default_collate: field {} of example {} has shape {}, example 0's has {}", f, e,
                 t.sizes(), column.front().sizes());
        HG_CHECK(t.dtype() == column.front().dtype(),
                 "default_collate: field {} of example {} is {}, example 0's is {}", f, e,
                 t.dtype(), column.front().dtype());
      }
      column.push_back(t);
    }
    batch.push_back(stack(column, 0));
  }
  return batch;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  HG_CHECK(dataset_ != nullptr, "DataLoader: expected a dataset, got none");
  HG_CHECK(options_.batch_size >= 1, "DataLoader: expected batch_size >= 1, got {}",
           options_.batch_size);
  HG_CHECK(options_.num_workers >= 0 && options_.prefetch_factor >= 1,
           "DataLoader: expected num_workers >= 0 and prefetch_factor >= 1, got {} and {}",
           options_.num_workers, options_.prefetch_factor);
  HG_CHECK(bool(options_.collate_fn), "DataLoader: expected a collate function, got none");
  HG_CHECK(!(options_.sampler && options_.shuffle),
           "DataLoader: sampler option is mutually exclusive with shuffle, got both (a sampler "
           "shuffles by itself)");
  pin_batches_ = options_.pin_memory && cuda::is_available();
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::size() const {
  const int64_t n = options_.sampler ? options_.sampler->size() : dataset_->size();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

Batch DataLoader::make_batch(const std::vector<int64_t>& order, int64_t index) const {
  const int64_t first = index * options_.batch_size;
  const int64_t last = std::min<int64_t>(first + options_.batch_size, int64_t(order.size()));
  std::vector<Example> examples;
  for (int64_t i = first; i < last; ++i) examples.push_back(dataset_->get(order[size_t(i)]));
  Batch batch = options_.collate_fn(examples);
  if (pin_batches_) {  // NOTE [DataLoader pin_memory]
    for (Tensor& t : batch) {
      if (t.defined() && t.is_cpu()) t = t.pin_memory();
    }
  }
  return batch;
}

void DataLoader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  ready_.clear();
  failed_.clear();
  stopping_ = false;
}

void DataLoader::worker_loop(int worker) {
  NoGradGuard no_grad;
  const int64_t batches = size(), workers = options_.num_workers;
  const int64_t ahead = int64_t(options_.prefetch_factor) * workers;
  for (int64_t k = worker; k < batches; k += workers) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || k < consumed_ + ahead; });
      if (stopping_) return;
    }
    Batch batch;
    std::exception_ptr error;
    try {
      batch = make_batch(order_, k);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (error) {
        failed_[k] = error;
      } else {
        ready_[k] = std::move(batch);
      }
    }
    changed_.notify_all();
  }
}

DataLoader::Iterator DataLoader::begin() {
  stop_workers();
  const int64_t n = dataset_->size();
  if (options_.sampler) {
    order_ = options_.sampler->indices();
    // The batch count came from sampler->size(), and the workers index the dataset with the
    // order: a sampler that disagrees with itself or the dataset is an error here, not a
    // short pass or a read out of range on a worker.
    HG_CHECK(int64_t(order_.size()) == options_.sampler->size(),
             "DataLoader: expected the sampler's {} indices (its size()), got {}",
             options_.sampler->size(), order_.size());
    for (size_t i = 0; i < order_.size(); ++i) {
      HG_CHECK(order_[i] >= 0 && order_[i] < n,
               "DataLoader: expected sampler indices in [0, {}) (the dataset's size), got {} at "
               "position {}",
               n, order_[i], i);
    }
  } else if (options_.shuffle) {
    order_ = randperm(n, {.dtype = kInt64}, options_.generator).to_vector<int64_t>();
  } else {
    order_.resize(size_t(n));
    std::iota(order_.begin(), order_.end(), int64_t(0));
  }
  consumed_ = 0;
  for (int w = 0; w < options_.num_workers && w < size(); ++w) {
    workers_.emplace_back([this, w] { worker_loop(w); });
  }
  return Iterator(this, 0);
}

DataLoader::Iterator DataLoader::end() { return Iterator(nullptr, size()); }

Batch DataLoader::next_batch(int64_t index) {
  if (workers_.empty()) return make_batch(order_, index);
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return ready_.count(index) > 0 || failed_.count(index) > 0; });
  consumed_ = index + 1;
  std::exception_ptr error;
  Batch batch;
  if (auto failed = failed_.find(index); failed != failed_.end()) {
    error = failed->second;
    failed_.erase(failed);
  } else {
    auto ready = ready_.find(index);
    batch = std::move(ready->second);
    ready_.erase(ready);
  }
  lock.unlock();
  changed_.notify_all();
  if (error) std::rethrow_exception(error);
  return batch;
}

DataLoader::Iterator::Iterator(DataLoader* loader, int64_t index) : loader_(loader), index_(index) {
  if (loader_ != nullptr) load();
}

void DataLoader::Iterator::load() {
  if (index_ < loader_->size()) {
    batch_ = loader_->next_batch(index_);
  } else {
    batch_.clear();
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

}  // namespace hg::data
