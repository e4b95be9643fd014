// data::: TensorDataset, Subset, random_split, DataLoader (order, shuffle, drop_last, collate,
// workers in order and their errors), and the CSV and text readers, against torch's documented
// semantics.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

// 10 examples: x[i] = [i, 10 i], y[i] = i (int64).
std::shared_ptr<data::TensorDataset> numbers(int64_t n = 10) {
  const Tensor i = arange(n, kInt64);
  const Tensor x = stack({i.to(kFloat32), mul(i, 10).to(kFloat32)}, 1);
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, i});
}

std::vector<int64_t> labels_of(data::DataLoader& loader) {
  std::vector<int64_t> seen;
  for (const data::Batch& batch : loader) {
    for (int64_t v : batch[1].to_vector<int64_t>()) seen.push_back(v);
  }
  return seen;
}

// A dataset whose get sleeps a little and counts the calls in flight, to see workers overlap.
struct Slow : data::Dataset {
  mutable std::atomic<int> in_flight{0}, most{0};
  int64_t size() const override { return 24; }
  data::Example get(int64_t index) const override {
    const int now = ++in_flight;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --in_flight;
    HG_CHECK(index != 13, "example 13 is broken");
    return {full({2}, double(index))};
  }
};

}  // namespace

TEST_CASE("TensorDataset and Subset index rows", "[data]") {
  auto d = numbers();
  CHECK(d->size() == 10);
  const data::Example e = d->get(3);
  CHECK(e[0].to_vector<float>() == std::vector<float>{3, 30});
  CHECK(e[1].item<int64_t>() == 3);
  data::Subset s(d, {7, 2, 2});
  CHECK(s.size() == 3);
  CHECK(s.get(0)[1].item<int64_t>() == 7);
  CHECK_THROWS_WITH(d->get(10), Contains("index 10 is out of range [0, 10)"));
  CHECK_THROWS_WITH(data::Subset(d, {11}), Contains("index 11 is out of range"));
  CHECK_THROWS_WITH(data::TensorDataset({zeros({3}), zeros({4})}),
                    Contains("first dim of tensor 0 (3), tensor 1 has shape [4]"));
}

TEST_CASE("random_split partitions by lengths or fractions", "[data]") {
  auto d = numbers();
  Generator g(5);
  auto parts = data::random_split(d, std::vector<int64_t>{6, 4}, &g);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0]->size() == 6);
  CHECK(parts[1]->size() == 4);
  std::set<int64_t> all;
  for (const auto& p : parts) all.insert(p->indices().begin(), p->indices().end());
  CHECK(all.size() == 10);  // disjoint and complete
  Generator again(5);
  CHECK(data::random_split(d, std::vector<int64_t>{6, 4}, &again)[0]->indices() ==
        parts[0]->indices());
  // torch: floor(10 * 0.25) = 2 each, the 4 left over go round robin: 3, 3, 2, 2.
  auto quarters = data::random_split(d, std::vector<double>{0.25, 0.25, 0.25, 0.25}, &g);
  CHECK(quarters[0]->size() == 3);
  CHECK(quarters[1]->size() == 3);
  CHECK(quarters[2]->size() == 2);
  CHECK(quarters[3]->size() == 2);
  CHECK_THROWS_WITH(data::random_split(d, std::vector<int64_t>{6, 5}, &g),
                    Contains("the lengths sum to 11, the dataset has 10 examples"));
  CHECK_THROWS_WITH(data::random_split(d, std::vector<double>{0.5, 0.2}, &g),
                    Contains("fractions summing to 1, got 0.7"));
}

