// Gradcheck samples of the rearranging ops (ops/rearrange.cpp), of outer and einsum
// (ops/einsum.cpp), and of the sorting ops (ops/sort.cpp; inputs without ties).
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  s[OpId::triu] = one([](auto& x) { return triu(x, 1); }, [] { return input({3, 4}); });
  s[OpId::tril] = one([](auto& x) { return tril(x, -1); }, [] { return input({2, 3, 3}); });
  // Both forms: the 2-d input's diagonal below the main one, then a matrix from it.
  s[OpId::diag] = one([](auto& x) { return diag(diag(x, -1), 1); }, [] { return input({3, 4}); });
  s[OpId::repeat] = one([](auto& x) { return repeat(x, {2, 1, 2}); }, [] { return input({2, 3}); });
  s[OpId::tile] = one([](auto& x) { return tile(x, {2}); }, [] { return input({2, 3}); });
  s[OpId::repeat_interleave] = one(
      [](auto& x) {
        return repeat_interleave(x, 2, 1) +
               repeat_interleave(x, placed(tensor(std::vector<int64_t>{1, 3, 2})), 1);
      },
      [] {
        return input({2, 3});
      });
  s[OpId::flip] = one([](auto& x) { return flip(x, {0, 2}); }, [] { return input({2, 3, 4}); });
  s[OpId::roll] = one(
      [](auto& x) {
        return roll(x, {1, -2}, {0, 1}) + roll(x, {5});
      },
      [] {
        return input({3, 4});
      });
  // reflect, then circular, then constant (with a crop): each mode's index pattern.
  s[OpId::pad] = one(
      [](auto& x) {
        const Tensor reflected = pad(x, {1, 2}, "reflect");
        const Tensor wrapped = pad(reflected, {2, 1, 0, 1}, "circular");
        return pad(pad(wrapped, {1, -1, 1, 1}, "constant", 0.5), {0, 0, 1, 2}, "replicate");
      },
      [] {
        return input({1, 2, 3, 4});
      });
  // reflect and replicate over one, two (and three) dims: torch's reflection_pad1d/2d and
  // replication_pad1d/2d/3d.
  s[OpId::reflection_pad] = one(
      [](auto& x) {
        return pad(pad(x, {1, 2}, "reflect"), {2, 1, 1, 0}, "reflect");
      },
      [] {
        return input({1, 2, 3, 4});
      });
  s[OpId::replication_pad] = one(
      [](auto& x) {
        return pad(pad(x, {0, 0, 1, 2}, "replicate"), {1, 0, 0, 1, 1, 1}, "replicate");
      },
      [] {
        return input({1, 2, 3, 4});
      });
  s[OpId::sort] = one([](auto& x) { return std::get<0>(sort(x, 1, true)); },
                      [] {
                        return input({3, 4});
                      });
  s[OpId::topk] = one([](auto& x) { return std::get<0>(topk(x, 2, 0, false)); },
                      [] {
                        return input({4, 3});
                      });
  s[OpId::kthvalue] = one([](auto& x) { return std::get<0>(kthvalue(x, 2, 1, true)); },
                          [] {
                            return input({3, 4});
                          });
  s[OpId::median] = one([](auto& x) { return std::get<0>(median(x, 0)) + median(x); },
                        [] {
                          return input({5, 2});
                        });
  // quantile along a dim with a 1-D q (linear and midpoint), and over all elements; the
  // nanquantile of a row without NaN is its quantile.
  s[OpId::quantile] = one(
      [](auto& x) {
        const Tensor q = placed(tensor({0.1, 0.5, 0.75}, kFloat64));
        return sum(quantile(x, q, 1)) + sum(quantile(x, q, 0, true, "midpoint")) + quantile(x, 0.3);
      },
      [] {
        return input({3, 5});
      });
  s[OpId::nanquantile] = one(
      [](auto& x) {
        const Tensor q = placed(tensor({0.2, 0.9}, kFloat64));
        return sum(nanquantile(x, q, -1)) + nanquantile(x, 0.6, std::nullopt, false, "lower");
      },
      [] {
        return input({2, 4});
      });
  s[OpId::outer] = two([](auto& a, auto& b) { return outer(a, b); },
                       [] {
                         return Inputs{input({3}), input({4})};
                       });
  s[OpId::einsum] = two(
      [](auto& a, auto& b) {
        return einsum("bij,bjk->bki", {a, b});
      },
      [] {
        return Inputs{input({2, 3, 4}), input({2, 4, 3})};
      });
});

}  // namespace
}  // namespace hg::testing
