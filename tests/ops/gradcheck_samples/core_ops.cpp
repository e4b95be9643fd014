// Gradcheck samples of the elementwise, reduction and view ops.
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  // elementwise (broadcasting [2, 3] with [3])
  s[OpId::add] = two([](auto& a, auto& b) { return add(a, b, 2.5); },
                     [] {
                       return Inputs{input({2, 3}), input({3})};
                     });
  s[OpId::sub] = two([](auto& a, auto& b) { return sub(a, b, 0.5); },
                     [] {
                       return Inputs{input({3}), input({2, 3})};
                     });
  s[OpId::mul] = two([](auto& a, auto& b) { return mul(a, b); },
                     [] {
                       return Inputs{input({2, 3}), input({2, 1})};
                     });
  s[OpId::div] = two([](auto& a, auto& b) { return div(a, b); },
                     [] {
                       return Inputs{input({2, 3}), positive({3})};
                     });
  s[OpId::pow] = two([](auto& a, auto& b) { return pow(a, b); },
                     [] {
                       return Inputs{positive({2, 3}), input({2, 3}, -1.5, 1.5)};
                     });
  s[OpId::rpow] = one([](auto& x) { return add(pow(2.5, x), pow(0.3, x)); },
                      [] {
                        return input({2, 3});
                      });
  s[OpId::maximum] = two([](auto& a, auto& b) { return maximum(a, b); },
                         [] {
                           return Inputs{input({2, 3}), input({2, 3})};
                         });
  s[OpId::minimum] = two([](auto& a, auto& b) { return minimum(a, b); },
                         [] {
                           return Inputs{input({2, 3}), input({3})};
                         });
  // Every HG_UNARY_OP line of op_list.def: its function on four inputs of its domain.
#define HG_OP(name, cuda, cpu, differentiable)
#define HG_UNARY_OP(name, kind, cuda, cpu, domain) \
  s[OpId::name] = one([](auto& x) { return hg::name(x); }, [] { return domain({4}); });
