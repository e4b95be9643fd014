// Gradcheck samples of the elementwise math ops (fmod, remainder, atan2, hypot, lerp), the
// activations leaky_relu, elu and glu, and the ops built from reductions (std, normalize,
// cosine_similarity, cdist, dist, pairwise_distance, pdist, renorm).
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

// Dividends and divisors whose quotients stay away from whole numbers, where fmod and
// remainder jump.
Inputs quotient_pair() {
  return Inputs{tensor({0.3, -1.7, 2.2, -0.4, 1.1, 3.3}, {2, 3}, kFloat64).requires_grad_(),
                tensor({0.7, 0.9, -1.3, 0.6, -0.8, 1.4}, {2, 3}, kFloat64).requires_grad_()};
}

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  s[OpId::fmod] = two([](auto& a, auto& b) { return fmod(a, b); }, quotient_pair);
  s[OpId::remainder] = two([](auto& a, auto& b) { return remainder(a, b); }, quotient_pair);
  s[OpId::atan2] = two([](auto& a, auto& b) { return atan2(a, b); },
                       [] {
                         return Inputs{input({2, 3}), input({3})};
                       });
  s[OpId::hypot] = two([](auto& a, auto& b) { return hypot(a, b); },
                       [] {
                         return Inputs{input({2, 3}), positive({2, 3})};
                       });
  s[OpId::lerp] = Sample{[](const Inputs& in) { return lerp(in[0], in[1], in[2]); },
                         [] {
                           return Inputs{input({2, 3}), input({2, 3}), input({3}, -0.5, 1.5)};
                         }};
  s[OpId::leaky_relu] = one([](auto& x) { return leaky_relu(x, 0.2); }, [] { return input({5}); });
  s[OpId::elu] = one([](auto& x) { return elu(x, 1.5); }, [] { return input({5}); });
  s[OpId::glu] = one([](auto& x) { return glu(x, 1); }, [] { return input({2, 4}); });
  s[OpId::std] = one([](auto& x) { return hg::std(x, {1}); }, [] { return input({2, 4}); });
  s[OpId::normalize] = one([](auto& x) { return normalize(x) + normalize(x, 3.0, 0); },
                           [] {
                             return input({3, 4});
                           });
  s[OpId::cosine_similarity] = two([](auto& a, auto& b) { return cosine_similarity(a, b, 1); },
                                   [] {
                                     return Inputs{input({3, 4}), input({1, 4})};
                                   });
  s[OpId::cdist] = two([](auto& a, auto& b) { return cdist(a, b) + cdist(a, b, 3.0); },
                       [] {
                         return Inputs{input({2, 3, 4}), input({2, 5, 4})};
                       });
  s[OpId::dist] =
      two([](auto& a, auto& b) { return dist(a, b) + dist(a, b, 3.0) + dist(a, b, 1.0); },
          [] {
            return Inputs{input({2, 3}), input({3})};
          });
  s[OpId::pairwise_distance] = two(
      [](auto& a, auto& b) {
        return pairwise_distance(a, b) + pairwise_distance(a, b, 3.0, 1e-3) +
               pairwise_distance(a, b, 1.0, 0.0, /*keepdim=*/true).reshape({3});
      },
      [] {
        return Inputs{input({3, 4}), input({4})};
      });
  // Rows of norm 0.5 to 3 against maxnorm 1.5: some scaled, some not; and by columns.
  s[OpId::renorm] = one([](auto& x) { return add(renorm(x, 2.0, 0, 1.5), renorm(x, 1.0, 1, 2.0)); },
                        [] {
                          return input({3, 4}, -1.5, 1.5);
                        });
  s[OpId::pdist] = one([](auto& x) { return pdist(x) + pdist(x, 3.0) + pdist(x, 1.0); },
                       [] {
                         return input({4, 3});
                       });
});

}  // namespace
}  // namespace hg::testing
