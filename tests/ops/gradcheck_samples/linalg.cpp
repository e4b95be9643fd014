// Gradcheck samples of the GEMM family.
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  s[OpId::mm] = two([](auto& a, auto& b) { return mm(a, b); },
                    [] {
                      return Inputs{input({2, 3}), input({3, 4})};
                    });
  s[OpId::bmm] = two([](auto& a, auto& b) { return bmm(a, b); },
                     [] {
                       return Inputs{input({2, 2, 3}), input({2, 3, 2})};
                     });
  s[OpId::addmm] = Sample{[](const Inputs& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); },
                          [] {
                            return Inputs{input({3}), input({2, 4}), input({4, 3})};
                          }};
  s[OpId::baddbmm] = Sample{[](const Inputs& in) { return baddbmm(in[0], in[1], in[2], 1.5, 0.5); },
                            [] {
                              return Inputs{input({1, 2, 1}), input({2, 2, 3}), input({2, 3, 2})};
                            }};
  s[OpId::addmv] = Sample{[](const Inputs& in) { return addmv(in[0], in[1], in[2], 0.5, 2.0); },
                          [] {
                            return Inputs{input({1}), input({3, 4}), input({4})};
                          }};
  s[OpId::addr] = Sample{[](const Inputs& in) { return addr(in[0], in[1], in[2], 1.5, -0.5); },
                         [] {
                           return Inputs{input({3, 1}), input({3}), input({2})};
                         }};
  s[OpId::addbmm] = Sample{[](const Inputs& in) { return addbmm(in[0], in[1], in[2], 0.5, 1.5); },
                           [] {
                             return Inputs{input({2, 2}), input({3, 2, 4}), input({3, 4, 2})};
                           }};
  // Four matrices ((AB)(CD) is the cheapest order) and a vector at each end.
  s[OpId::multi_dot] =
      Sample{[](const Inputs& in) {
               return add(multi_dot({in[0], in[1], in[2], in[3]}),
                          sum(multi_dot({in[4], in[0], in[1], in[2], in[3], in[5]})));
             },
             [] {
               return Inputs{input({3, 4}), input({4, 2}), input({2, 5}),
                             input({5, 3}), input({3}),    input({3})};
             }};
  s[OpId::chain_matmul] = Sample{[](const Inputs& in) {
                                   return chain_matmul({in[0], in[1], in[2]});
                                 },
                                 [] {
                                   return Inputs{input({2, 4}), input({4, 3}), input({3, 2})};
                                 }};
  s[OpId::tensordot] = two(
      [](auto& a, auto& b) {
        return add(tensordot(a, b, Shape{1, 2}, Shape{1, 0}), sum(tensordot(a, b, 1)));
      },
      [] {
        return Inputs{input({2, 3, 4}), input({4, 3, 2})};
      });
  s[OpId::bilinear] =
      Sample{[](const Inputs& in) {
               return add(bilinear(in[0], in[1], in[2], in[3]), bilinear(in[0], in[1], in[2]));
             },
             [] {
               return Inputs{input({2, 3}), input({2, 4}), input({5, 3, 4}), input({5})};
             }};
  s[OpId::cross] =
      two([](auto& a, auto& b) { return add(cross(a, b), cross(a.t(), b.t(), 0).t()); },
          [] {
            return Inputs{input({4, 3}), input({1, 3})};
          });
  s[OpId::trace] = one([](auto& x) { return add(trace(x), trace(x.t().slice(0, 0, 2))); },
                       [] {
                         return input({3, 4});
                       });
  // Batched with broadcast batch dims, a matrix-vector and a vector-vector product.
  s[OpId::matmul] =
      Sample{[](const Inputs& in) {
               return add(sum(matmul(in[0], in[1])),
                          add(sum(matmul(in[1].select(0, 0), in[2])), matmul(in[2], in[2])));
             },
             [] {
               return Inputs{input({2, 1, 2, 3}), input({3, 3, 2}), input({2})};
             }};
  s[OpId::linear] = Sample{[](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                           [] {
                             return Inputs{input({2, 3, 4}), input({5, 4}), input({5})};
                           }};
  // Both GELU forms, with and without a bias.
  s[OpId::linear_gelu] = Sample{[](const Inputs& in) {
                                  return add(linear_gelu(in[0], in[1], in[2], "tanh"),
                                             linear_gelu(in[0], in[1], Tensor(), "none"));
                                },
                                [] {
                                  return Inputs{input({2, 3, 4}), input({5, 4}), input({5})};
                                }};
  s[OpId::dot] = two([](auto& a, auto& b) { return dot(a, b); },
                     [] {
                       return Inputs{input({5}), input({5})};
                     });
});

}  // namespace
}  // namespace hg::testing

namespace hg::testing {
namespace {

const bool attention_registered = register_samples([](std::map<OpId, Sample>& s) {
  // Causal, and with an additive float mask.
  s[OpId::scaled_dot_product_attention] = Sample{
      [](const Inputs& in) {
        const Tensor causal = scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true);
        const Tensor masked = scaled_dot_product_attention(in[0], in[1], in[2], in[3]);
        return add(causal, masked);
      },
      [] {
        return Inputs{input({2, 3, 4}), input({2, 3, 4}), input({2, 3, 2}), input({3, 3})};
      }};
  // Causal and not, L != S; E = 8, the narrowest head the fused CUDA kernels take, so the CUDA
  // sweep runs them for float16 and bfloat16.
  s[OpId::scaled_dot_product_flash_attention] = Sample{
      [](const Inputs& in) {
        const Tensor causal = scaled_dot_product_flash_attention(in[0], in[1], in[2], true);
        const Tensor plain = scaled_dot_product_flash_attention(in[0], in[1], in[2], false, 0.3);
        return add(causal, plain);
      },
      [] {
        return Inputs{input({2, 3, 8}), input({2, 5, 8}), input({2, 5, 8})};
      }};
});

}  // namespace
}  // namespace hg::testing
