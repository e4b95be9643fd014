// Datasets (dataset.h): TensorDataset, Subset, random_split, and the text and CSV readers.
#include "halfgrad/data/dataset.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/sampling.h"

namespace hg::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  HG_CHECK(!tensors_.empty(), "TensorDataset: expected at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    HG_CHECK(tensors_[i].defined() && tensors_[i].dim() >= 1,
             "TensorDataset: tensor {} must be defined with at least one dim", i);
    HG_CHECK(tensors_[i].size(0) == tensors_[0].size(0),
             "TensorDataset: every tensor needs the first dim of tensor 0 ({}), tensor {} has "
             "shape {}",
             tensors_[0].size(0), i, tensors_[i].sizes());
  }
}

int64_t TensorDataset::size() const { return tensors_[0].size(0); }

Example TensorDataset::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "TensorDataset: index {} is out of range [0, {})", index,
           size());
  Example example;
  for (const Tensor& t : tensors_) example.push_back(t.select(0, index));
  return example;
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  HG_CHECK(dataset_ != nullptr, "Subset: expected a dataset, got none");
  const int64_t n = dataset_->size();
  for (int64_t index : indices_) {
    HG_CHECK(index >= 0 && index < n, "Subset: index {} is out of range for a dataset of {}", index,
             n);
  }
}

Example Subset::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "Subset: index {} is out of range [0, {})", index, size());
  return dataset_->get(indices_[size_t(index)]);
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  Generator* generator) {
  HG_CHECK(dataset != nullptr, "random_split: expected a dataset, got none");
  int64_t total = 0;
  for (int64_t length : lengths) {
    HG_CHECK(length >= 0, "random_split: expected lengths >= 0, got {}", length);
    total += length;
  }
  HG_CHECK(total == dataset->size(),
           "random_split: the lengths sum to {}, the dataset has {} examples", total,
           dataset->size());
  const std::vector<int64_t> order =
      randperm(total, {.dtype = kInt64}, generator).to_vector<int64_t>();
  std::vector<std::shared_ptr<Subset>> out;
  int64_t offset = 0;
  for (int64_t length : lengths) {
    out.push_back(std::make_shared<Subset>(
        dataset, std::vector<int64_t>(order.begin() + offset, order.begin() + offset + length)));
    offset += length;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions,
                                                  Generator* generator) {
  HG_CHECK(dataset != nullptr, "random_split: expected a dataset, got none");
  const double sum = std::accumulate(fractions.begin(), fractions.end(), 0.0);
  HG_CHECK(std::abs(sum - 1.0) < 1e-9, "random_split: expected fractions summing to 1, got {}",
           sum);
  const int64_t n = dataset->size();
  std::vector<int64_t> lengths;
  int64_t assigned = 0;
  for (double fraction : fractions) {
    HG_CHECK(fraction >= 0 && fraction <= 1, "random_split: expected fractions in [0, 1], got {}",
             fraction);
    lengths.push_back(int64_t(std::floor(double(n) * fraction)));
    assigned += lengths.back();
  }
  for (int64_t i = 0; assigned < n && !lengths.empty(); ++i, ++assigned) {
    lengths[size_t(i) % lengths.size()] += 1;  // the rest, one each, round robin
  }
  return random_split(std::move(dataset), lengths, generator);
}

// ---- files ------------------------------------------------------------------------------------

std::string read_text_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  HG_CHECK(file.good(), "read_text_file: cannot open \"{}\"", path);
  std::ostringstream contents;
  contents << file.rdbuf();
  HG_CHECK(!file.bad(), "read_text_file: reading \"{}\" failed", path);
  return contents.str();
}

Tensor read_csv(const std::string& path, CsvOptions options) {
  std::istringstream lines(read_text_file(path));
  std::vector<double> values;
  int64_t columns = -1, rows = 0, line_number = 0;
  std::string line;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (options.header && line_number == 1) continue;
    int64_t fields = 0;
    size_t start = 0;
    while (true) {
      const size_t end = line.find(options.delimiter, start);
      const std::string field =
          line.substr(start, end == std::string::npos ? std::string::npos : end - start);
      char* parsed_end = nullptr;
      errno = 0;
      const double value = std::strtod(field.c_str(), &parsed_end);
      const bool rest_blank = parsed_end != field.c_str() &&
                              std::string(parsed_end).find_first_not_of(" \t") == std::string::npos;
      HG_CHECK(rest_blank && errno != ERANGE,
               "read_csv: \"{}\" line {} field {}: expected a number, got \"{}\"", path,
               line_number, fields + 1, field);
      values.push_back(value);
      ++fields;
      if (end == std::string::npos) break;
      start = end + 1;
    }
    if (columns < 0) columns = fields;
    HG_CHECK(fields == columns, "read_csv: \"{}\" line {} has {} fields, the first row has {}",
             path, line_number, fields, columns);
    ++rows;
  }
  return tensor(values, {rows, std::max<int64_t>(columns, 0)}, kFloat64).to(options.dtype);
}

}  // namespace hg::data
