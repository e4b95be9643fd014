// Tensor::index and index_put_ on CUDA give the CPU's results (advanced indices, masks,
// writes), and their gradients.
#include <catch2/catch.hpp>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::indexing;
using namespace hg::testing;

TEST_CASE("CUDA index and index_put_ match the CPU", "[cuda][index]") {
  HG_REQUIRE_CUDA();
  manual_seed(41);
  const Tensor x = randn({4, 5, 6});
  const Tensor rows = tensor(std::vector<int64_t>{3, 0, -1}, kInt64);
  const Tensor cols = tensor(std::vector<int64_t>{5, 2, 2}, kInt64);
  const Tensor mask = gt(x.select(2, 0), 0.0);
  const auto same = [](const Tensor& cpu, const Tensor& gpu) {
    CHECK(gpu.is_cuda());
    CHECK(gpu.sizes() == cpu.sizes());
    CHECK(gpu.to(kCPU).to_vector<double>() == cpu.to_vector<double>());
  };
  const Tensor g = x.to(kCUDA);
  same(x.index({rows, Slice(), cols}), g.index({rows.to(kCUDA), Slice(), cols.to(kCUDA)}));
  same(
      x.index({Slice(), rows.narrow(0, 0, 2).view({2, 1}), cols.view({1, 3})}),
      g.index({Slice(), rows.narrow(0, 0, 2).view({2, 1}).to(kCUDA), cols.view({1, 3}).to(kCUDA)}));
  same(x.index({mask}), g.index({mask.to(kCUDA)}));
  same(x.index({"...", 1, Slice(None, None, 2)}), g.index({"...", 1, Slice(None, None, 2)}));
  Tensor a = x.clone(), b = g.clone();
  a.index_put_({rows, Slice(), cols}, 7.0);
  b.index_put_({rows.to(kCUDA), Slice(), cols.to(kCUDA)}, 7.0);
  same(a, b);
  a.index_put_({mask}, zeros({6}));
  b.index_put_({mask.to(kCUDA)}, zeros({6}, {.device = kCUDA}));
  same(a, b);
  const Tensor gx = g.clone().requires_grad_();
  sum(gx.index({rows, Slice(), cols})).backward();
  const Tensor cx = x.clone().requires_grad_();
  sum(cx.index({rows, Slice(), cols})).backward();
  same(cx.grad(), gx.grad());
}
