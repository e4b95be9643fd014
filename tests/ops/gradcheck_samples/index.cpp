// Gradcheck samples of the indexing and shape ops (ops/index.cpp). Index tensors and
// masks are fixed, with repeated positions where an op accumulates. max / min along a dim
// share their OpId with the all-elements forms (core_ops.cpp); they are gradchecked in
// tests/ops/index_test.cpp.
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

Tensor ints(const std::vector<int64_t>& values, const Shape& sizes) {
  return placed(tensor(values, sizes, kInt64));
}

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  // where / masked_fill: broadcasting condition and mask
  s[OpId::where] = two(
      [](auto& a, auto& b) {
        const Tensor condition = placed(tensor({1, 0, 0, 1, 1, 0}, {2, 3}, kBool));
        return where(condition, a, b);
      },
      [] {
        return Inputs{input({2, 3}), input({3})};
      });
  // A mask broadcast against x: each selected element once per row of the mask.
  s[OpId::masked_select] = one(
      [](auto& x) {
        return masked_select(x, placed(tensor({1, 0, 1, 0, 1, 1}, {2, 1, 3}, kBool)));
      },
      [] {
        return input({4, 3});
      });
  s[OpId::masked_fill] = two(
      [](auto& x, auto& value) {
        const Tensor mask = placed(tensor({0, 1, 1}, {3}, kBool));
        const Tensor other_mask = placed(tensor({1, 0, 0, 0, 1, 1}, {2, 3}, kBool));
        return add(masked_fill(x, mask, 1.5), masked_fill(x, other_mask, value));
      },
      [] {
        return Inputs{input({2, 3}), input({})};
      });
  // cat / stack
  s[OpId::cat] = Sample{[](const Inputs& in) {
                          return cat({in[0], in[1], in[2]}, 1);
                        },
                        [] {
                          return Inputs{input({2, 3}), input({2, 1}), input({2, 2})};
                        }};
  s[OpId::stack] = two(
      [](auto& a, auto& b) {
        return stack({a, b}, -1);
      },
      [] {
        return Inputs{input({2, 3}), input({2, 3})};
      });
  // split / chunk (one node each: NOTE [Split is one node]), the pieces weighted differently
  // and joined back
  s[OpId::split] = one(
      [](auto& x) {
        const std::vector<Tensor> even = split(x, 2, 1);  // [2, 2], [2, 2], [2, 1]
        const std::vector<Tensor> sized = split(x, std::vector<int64_t>{1, 4}, -1);
        return add(cat({mul(even[0], 2.0), even[1], mul(even[2], -3.0)}, 1),
                   cat({sized[0], mul(sized[1], 0.5)}, 1));
      },
      [] {
        return input({2, 5});
      });
  s[OpId::chunk] = one(
      [](auto& x) {
        const std::vector<Tensor> pieces = chunk(x, 3, 0);  // [2, 2], [2, 2], [1, 2]
        return cat({mul(pieces[0], 3.0), pieces[1], mul(pieces[2], 0.5)}, 0);
      },
      [] {
        return input({5, 2});
      });
  // gather / scatter_add (index smaller than src: src's other elements get a zero gradient)
  s[OpId::gather] = one(
      [](auto& x) {
        return gather(x, 1, ints({3, 0, 0, 2, 1, 1}, {3, 2}));
      },
      [] {
        return input({3, 4});
      });
  s[OpId::scatter_add] = two(
      [](auto& self, auto& src) {
        return scatter_add(self, 1, ints({0, 3, 0, 2, 2, 1}, {2, 3}), src);
      },
      [] {
        return Inputs{input({3, 4}), input({2, 4})};
      });
  // index_select / index_add (repeated indices)
  s[OpId::index_select] = one(
      [](auto& x) {
        return index_select(x, 0, ints({3, 0, 3}, {3}));
      },
      [] {
        return input({4, 3});
      });
  s[OpId::index_add] = two(
      [](auto& self, auto& source) {
        return index_add(self, 1, ints({1, 3, 1}, {3}), source, 0.5);
      },
      [] {
        return Inputs{input({2, 4}), input({2, 3})};
      });
  // index_put: one index tensor without repeats; two broadcast index tensors accumulating
  // repeats; and repeats without accumulate (only the last write's values get a gradient)
  // index_copy along dims 0 and 1; the repeated position keeps its last slice.
  s[OpId::index_copy] = Sample{[](const Inputs& in) {
                                 return add(index_copy(in[0], 0, ints({3, 0, 3}, {3}), in[1]),
                                            index_copy(in[0], 1, ints({2}, {1}), in[2]));
                               },
                               [] {
                                 return Inputs{input({4, 3}), input({3, 3}), input({4, 1})};
                               }};
  s[OpId::index_put] = Sample{
      [](const Inputs& in) {
        const Tensor& self = in[0];
        const Tensor first = index_put(self, {ints({0, 2, -1}, {3})}, in[1]);
        const Tensor second = index_put(self, {ints({1, 1, 3}, {3, 1}), ints({0, 2}, {2})}, in[2],
                                        /*accumulate=*/true);
        const Tensor third = index_put(self, {ints({2, 0, 2}, {3}), ints({1, 1, 1}, {3})}, in[3]);
        return add(add(first, mul(second, 2.0)), mul(third, -1.0));
      },
      [] {
        return Inputs{input({4, 3}), input({3}), input({3, 2}), input({3})};
      }};
});

}  // namespace
}  // namespace hg::testing
