// Datasets (torch.utils.data): Dataset, TensorDataset, Subset, random_split, and the readers
// for a text file and a CSV of numbers (safetensors files load through io/).
//
//   auto train = std::make_shared<data::TensorDataset>(std::vector<Tensor>{images, labels});
//   auto [fit, held_out] = data::random_split(train, {0.9, 0.1}, &generator);
//   data::DataLoader loader(fit, {.batch_size = 64, .shuffle = true});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "halfgrad/core/random.h"
#include "halfgrad/core/tensor.h"

namespace hg::data {

// One example: the tensors a dataset gives for one index ((input, target) for a
// TensorDataset of two tensors).
using Example = std::vector<Tensor>;

// A map-style dataset: a size and the example at each index in [0, size). get() may be called
// from several DataLoader workers at once, so it must not change the dataset.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
};

// Rows of tensors that share their first dim: example i is (t[i] for t in tensors), views of
// the tensors (torch's TensorDataset).
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override;
  Example get(int64_t index) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
};

// The examples of `dataset` at `indices`, in that order (torch's Subset); every index must be
// in [0, dataset->size()).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  Example get(int64_t index) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// Splits a dataset into non-overlapping random subsets of the given lengths (summing to its
// size), from one permutation drawn with `generator` (nullptr: default_generator()).
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  Generator* generator = nullptr);
// The same with fractions summing to 1: each length is floor(fraction * size), and the
// examples left over go one each to the subsets in order, as torch's.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions,
                                                  Generator* generator = nullptr);

// ---- files ------------------------------------------------------------------------------------

// The whole file as bytes (a text file for a character model). An hg::Error naming the path
// when it cannot be read.
std::string read_text_file(const std::string& path);

struct CsvOptions {
  char delimiter = ',';
  bool header = false;  // skip the first line
  DType dtype = kFloat32;
};
// A CSV of numbers as a [rows, columns] tensor of options.dtype. Blank lines are skipped; every
// row must have the same number of fields, each a number (an hg::Error naming the line and
// field otherwise).
Tensor read_csv(const std::string& path, CsvOptions options = {});

}  // namespace hg::data