TEST_CASE("DataLoader batches in order, with drop_last and a collate function", "[data]") {
  auto d = numbers();
  data::DataLoader loader(d, {.batch_size = 4});
  CHECK(loader.size() == 3);  // 4, 4, 2
  std::vector<int64_t> sizes;
  for (const data::Batch& batch : loader) {
    CHECK(batch.size() == 2);
    CHECK(batch[0].sizes() == Shape{batch[1].size(0), 2});
    sizes.push_back(batch[1].size(0));
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  CHECK(labels_of(loader) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  data::DataLoader dropping(d, {.batch_size = 4, .drop_last = true});
  CHECK(dropping.size() == 2);
  CHECK(labels_of(dropping) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  // A collate function of one's own: the sum of the labels per batch.
  data::DataLoader summing(
      d, {.batch_size = 5, .collate_fn = [](const std::vector<data::Example>& examples) {
            int64_t total = 0;
            for (const data::Example& e : examples) total += e[1].template item<int64_t>();
            return data::Batch{full({1}, total, kInt64)};
          }});
  std::vector<int64_t> sums;
  for (const data::Batch& b : summing) sums.push_back(b[0].item<int64_t>());
  CHECK(sums == std::vector<int64_t>{10, 35});
  CHECK_THROWS_WITH(data::DataLoader(d, {.batch_size = 0}), Contains("batch_size >= 1, got 0"));
}

TEST_CASE("DataLoader shuffles each epoch from its generator", "[data]") {
  auto d = numbers(50);
  Generator g(11);
  data::DataLoader loader(d, {.batch_size = 8, .shuffle = true, .generator = &g});
  const std::vector<int64_t> first = labels_of(loader), second = labels_of(loader);
  std::vector<int64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(50);
  std::iota(all.begin(), all.end(), 0);
  CHECK(sorted == all);    // a permutation
  CHECK(first != all);     // not the identity
  CHECK(first != second);  // a new one each epoch
  Generator same(11);
  data::DataLoader replay(d, {.batch_size = 8, .shuffle = true, .generator = &same});
  CHECK(labels_of(replay) == first);  // seeded: reproducible
  CHECK(labels_of(replay) == second);
}

TEST_CASE("DataLoader workers prefetch in parallel and hand batches over in order", "[data]") {
  auto d = numbers(103);
  for (int workers : {1, 2, 3}) {
    CAPTURE(workers);
    Generator g(3), h(3);
    data::DataLoader serial(d, {.batch_size = 7, .shuffle = true, .generator = &g});
    data::DataLoader parallel(
        d, {.batch_size = 7, .shuffle = true, .num_workers = workers, .generator = &h});
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<data::Batch> a, b;
      for (const auto& batch : serial) a.push_back(batch);
      for (const auto& batch : parallel) b.push_back(batch);
      REQUIRE(a.size() == b.size());
      for (size_t k = 0; k < a.size(); ++k) {
        CHECK(testing::bit_identical(a[k][0], b[k][0]));
        CHECK(testing::bit_identical(a[k][1], b[k][1]));
      }
    }
  }
  // Workers really overlap, an error reaches the loop at its batch, and leaving a pass early
  // then starting another (or destroying the loader) does not hang.
  auto slow = std::make_shared<Slow>();
  data::DataLoader loader(slow, {.batch_size = 2, .num_workers = 3});
  int64_t batches_before_error = 0;
  try {
    for (const data::Batch& batch : loader) {
      CHECK(batch[0].select(0, 0).to_vector<float>()[0] == float(2 * batches_before_error));
      ++batches_before_error;
    }
    FAIL("the broken example did not throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("example 13 is broken") != std::string::npos);
  }
  CHECK(batches_before_error == 6);  // batches 0..5 (examples 0..11), then batch 6 fails
  CHECK(slow->most.load() >= 2);
  for (const data::Batch& batch : loader) {
    CHECK(batch[0].size(0) == 2);
    break;
  }
}

TEST_CASE("DataLoader with pin_memory gives the batches of the dataset", "[data]") {
  // Pinning changes where a batch lives, never what it holds: with and without workers, and
  // shuffled, each batch holds the dataset's rows at the indices the generator's permutation
  // names. Where no CUDA device is usable the loader works unpinned.
  auto d = numbers(10);
  for (int workers : {0, 2}) {
    Generator gen(7), reference_gen(7);
    data::DataLoader loader(d, {.batch_size = 3,
                                .shuffle = true,
                                .num_workers = workers,
                                .generator = &gen,
                                .pin_memory = true});
    const std::vector<int64_t> order =
        randperm(10, {.dtype = kInt64}, &reference_gen).to_vector<int64_t>();
    int64_t seen = 0;
    for (const data::Batch& batch : loader) {
      REQUIRE(batch.size() == 2);
      CHECK(batch[0].is_pinned() == cuda::is_available());
      CHECK(batch[1].is_pinned() == cuda::is_available());
      const std::vector<float> x = batch[0].to_vector<float>();
      const std::vector<int64_t> y = batch[1].to_vector<int64_t>();
      REQUIRE(batch[0].sizes() == Shape{int64_t(y.size()), 2});
      for (size_t r = 0; r < y.size(); ++r) {
        const int64_t index = order[size_t(seen)];
        CHECK(y[r] == index);
        CHECK(x[2 * r] == float(index));
        CHECK(x[2 * r + 1] == float(10 * index));
        ++seen;
      }
    }
    CHECK(seen == 10);
  }
}

TEST_CASE("read_csv and read_text_file read numbers and bytes", "[data]") {
  testing::TempFolder folder;
  {
    std::ofstream csv(folder.file("table.csv"));
    csv << "a,b,c\n1,2.5,-3\n\n4e2, 5 ,6\r\n";
  }
  const Tensor table = data::read_csv(folder.file("table.csv"), {.header = true});
  CHECK(table.sizes() == Shape{2, 3});
  CHECK(table.to_vector<double>() == std::vector<double>{1, 2.5, -3, 400, 5, 6});
  CHECK(data::read_csv(folder.file("table.csv"), {.header = true, .dtype = kFloat64}).dtype() ==
        kFloat64);
  CHECK_THROWS_WITH(data::read_csv(folder.file("table.csv")),
                    Contains("line 1 field 1: expected a number, got \"a\""));
  {
    std::ofstream ragged(folder.file("ragged.csv"));
    ragged << "1;2\n3;4;5\n";
  }
  CHECK_THROWS_WITH(data::read_csv(folder.file("ragged.csv"), {.delimiter = ';'}),
                    Contains("line 2 has 3 fields, the first row has 2"));
  {
    std::ofstream text(folder.file("text.txt"), std::ios::binary);
    text << "to be\nor not\n";
  }
  CHECK(data::read_text_file(folder.file("text.txt")) == "to be\nor not\n");
  CHECK_THROWS_WITH(data::read_text_file(folder.file("missing.txt")), Contains("cannot open"));
}
