// Shapes: SmallVector, numel and strides, contiguity, wrap_dim, broadcasting and infer_size.
#include <catch2/catch.hpp>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/shape.h"

using namespace hg;
using Catch::Contains;

TEST_CASE("SmallVector keeps values inline and grows onto the heap", "[shape]") {
  Shape s{1, 2, 3};
  CHECK(s.size() == 3);
  for (int64_t i = 0; i < 10; ++i) s.push_back(i);
  CHECK(s.size() == 13);
  CHECK(s[12] == 9);
  Shape copy = s;
  CHECK(copy == s);
  Shape moved = std::move(copy);
  CHECK(moved == s);
  moved.insert(0, 42);
  CHECK(moved[0] == 42);
  CHECK(moved[1] == 1);
  moved.erase(0);
  CHECK(moved == s);
  Shape small{4, 5};
  small = s;  // inline <- heap
  CHECK(small == s);
  s = Shape{7};  // heap <- inline
  CHECK(s.size() == 1);
  CHECK(s[0] == 7);
}

TEST_CASE("numel and contiguous strides", "[shape]") {
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({2, 3, 4}) == 24);
  CHECK(shape_numel({2, 0, 4}) == 0);
  CHECK(contiguous_strides({2, 3, 4}) == Shape{12, 4, 1});
  CHECK(contiguous_strides({2, 0, 4}) == Shape{4, 4, 1});
  CHECK_THROWS_WITH(shape_numel({2, -3}), Contains("expected sizes >= 0, got -3 at dim 1"));
  CHECK_THROWS_WITH(shape_numel({int64_t(1) << 40, int64_t(1) << 40}),
                    Contains("more elements than int64 can count"));
}

TEST_CASE("contiguity ignores the strides of size-1 dims as PyTorch does", "[shape]") {
  CHECK(is_contiguous_layout({2, 3}, {3, 1}));
  CHECK_FALSE(is_contiguous_layout({2, 3}, {1, 2}));
  CHECK(is_contiguous_layout({2, 1, 3}, {3, 99, 1}));
  CHECK(is_contiguous_layout({0, 3}, {7, 5}));
}

TEST_CASE("wrap_dim maps negative dims and names the valid range", "[shape]") {
  CHECK(wrap_dim(-1, 3, "op") == 2);
  CHECK(wrap_dim(0, 0, "op") == 0);
  CHECK(wrap_dim(-1, 0, "op") == 0);
  CHECK_THROWS_WITH(
      wrap_dim(3, 3, "sum"),
      Contains("sum: dim out of range (expected in [-3, 2] for a 3-D tensor, got 3)"));
  CHECK_THROWS_AS(wrap_dim(-4, 3, "sum"), hg::Error);
}

TEST_CASE("broadcast_shapes aligns trailing dims", "[shape]") {
  CHECK(broadcast_shapes({3}, {2, 3}) == Shape{2, 3});
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4});
  CHECK(broadcast_shapes({}, {5}) == Shape{5});
  CHECK(broadcast_shapes({0, 1}, {1, 7}) == Shape{0, 7});
  CHECK_THROWS_WITH(
      broadcast_shapes({2, 3}, {4, 3}),
      Contains("shapes [2, 3] and [4, 3] cannot be broadcast") && Contains("sizes 2 and 4"));
}

TEST_CASE("broadcasts_to is one-directional", "[shape]") {
  CHECK(broadcasts_to({3}, {2, 3}));
  CHECK(broadcasts_to({1, 3}, {2, 3}));
  CHECK(broadcasts_to({}, {2, 3}));
  CHECK_FALSE(broadcasts_to({2, 3}, {3}));
  CHECK_FALSE(broadcasts_to({2, 1}, {1, 3}));
  CHECK_FALSE(broadcasts_to({3}, {3, 2}));
}

TEST_CASE("infer_size fills one -1 and checks the count", "[shape]") {
  CHECK(infer_size({-1, 4}, 12, "view") == Shape{3, 4});
  CHECK(infer_size({0, 5}, 0, "view") == Shape{0, 5});
  CHECK_THROWS_WITH(infer_size({0, -1}, 0, "view"), Contains("the -1 could be any size"));
  CHECK_THROWS_WITH(infer_size({-1, -1}, 12, "view"), Contains("only one dim can be -1"));
  CHECK_THROWS_WITH(infer_size({5, -1}, 12, "view"),
                    Contains("view: shape [5, -1] is invalid for a tensor of 12 elements"));
  CHECK_THROWS_WITH(infer_size({2, 5}, 12, "reshape"),
                    Contains("reshape: shape [2, 5] is invalid for a tensor of 12 elements"));
}

TEST_CASE("split_sizes and chunk_sizes follow torch", "[shape][split]") {
  using V = std::vector<int64_t>;
  REQUIRE(split_sizes(10, 3) == V{3, 3, 3, 1});
  REQUIRE(split_sizes(9, 3) == V{3, 3, 3});
  REQUIRE(split_sizes(2, 5) == V{2});
  REQUIRE(split_sizes(0, 3) == V{0});
  REQUIRE(split_sizes(0, 0) == V{0});
  REQUIRE(chunk_sizes(10, 3) == V{4, 4, 2});
  REQUIRE(chunk_sizes(5, 4) == V{2, 2, 1});  // fewer chunks than asked
  REQUIRE(chunk_sizes(6, 4) == V{2, 2, 2});
  REQUIRE(chunk_sizes(3, 5) == V{1, 1, 1});
  REQUIRE(chunk_sizes(0, 3) == V{0, 0, 0});
  REQUIRE(chunk_sizes(7, 1) == V{7});
  // Every split covers the dim exactly.
  for (int64_t size = 0; size <= 20; ++size) {
    for (int64_t step = 1; step <= 7; ++step) {
      const V pieces = split_sizes(size, step);
      int64_t total = 0;
      for (int64_t p : pieces) total += p;
      REQUIRE(total == size);
      const V chunks = chunk_sizes(size, step);
      total = 0;
      for (int64_t p : chunks) total += p;
      REQUIRE(total == size);
      REQUIRE(int64_t(chunks.size()) <= step);
    }
  }
  REQUIRE_THROWS_WITH(split_sizes(5, 0),
                      Contains("split_size can be 0 only") && Contains("size 5"));
  REQUIRE_THROWS_WITH(split_sizes(5, -1), Contains("split_size >= 0, got -1"));
  REQUIRE_THROWS_WITH(chunk_sizes(5, 0), Contains("chunks > 0, got 0"));
}
