// data::DistributedSampler and DataLoader's sampler option: the unshuffled shares against
// torch's (twin/distributed_sampler.txt), the shuffled shares against the padding and striding
// rule over halfgrad's randperm, and a DataLoader reading one rank's share.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "halfgrad/data/sampler.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

// One line of the twin's output: a rank's share for (n, num_replicas, drop_last).
struct TwinShare {
  int64_t n = 0, num_replicas = 0, rank = 0, size = 0;
  bool drop_last = false;
  std::vector<int64_t> indices;
};

std::vector<TwinShare> twin_shares() {
  std::ifstream file(std::string(HG_TESTS_SOURCE_DIR) + "/data/twin/distributed_sampler.txt");
  REQUIRE(file.good());
  std::vector<TwinShare> shares;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    TwinShare share;
    int drop_last = 0;
    std::string colon;
    in >> share.n >> share.num_replicas >> drop_last >> share.rank >> share.size >> colon;
    REQUIRE(colon == ":");
    share.drop_last = drop_last != 0;
    for (int64_t index = 0; in >> index;) share.indices.push_back(index);
    shares.push_back(share);
  }
  return shares;
}

// The order of one pass over all ranks, rebuilt from the ranks' shares: position j is rank
// j % r's (j / r)-th index.
std::vector<int64_t> interleave(const std::vector<std::vector<int64_t>>& shares) {
  const size_t replicas = shares.size();
  std::vector<int64_t> order(replicas * shares[0].size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = shares[j % replicas][j / replicas];
  return order;
}

std::vector<std::vector<int64_t>> all_shares(int64_t n, int64_t replicas,
                                             data::DistributedSamplerOptions options,
                                             int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> shares;
  for (int64_t rank = 0; rank < replicas; ++rank) {
    data::DistributedSampler sampler(n, replicas, rank, options);
    sampler.set_epoch(epoch);
    shares.push_back(sampler.indices());
    REQUIRE(int64_t(shares.back().size()) == sampler.size());
  }
  return shares;
}

std::vector<int64_t> halfgrad_permutation(int64_t n, uint64_t seed) {
  Generator generator(seed);
  return randperm(n, {.dtype = kInt64}, &generator).to_vector<int64_t>();
}

// x[i] = [i, 10 i], y[i] = i (int64).
std::shared_ptr<data::TensorDataset> numbers(int64_t n) {
  const Tensor i = arange(n, kInt64);
  const Tensor x = stack({i.to(kFloat32), mul(i, 10).to(kFloat32)}, 1);
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, i});
}

// A sampler that reads the dataset backwards, or lies about its size.
struct Backwards : data::Sampler {
  int64_t n = 0, claimed = 0, offset = 0;
  std::vector<int64_t> indices() override {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = n - 1 - i + offset;
    return order;
  }
  int64_t size() const override { return claimed; }
};

}  // namespace

TEST_CASE("DistributedSampler without shuffle gives torch's shares", "[data]") {
  const std::vector<TwinShare> shares = twin_shares();
  REQUIRE(shares.size() > 50);
  for (const TwinShare& expected : shares) {
    INFO("n " << expected.n << " num_replicas " << expected.num_replicas << " rank "
              << expected.rank << " drop_last " << expected.drop_last);
    data::DistributedSampler sampler(
        expected.n, expected.num_replicas, expected.rank,
        {.shuffle = false, .seed = 0, .drop_last = expected.drop_last});
    CHECK(sampler.size() == expected.size);
    CHECK(sampler.indices() == expected.indices);
  }
}

TEST_CASE("DistributedSampler takes the size of a dataset", "[data]") {
  auto dataset = numbers(7);
  data::DistributedSampler sampler(*dataset, 3, 2, {.shuffle = false});
  CHECK(sampler.size() == 3);
  CHECK(sampler.total_size() == 9);
  CHECK(sampler.indices() == std::vector<int64_t>{2, 5, 1});
}

TEST_CASE("DistributedSampler shuffled shares are disjoint and cover the dataset", "[data]") {
  // 12 = 4 * 3: no padding, so the interleaved shares are one permutation of 0..11, the one
  // halfgrad's randperm draws from a generator seeded with seed + epoch.
  const auto shares = all_shares(12, 4, {.shuffle = true, .seed = 5}, /*epoch=*/2);
  std::set<int64_t> seen;
  for (const auto& share : shares) {
    CHECK(share.size() == 3);
    for (int64_t index : share) CHECK(seen.insert(index).second);
  }
  CHECK(seen.size() == 12);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 11);
  CHECK(interleave(shares) == halfgrad_permutation(12, 7));
}

