// core/expanding_array.h: one number for every dim, an exact list, a std::array as it is.
#include <array>
#include <cstdint>

#include <catch2/catch.hpp>

#include "halfgrad/core/error.h"
#include "halfgrad/core/expanding_array.h"

using namespace hg;

namespace {

// A function taking the std::array the kernels use, as the ops' parameters were.
int64_t product_of(const std::array<int64_t, 3>& sizes) { return sizes[0] * sizes[1] * sizes[2]; }

struct Options {
  ExpandingArray<2> padding = 0;
};

}  // namespace

TEST_CASE("ExpandingArray repeats one number and keeps a list of its length", "[core]") {
  const ExpandingArray<3> one = 4;
  CHECK(*one == std::array<int64_t, 3>{4, 4, 4});
  const ExpandingArray<3> list = {1, 2, 3};
  CHECK(list[0] == 1);
  CHECK(list[2] == 3);
  CHECK(product_of(list) == 6);
  const ExpandingArray<3> from_array = std::array<int64_t, 3>{5, 6, 7};
  CHECK(*from_array == std::array<int64_t, 3>{5, 6, 7});
  CHECK(ExpandingArray<2>() == ExpandingArray<2>(0));
  CHECK(ExpandingArray<2>(3) == ExpandingArray<2>({3, 3}));
  CHECK(ExpandingArray<2>(3) != ExpandingArray<2>({3, 2}));
  // In an options struct, as a user writes it: designated initialisers with one number or two.
  CHECK(*Options{.padding = 1}.padding == std::array<int64_t, 2>{1, 1});
  CHECK(*Options{.padding = {1, 0}}.padding == std::array<int64_t, 2>{1, 0});
  CHECK(*Options{}.padding == std::array<int64_t, 2>{0, 0});
  int64_t total = 0;
  for (int64_t v : ExpandingArray<4>(2)) total += v;
  CHECK(total == 8);
}

TEST_CASE("ExpandingArray rejects a list of another length", "[core][errors]") {
  CHECK_THROWS_AS((ExpandingArray<2>{1, 2, 3}), Error);
  CHECK_THROWS_WITH((ExpandingArray<3>{1, 2}),
                    Catch::Contains("expected 3 values (one per spatial dim) or a single number "
                                    "for all of them, got a list of 2"));
  CHECK_THROWS_WITH((Options{.padding = {7}}), Catch::Contains("got a list of 1"));
}