#include "halfgrad/ops/op_list.def"
#undef HG_UNARY_OP
#undef HG_OP
  s[OpId::gelu] = one([](auto& x) { return gelu(x) + gelu(x, "tanh"); }, [] { return input({5}); });
  s[OpId::clamp] = one([](auto& x) { return clamp(x, -1.0, 1.0); },
                       [] {
                         return tensor({-1.7, -0.4, 0.3, 0.9, 1.6}, kFloat64).requires_grad_();
                       });
  // Finite inputs (finite differences need them): the identity, gradient 1 everywhere; the
  // replaced positions' zero gradient is checked in tests/ops/elementwise_test.cpp.
  s[OpId::nan_to_num] = one([](auto& x) { return nan_to_num(x, 0.5, 2.0, -2.0); },
                            [] {
                              return input({2, 3});
                            });
  s[OpId::addcmul] = Sample{[](const Inputs& in) { return addcmul(in[0], in[1], in[2], 0.7); },
                            [] {
                              return Inputs{input({2, 3}), input({3}), input({2, 3})};
                            }};
  s[OpId::addcdiv] = Sample{[](const Inputs& in) { return addcdiv(in[0], in[1], in[2], 0.7); },
                            [] {
                              return Inputs{input({2, 3}), input({2, 3}), positive({3})};
                            }};
  s[OpId::to_dtype] = Sample{[](const Inputs& in) { return in[0].to(kFloat32).to(kFloat64); },
                             [] { return Inputs{input({4})}; },
                             {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-3}};
  // reductions
  s[OpId::sum] = one([](auto& x) { return sum(x, {0, 2}); }, [] { return input({2, 3, 2}); });
  s[OpId::mean] = one([](auto& x) { return mean(x, {1}, true); }, [] { return input({2, 3}); });
  s[OpId::prod] = one([](auto& x) { return prod(x, {1}); },
                      [] {
                        return tensor({2.0, 0.0, 3.0, -1.0, 1.5, 0.0, 0.0, 2.0, 0.5, 1.0, 3.0, 2.0},
                                      {3, 4}, kFloat64)
                            .requires_grad_();
                      });
  s[OpId::max] = one([](auto& x) { return max(x); }, [] { return input({2, 3}); });
  s[OpId::min] = one([](auto& x) { return min(x); }, [] { return input({2, 3}); });
  s[OpId::amax] = one([](auto& x) { return amax(x, {-1}); }, [] { return input({3, 4}); });
  s[OpId::amin] = one([](auto& x) { return amin(x, {0}, true); }, [] { return input({3, 4}); });
  s[OpId::var] = one([](auto& x) { return var(x, {1}); }, [] { return input({2, 4}); });
  s[OpId::norm] = one([](auto& x) { return norm(x, 2.0, {1}) + norm(x, 3.0) + norm(x, INFINITY); },
                      [] {
                        return input({2, 3});
                      });
  s[OpId::logsumexp] = one([](auto& x) { return logsumexp(x, {0}); }, [] { return input({3, 2}); });
  s[OpId::cumsum] = one([](auto& x) { return cumsum(x, 1); }, [] { return input({2, 4}); });
  // Zeros (one, two in a row) take cumprod's zero paths.
  s[OpId::cumprod] = one([](auto& x) { return cumprod(x, 1); },
                         [] {
                           return tensor({2.0, 0.5, 0.0, 1.5, 0.0, 3.0, 1.2, -0.7, 0.9, 2.0, -1.1,
                                          0.6, 0.8, 0.0, 1.3, -0.4, 1.7, 0.9},
                                         {3, 6}, kFloat64)
                               .requires_grad_();
                         });
  s[OpId::logcumsumexp] = one([](auto& x) { return logcumsumexp(x, 0); },
                              [] {
                                return input({4, 3});
                              });
  // views and copies
  s[OpId::view] = one([](auto& x) { return x.view({3, 2}); }, [] { return input({2, 3}); });
  s[OpId::reshape] = one([](auto& x) { return x.t().reshape({6}); }, [] { return input({2, 3}); });
  s[OpId::expand] = one([](auto& x) { return x.expand({4, 2, 3}); }, [] { return input({2, 1}); });
  s[OpId::transpose] = one([](auto& x) { return x.transpose(0, 2); },
                           [] {
                             return input({2, 3, 4});
                           });
  s[OpId::permute] = one(
      [](auto& x) {
        return x.permute({2, 0, 1});
      },
      [] {
        return input({2, 3, 4});
      });
  s[OpId::slice] = one([](auto& x) { return x.slice(1, 1, std::nullopt, 2); },
                       [] {
                         return input({2, 5});
                       });
  s[OpId::select] = one([](auto& x) { return x.select(0, -1); }, [] { return input({3, 2}); });
  s[OpId::squeeze] = one([](auto& x) { return x.squeeze(1); }, [] { return input({3, 1, 2}); });
  s[OpId::unsqueeze] = one([](auto& x) { return x.unsqueeze(-1); }, [] { return input({3, 2}); });
  s[OpId::clone] = one([](auto& x) { return x.clone(); }, [] { return input({3}); });
  // Backward ops of views, reached by differentiating a gradient (create_graph).
  s[OpId::slice_backward] = one(
      [](auto& x) {
        const Tensor y = x.slice(0, 1, 3);
        return autograd::grad({sum(mul(mul(y, y), y))}, {x}, {}, true, true)[0];
      },
      [] { return input({4}); });
  s[OpId::select_backward] = one(
      [](auto& x) {
        const Tensor y = x.select(1, 0);
        return autograd::grad({sum(mul(mul(y, y), y))}, {x}, {}, true, true)[0];
      },
      [] {
        return input({2, 3});
      });
});

}  // namespace
}  // namespace hg::testing