TEST_CASE("DistributedSampler pads a shuffled order from its start", "[data]") {
  for (int64_t n : {10, 3, 1}) {
    INFO("n " << n);
    const int64_t replicas = 4;
    const std::vector<int64_t> permutation = halfgrad_permutation(n, 9);
    // Without drop_last: ceil(n / 4) each, the permutation repeated from its start.
    const auto padded = interleave(all_shares(n, replicas, {.seed = 9}));
    REQUIRE(int64_t(padded.size()) == (n + replicas - 1) / replicas * replicas);
    for (size_t j = 0; j < padded.size(); ++j) CHECK(padded[j] == permutation[j % size_t(n)]);
    // With drop_last: floor(n / 4) each, the permutation's prefix.
    const auto cut = all_shares(n, replicas, {.seed = 9, .drop_last = true});
    REQUIRE(int64_t(cut[0].size()) == n / replicas);
    if (!cut[0].empty()) {
      const auto prefix = interleave(cut);
      CHECK(prefix == std::vector<int64_t>(permutation.begin(),
                                           permutation.begin() + int64_t(prefix.size())));
    }
  }
}

TEST_CASE("DistributedSampler draws the same permutation on every rank object", "[data]") {
  data::DistributedSampler first(50, 3, 1, {.seed = 17});
  first.set_epoch(4);
  const std::vector<int64_t> share = first.indices();
  // A second object for the same rank, made after other draws from the default generator and
  // from another sampler, gives the same share: the order depends only on (seed, epoch).
  manual_seed(123);
  (void)randperm(50);
  data::DistributedSampler other_rank(50, 3, 2, {.seed = 17});
  other_rank.set_epoch(4);
  (void)other_rank.indices();
  data::DistributedSampler second(50, 3, 1, {.seed = 17});
  second.set_epoch(4);
  CHECK(second.indices() == share);
  CHECK(first.indices() == share);  // a pass again without set_epoch: the same order
  // Every rank's share strides the same permutation.
  const auto shares = all_shares(50, 3, {.seed = 17}, /*epoch=*/4);
  CHECK(shares[1] == share);
  CHECK(interleave(shares)[0] == halfgrad_permutation(50, 21)[0]);
}

TEST_CASE("DistributedSampler set_epoch changes the permutation", "[data]") {
  data::DistributedSampler sampler(64, 2, 0, {.seed = 3});
  CHECK(sampler.epoch() == 0);
  const std::vector<int64_t> epoch0 = sampler.indices();
  sampler.set_epoch(1);
  const std::vector<int64_t> epoch1 = sampler.indices();
  CHECK(epoch1 != epoch0);
  CHECK(epoch1 == all_shares(64, 2, {.seed = 3}, /*epoch=*/1)[0]);
  // The seed counts as much as the epoch: (seed 4, epoch 0) is (seed 3, epoch 1).
  CHECK(all_shares(64, 2, {.seed = 4})[0] == epoch1);
  sampler.set_epoch(0);
  CHECK(sampler.indices() == epoch0);
}

TEST_CASE("DistributedSampler leaves the default generator untouched", "[data]") {
  manual_seed(77);
  const Generator::State before = default_generator().get_state();
  data::DistributedSampler sampler(100, 4, 3);
  (void)sampler.indices();
  sampler.set_epoch(8);
  (void)sampler.indices();
  const Generator::State after = default_generator().get_state();
  CHECK(after.seed == before.seed);
  CHECK(after.offset == before.offset);
}

TEST_CASE("DistributedSampler of an empty dataset yields nothing", "[data]") {
  for (bool drop_last : {false, true}) {
    data::DistributedSampler sampler(0, 3, 2, {.drop_last = drop_last});
    CHECK(sampler.size() == 0);
    CHECK(sampler.indices().empty());
  }
}

