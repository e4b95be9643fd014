// DataLoader (dataloader.h): the batch order of a pass, collation, pinning, and the workers
// (NOTE [DataLoader workers], NOTE [DataLoader pin_memory]).
#include "halfgrad/data/dataloader.h"

#include <numeric>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
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

int64_t DataLoader::pass_length() const {
  return options_.sampler ? options_.sampler->size() : dataset_->size();
}

int64_t DataLoader::size() const {
  const int64_t n = pass_length();
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

void DataLoader::worker_loop(int worker, int64_t first) {
  NoGradGuard no_grad;
  const int64_t batches = size(), workers = options_.num_workers;
  const int64_t ahead = int64_t(options_.prefetch_factor) * workers;
  for (int64_t k = first + worker; k < batches; k += workers) {
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
  int64_t first = 0;  // the first batch this pass hands out
  if (resume_) {      // NOTE [DataLoader resume]: the saved pass, after its last batch handed out
    resume_ = false;
    first = handed_out_;
  } else if (options_.sampler) {
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
  handed_out_ = first;
  consumed_ = first;
  for (int w = 0; w < options_.num_workers && w < size() - first; ++w) {
    workers_.emplace_back([this, w, first] { worker_loop(w, first); });
  }
  return Iterator(this, first);
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
    loader_->handed_out_ = index_ + 1;
  } else {
    batch_.clear();
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

// ---- NOTE [DataLoader resume] --------------------------------------------------------------

namespace {

// The sampler's kind for the state: its state_kind() when it is Stateful, "Sampler" for one
// whose state is not saved, "none" without a sampler.
std::string sampler_kind(const std::shared_ptr<Sampler>& sampler) {
  if (!sampler) return "none";
  const auto* stateful = dynamic_cast<const io::Stateful*>(sampler.get());
  return stateful != nullptr ? stateful->state_kind() : "Sampler";
}

}  // namespace

io::ObjectState DataLoader::state_dict() const {
  io::ObjectState out;
  const bool in_pass = handed_out_ > 0 && handed_out_ < size();
  out.values = {{"dataset_size", dataset_->size()},
                {"batch_size", options_.batch_size},
                {"drop_last", int64_t(options_.drop_last)},
                {"shuffle", int64_t(options_.shuffle)},
                {"sampler", sampler_kind(options_.sampler)},
                {"batches_handed_out", in_pass ? handed_out_ : 0}};
  if (in_pass) out.tensors["order"] = tensor(order_, kInt64);
  if (options_.generator != nullptr) {
    const Generator::State state = options_.generator->get_state();
    out.values["generator.seed"] = state.seed;
    out.values["generator.offset"] = state.offset;
  }
  if (const auto* sampler = dynamic_cast<const io::Stateful*>(options_.sampler.get())) {
    out.add_part("sampler.", sampler->state_dict());
  }
  return out;
}

void DataLoader::check_state_dict(const io::ObjectState& state) const {
  const std::pair<const char*, int64_t> settings[] = {{"dataset_size", dataset_->size()},
                                                      {"batch_size", options_.batch_size},
                                                      {"drop_last", int64_t(options_.drop_last)},
                                                      {"shuffle", int64_t(options_.shuffle)}};
  for (const auto& [key, own] : settings) {
    const int64_t saved = state.get_int(key);
    HG_CHECK(saved == own, "DataLoader: expected the {} of this loader, {}, got {}", key, own,
             saved);
  }
  const std::string& sampler = state.get_string("sampler");
  HG_CHECK(sampler == sampler_kind(options_.sampler),
           "DataLoader: expected a state saved with this loader's sampler ({}), got one saved with "
           "{}",
           sampler_kind(options_.sampler), sampler);
  const bool own_generator = options_.generator != nullptr;
  HG_CHECK(state.has("generator.seed") == own_generator,
           "DataLoader: expected a state {} a generator of the loader's own (options.generator), "
           "got one {}",
           own_generator ? "with" : "without", own_generator ? "without" : "with");
  if (own_generator) {
    state.get_uint("generator.seed");
    state.get_uint("generator.offset");
  }
  const int64_t handed_out = state.get_int("batches_handed_out");
  HG_CHECK(handed_out >= 0 && handed_out < size(),
           "DataLoader: expected batches_handed_out in [0, {}) (the loader's batches per pass), "
           "got {}",
           size(), handed_out);
  HG_CHECK(state.tensors.count("order") == size_t(handed_out > 0),
           "DataLoader: expected the order of the pass in progress exactly when batches were "
           "handed out of it ({})",
           handed_out);
  if (handed_out > 0) {
    const Tensor& order = state.get_tensor("order");
    HG_CHECK(order.dtype() == kInt64 && order.dim() == 1 && order.size(0) == pass_length(),
             "DataLoader: expected the pass's order as int64 of shape [{}], got {} of shape {}",
             pass_length(), order.dtype(), order.sizes());
    const std::vector<int64_t> indices = order.contiguous().to_vector<int64_t>();
    const int64_t n = dataset_->size();
    for (size_t i = 0; i < indices.size(); ++i) {
      HG_CHECK(indices[i] >= 0 && indices[i] < n,
               "DataLoader: expected indices in [0, {}) in the saved order, got {} at position {}",
               n, indices[i], i);
    }
  }
  // Nothing else, but the sampler's own entries.
  for (const auto& [key, value] : state.values) {
    const bool known = key == "dataset_size" || key == "batch_size" || key == "drop_last" ||
                       key == "shuffle" || key == "sampler" || key == "batches_handed_out" ||
                       key == "generator.seed" || key == "generator.offset" ||
                       key.rfind("sampler.", 0) == 0;
    HG_CHECK(known, "DataLoader: unexpected value \"{}\" in the state", key);
  }
  for (const auto& [key, tensor] : state.tensors) {
    HG_CHECK(key == "order" || key.rfind("sampler.", 0) == 0,
             "DataLoader: unexpected tensor \"{}\" in the state", key);
  }
  if (const auto* stateful = dynamic_cast<const io::Stateful*>(options_.sampler.get())) {
    stateful->check_state_dict(state.part("sampler."));
  }
}

void DataLoader::load_state_dict(const io::ObjectState& state) {
  check_state_dict(state);
  stop_workers();  // they read order_
  const int64_t handed_out = state.get_int("batches_handed_out");
  if (handed_out > 0) {
    order_ = state.get_tensor("order").contiguous().to_vector<int64_t>();
    handed_out_ = handed_out;
    resume_ = true;
  } else {
    // Between passes: the next begin() starts one. The order stays for an iterator of the
    // previous pass, which must not be used any more but must not read out of range.
    handed_out_ = size();
    resume_ = false;
  }
  if (options_.generator != nullptr) {
    options_.generator->set_state(
        {state.get_uint("generator.seed"), state.get_uint("generator.offset")});
  }
  if (auto* sampler = dynamic_cast<io::Stateful*>(options_.sampler.get())) {
    sampler->load_state_dict(state.part("sampler."));
  }
}

}  // namespace hg::data