TEST_CASE("DistributedSampler rejects bad num_replicas and rank", "[data]") {
  CHECK_THROWS_WITH(data::DistributedSampler(10, 0, 0), Contains("num_replicas >= 1, got 0"));
  CHECK_THROWS_WITH(data::DistributedSampler(10, -2, 0), Contains("num_replicas >= 1, got -2"));
  CHECK_THROWS_WITH(data::DistributedSampler(10, 4, 4),
                    Contains("rank in [0, 3] for num_replicas 4, got 4"));
  CHECK_THROWS_WITH(data::DistributedSampler(10, 4, -1),
                    Contains("rank in [0, 3] for num_replicas 4, got -1"));
  CHECK_THROWS_WITH(data::DistributedSampler(-1, 4, 0), Contains("dataset size >= 0, got -1"));
}

TEST_CASE("DataLoader with a DistributedSampler reads this rank's examples", "[data]") {
  auto dataset = numbers(23);
  for (int workers : {0, 2}) {
    for (bool drop_last : {false, true}) {
      INFO("workers " << workers << " drop_last " << drop_last);
      auto sampler = std::make_shared<data::DistributedSampler>(*dataset, 3, 1,
                                                                data::DistributedSamplerOptions{});
      data::DataLoader loader(
          dataset,
          {.batch_size = 3, .drop_last = drop_last, .num_workers = workers, .sampler = sampler});
      // 8 indices per rank: batches of 3, 3 and 2 (the 2 dropped with drop_last).
      CHECK(loader.size() == (drop_last ? 2 : 3));
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        sampler->set_epoch(epoch);
        std::vector<int64_t> expected = sampler->indices();
        if (drop_last) expected.resize(6);
        std::vector<int64_t> seen;
        int64_t batches = 0;
        for (const data::Batch& batch : loader) {
          const std::vector<int64_t> labels = batch[1].to_vector<int64_t>();
          const std::vector<float> x = batch[0].to_vector<float>();
          REQUIRE(x.size() == 2 * labels.size());
          for (size_t i = 0; i < labels.size(); ++i) {
            CHECK(x[2 * i] == float(labels[i]));
            CHECK(x[2 * i + 1] == float(10 * labels[i]));
            seen.push_back(labels[i]);
          }
          ++batches;
        }
        CHECK(batches == loader.size());
        CHECK(seen == expected);
      }
    }
  }
}

TEST_CASE("DataLoader ranks together read the whole dataset", "[data]") {
  auto dataset = numbers(20);
  std::vector<int64_t> seen;
  for (int64_t rank = 0; rank < 4; ++rank) {
    auto sampler = std::make_shared<data::DistributedSampler>(
        *dataset, 4, rank, data::DistributedSamplerOptions{.seed = 2});
    sampler->set_epoch(5);
    data::DataLoader loader(dataset, {.batch_size = 2, .num_workers = 1, .sampler = sampler});
    for (const data::Batch& batch : loader) {
      for (int64_t label : batch[1].to_vector<int64_t>()) seen.push_back(label);
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(20);
  std::iota(all.begin(), all.end(), int64_t(0));
  CHECK(seen == all);
}

TEST_CASE("DataLoader takes any sampler's order and checks it", "[data]") {
  auto dataset = numbers(5);
  auto backwards = std::make_shared<Backwards>();
  backwards->n = 5;
  backwards->claimed = 5;
  data::DataLoader loader(dataset, {.batch_size = 2, .num_workers = 2, .sampler = backwards});
  CHECK(loader.size() == 3);
  std::vector<int64_t> seen;
  for (const data::Batch& batch : loader) {
    for (int64_t label : batch[1].to_vector<int64_t>()) seen.push_back(label);
  }
  CHECK(seen == std::vector<int64_t>{4, 3, 2, 1, 0});

  backwards->claimed = 6;
  CHECK_THROWS_WITH(loader.begin(),
                    Contains("expected the sampler's 6 indices (its size()), got 5"));
  backwards->claimed = 5;
  backwards->offset = 1;
  CHECK_THROWS_WITH(loader.begin(),
                    Contains("sampler indices in [0, 5)") && Contains("got 5 at position 0"));
}

TEST_CASE("DataLoader rejects a sampler together with shuffle", "[data]") {
  auto dataset = numbers(4);
  auto sampler = std::make_shared<data::DistributedSampler>(*dataset, 2, 0);
  CHECK_THROWS_WITH(data::DataLoader(dataset, {.shuffle = true, .sampler = sampler}),
                    Contains("sampler option is mutually exclusive with shuffle"));
}
