// Tests for halfgrad/cuda/norm.{cpp,cu}: softmax, log_softmax, layer_norm, group_norm and
// batch_norm through the public ops on CUDA, forward and backward (.backward() / .grad()),
// against the CPU ops in float64 on the same (already rounded) inputs, for float32, float16 and
// bfloat16 (parameters in the input's dtype or float32); the row path (sub-warp, warp and block
// rows, 16-byte vectors and not: 1, 31, 1000, 2048, 50257 columns), other dims, non-contiguous
// inputs, the pieces of the parameter gradients, softmax's NaN and inf rules, batch_norm's
// running statistics, and bad arguments.
//
// Dims: N batch, C channels, G groups, T time, D the softmax dim.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

constexpr DType kDTypes[] = {kFloat32, kFloat16, kBFloat16};

// A leaf requiring grad (undefined stays undefined).
Tensor leaf(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor l = t.detach();
  l.requires_grad_();
  return l;
}

// The output of op(view(x), weight, bias), and the gradients of x, weight and bias after
// backward with grad_output g. `view` lets the op see a non-contiguous view of the leaf x.
struct Run {
  Tensor out, dx, dweight, dbias;
};
using NormOp = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
using ViewFn = std::function<Tensor(const Tensor&)>;

Run run(const NormOp& op, const ViewFn& view, const Tensor& x, const Tensor& weight,
        const Tensor& bias, const Tensor& g) {
  const Tensor xl = leaf(x), wl = leaf(weight), bl = leaf(bias);
  const Tensor out = op(view(xl), wl, bl);
  out.backward(g);
  return {out.detach(), xl.grad(), wl.defined() ? wl.grad() : Tensor(),
          bl.defined() ? bl.grad() : Tensor()};
}

Tensor identity_view(const Tensor& t) { return t; }

// Runs op on CUDA (x, weight, bias as given) and on the CPU in float64, and checks the output
// and every gradient. xhat: the reference's normalized input (view applied), and reduce_rows:
// the sum over the dims the parameter gradients sum over, for their tolerance scales.
void check_norm(const NormOp& op, const ViewFn& view, const Tensor& x, const Tensor& weight,
                const Tensor& bias, uint64_t seed, const Tensor& xhat,
                const std::function<Tensor(const Tensor&)>& reduce_rows) {
  const DType dtype = x.dtype();
  const Shape out_shape = view(x).sizes();
  const Tensor g = random_input(out_shape, dtype, seed);
  const Run got = run(op, view, to_cuda(x), to_cuda(weight), to_cuda(bias), to_cuda(g));
  const Run want = run(op, view, f64(x), f64(weight), f64(bias), f64(g));
  CHECK(got.out.is_cuda());
  CHECK(got.out.dtype() == dtype);
  CHECK(mismatch(got.out, want.out, tolerance_for(dtype)) == "");
  REQUIRE(got.dx.defined());
  CHECK(got.dx.dtype() == dtype);
  CHECK(mismatch(got.dx, want.dx, backward_tolerance(dtype)) == "");
  const Tensor g64 = f64(g);
  if (weight.defined()) {
    REQUIRE(got.dweight.defined());
    CHECK(got.dweight.dtype() == weight.dtype());
    CHECK(mismatch_scaled(got.dweight, want.dweight, reduce_rows(abs(mul(g64, xhat))),
                          backward_tolerance(weight.dtype())) == "");
  }
  if (bias.defined()) {
    REQUIRE(got.dbias.defined());
    CHECK(got.dbias.dtype() == bias.dtype());
    CHECK(mismatch_scaled(got.dbias, want.dbias, reduce_rows(abs(g64)),
                          backward_tolerance(bias.dtype())) == "");
  }
}

// The parameters' dtypes for input of dtype: its own, and float32 beside a 16-bit input (as a
// model keeps float32 norm parameters under autocast).
std::vector<DType> param_dtypes(DType dtype) {
  if (dtype == kFloat32) return {kFloat32};
  return {dtype, kFloat32};
}

enum class Affine { None, WeightOnly, Both };

}  // namespace

// ---- softmax --------------------------------------------------------------------------------

TEST_CASE("CUDA softmax and log_softmax match float64, forward and backward", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  struct Case {
    Shape shape;
    int64_t dim;
  };
  // The last dim: warp rows (1, 31, 1000: scalar and vector), block rows (2048 vector, 50257
  // scalar); other dims (inner 7, 231, 1600); a 1-D and a 0-d input.
  const std::vector<Case> cases = {
      {{7, 1}, -1},        {{7, 31}, -1},   {{7, 1000}, -1}, {{5, 2048}, 1},
      {{3, 50257}, -1},    {{1, 50257}, 1}, {{4, 33, 7}, 1}, {{4, 33, 7}, 0},
      {{2, 3, 40, 40}, 1}, {{1000}, 0},     {{}, 0},
  };
  uint64_t seed = 100;
  for (DType dtype : kDTypes) {
    for (const Case& c : cases) {
      for (bool log : {false, true}) {
        INFO(fmt::format("{} shape {} dim {} dtype {}", log ? "log_softmax" : "softmax", c.shape,
                         c.dim, dtype));
        const Tensor x = random_input(c.shape, dtype, seed++);
        const Tensor g = random_input(c.shape, dtype, seed++);
        const auto op = [&](const Tensor& in) {
          return log ? log_softmax(in, c.dim) : softmax(in, c.dim);
        };
        Tensor xc = leaf(to_cuda(x)), xr = leaf(x.to(kFloat64));
        const Tensor y = op(xc), yr = op(xr);
        CHECK(y.is_cuda());
        CHECK(y.dtype() == dtype);
        CHECK(mismatch(y, yr, tolerance_for(dtype)) == "");
        y.backward(to_cuda(g));
        yr.backward(g.to(kFloat64));
        REQUIRE(xc.grad().defined());
        CHECK(mismatch(xc.grad(), xr.grad(), backward_tolerance(dtype)) == "");
      }
    }
  }
}

TEST_CASE("CUDA softmax reads non-contiguous inputs", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kDTypes) {
    const Tensor base = random_input({1000, 7}, dtype, 201);
    for (int64_t dim : {0, 1}) {
      INFO(fmt::format("dim {} dtype {}", dim, dtype));
      const Tensor t = to_cuda(base).transpose(0, 1);  // [7, 1000], strides [1, 7]
      const Tensor want = base.to(kFloat64).transpose(0, 1);
      CHECK(mismatch(softmax(t, dim), softmax(want, dim), tolerance_for(dtype)) == "");
      CHECK(mismatch(log_softmax(t, dim), log_softmax(want, dim), tolerance_for(dtype)) == "");
      // Contiguous rows whose start is not 16-byte aligned (one element into the storage).
      const Tensor s = to_cuda(base).reshape({-1}).narrow(0, 1, 7 * 996).view({7, 996});
      const Tensor s_want = base.to(kFloat64).reshape({-1}).narrow(0, 1, 7 * 996).view({7, 996});
      CHECK_FALSE(s.storage_offset() == 0);
      CHECK(mismatch(softmax(s, dim), softmax(s_want, dim), tolerance_for(dtype)) == "");
      CHECK(mismatch(log_softmax(s, dim), log_softmax(s_want, dim), tolerance_for(dtype)) == "");
    }
  }
}

TEST_CASE("CUDA softmax follows the CPU kernel's NaN and inf rules", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  // +inf present -> NaN row; all -inf -> NaN row; -inf among finite values -> 0 there; NaN ->
  // NaN row; large values do not overflow.
  const std::vector<double> rows = {
      1.0,   kInf,  2.0,   3.0,    //
      -kInf, -kInf, -kInf, -kInf,  //
      -kInf, 0.0,   1.0,   2.0,    //
      1.0,   kNaN,  2.0,   3.0,    //
      80.0,  81.0,  79.0,  82.0,   //
      kInf,  kInf,  1.0,   2.0,    //
      kNaN,  -kInf, 1.0,   kInf,   //
  };
  for (DType dtype : kDTypes) {
    const Tensor x = tensor(rows, {7, 4}, kFloat64).to(dtype);
    for (bool log : {false, true}) {
      INFO(fmt::format("{} dtype {}", log ? "log_softmax" : "softmax", dtype));
      const Tensor got = log ? log_softmax(to_cuda(x), 1) : softmax(to_cuda(x), 1);
      const Tensor want = log ? log_softmax(x.to(kFloat64), 1) : softmax(x.to(kFloat64), 1);
      CHECK(mismatch_nan(got, want, tolerance_for(dtype)) == "");
      // The same along dim 0 (the strided kernel).
      const Tensor t = to_cuda(x).transpose(0, 1).contiguous();
      const Tensor got0 = log ? log_softmax(t, 0) : softmax(t, 0);
      CHECK(mismatch_nan(got0, want.transpose(0, 1), tolerance_for(dtype)) == "");
    }
  }
}

// ---- layer_norm -----------------------------------------------------------------------------

TEST_CASE("CUDA layer_norm matches float64, forward and backward", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  struct Case {
    Shape shape;
    Shape normalized;
  };
  // Warp rows (1, 31, 768 vector, 1000), block rows (4100), two normalized dims, and enough
  // rows (4096) for the parameter gradients' pieces.
  const std::vector<Case> cases = {
      {{2, 3, 1}, {1}},    {{2, 3, 31}, {31}},     {{4, 5, 768}, {768}}, {{3, 1000}, {1000}},
      {{2, 4100}, {4100}}, {{2, 3, 4, 5}, {4, 5}}, {{4096, 768}, {768}}, {{768}, {768}},
  };
  uint64_t seed = 300;
  for (DType dtype : kDTypes) {
    for (const Case& c : cases) {
      for (DType param : param_dtypes(dtype)) {
        for (Affine affine : {Affine::Both, Affine::WeightOnly, Affine::None}) {
          INFO(fmt::format("shape {} normalized {} dtype {} params {} affine {}", c.shape,
                           c.normalized, dtype, param, int(affine)));
          const Tensor x = random_input(c.shape, dtype, seed++);
          const Tensor w =
              affine != Affine::None ? random_input(c.normalized, param, seed++) : Tensor();
          const Tensor b =
              affine == Affine::Both ? random_input(c.normalized, param, seed++) : Tensor();
          const Shape normalized = c.normalized;
          const NormOp op = [normalized](const Tensor& in, const Tensor& weight,
                                         const Tensor& bias) {
            return layer_norm(in, normalized, weight, bias, 1e-5);
          };
          const Tensor xhat = layer_norm(x.to(kFloat64), normalized);
          Shape batch_dims;
          for (int64_t d = 0; d < int64_t(c.shape.size() - c.normalized.size()); ++d) {
            batch_dims.push_back(d);
          }
          const auto reduce_rows = [batch_dims](const Tensor& t) {
            return batch_dims.empty() ? t : sum(t, batch_dims);
          };
          check_norm(op, identity_view, x, w, b, seed++, xhat, reduce_rows);
        }
      }
    }
  }
}

TEST_CASE("CUDA layer_norm reads a non-contiguous input", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kDTypes) {
    INFO(fmt::format("dtype {}", dtype));
    // x [T, N, C] seen as [N, T, C] through a transpose.
    const Tensor x = random_input({6, 4, 768}, dtype, 401);
    const Tensor w = random_input({768}, dtype, 402), b = random_input({768}, dtype, 403);
    const NormOp op = [](const Tensor& in, const Tensor& weight, const Tensor& bias) {
      return layer_norm(in, {768}, weight, bias);
    };
    const ViewFn view = [](const Tensor& t) { return t.transpose(0, 1); };
    const Tensor xhat = layer_norm(x.to(kFloat64).transpose(0, 1), {768});
    check_norm(op, view, x, w, b, 404, xhat, [](const Tensor& t) { return sum(t, {0, 1}); });
  }
}

// ---- group_norm -----------------------------------------------------------------------------

TEST_CASE("CUDA group_norm matches float64, forward and backward", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  struct Case {
    Shape shape;
    int64_t groups;
  };
  // One group, several, one channel each; no spatial dims (S = 1); odd S; long rows (block);
  // one value per group (rstd = 1 / sqrt(eps), dx = 0). (Groups of two or three values are
  // left out: their rstd can be huge and float32's dx then differs from float64's by more than
  // the tolerance, on the CPU kernel as much as here.)
  const std::vector<Case> cases = {
      {{3, 6, 5, 7}, 1}, {{3, 6, 5, 7}, 2}, {{3, 6, 5, 7}, 6}, {{6, 16}, 2},
      {{2, 64, 33}, 32}, {{2, 4, 2000}, 2}, {{1, 3, 1}, 3},
  };
  uint64_t seed = 500;
  for (DType dtype : kDTypes) {
    for (const Case& c : cases) {
      for (DType param : param_dtypes(dtype)) {
        for (bool affine : {true, false}) {
          INFO(fmt::format("shape {} groups {} dtype {} params {} affine {}", c.shape, c.groups,
                           dtype, param, affine));
          const int64_t C = c.shape[1];
          const Tensor x = random_input(c.shape, dtype, seed++);
          const Tensor w = affine ? random_input({C}, param, seed++) : Tensor();
          const Tensor b = affine ? random_input({C}, param, seed++) : Tensor();
          const int64_t groups = c.groups;
          const NormOp op = [groups](const Tensor& in, const Tensor& weight, const Tensor& bias) {
            return group_norm(in, groups, weight, bias, 1e-5);
          };
          const Tensor xhat = group_norm(x.to(kFloat64), groups);
          Shape reduced{0};
          for (int64_t d = 2; d < int64_t(c.shape.size()); ++d) reduced.push_back(d);
          check_norm(op, identity_view, x, w, b, seed++, xhat,
                     [reduced](const Tensor& t) { return sum(t, reduced); });
        }
      }
    }
  }
}

// ---- batch_norm -----------------------------------------------------------------------------

TEST_CASE("CUDA batch_norm matches float64 in training and eval, with running statistics",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  // Images, no spatial dims (S = 1), odd S, and a channel of many values (its pieces).
  const std::vector<Shape> shapes = {{8, 6, 5, 7}, {32, 6}, {4, 3, 33}, {16, 2, 64, 64}};
  uint64_t seed = 700;
  for (DType dtype : kDTypes) {
    for (const Shape& shape : shapes) {
      for (bool training : {true, false}) {
        for (DType param : param_dtypes(dtype)) {
          for (bool affine : {true, false}) {
            INFO(fmt::format("shape {} dtype {} params {} training {} affine {}", shape, dtype,
                             param, training, affine));
            const int64_t C = shape[1];
            const Tensor x = random_input(shape, dtype, seed++);
            const Tensor w = affine ? random_input({C}, param, seed++) : Tensor();
            const Tensor b = affine ? random_input({C}, param, seed++) : Tensor();
            // Running statistics in float32 (a variance > 0).
            const Tensor mean0 = mul(random_input({C}, kFloat32, seed++), 0.1);
            const Tensor var0 = add(abs(random_input({C}, kFloat32, seed++)), 0.5);
            Tensor mean_cuda = to_cuda(mean0), var_cuda = to_cuda(var0);
            Tensor mean_cpu = mean0.clone(), var_cpu = var0.clone();
            const NormOp cuda_op = [&](const Tensor& in, const Tensor& weight, const Tensor& bias) {
              return batch_norm(in, mean_cuda, var_cuda, weight, bias, training, 0.3, 1e-5);
            };
            const NormOp cpu_op = [&](const Tensor& in, const Tensor& weight, const Tensor& bias) {
              return batch_norm(in, mean_cpu, var_cpu, weight, bias, training, 0.3, 1e-5);
            };
            const Tensor g = random_input(shape, dtype, seed++);
            const Run got =
                run(cuda_op, identity_view, to_cuda(x), to_cuda(w), to_cuda(b), to_cuda(g));
            const Run want =
                run(cpu_op, identity_view, x.to(kFloat64), f64(w), f64(b), g.to(kFloat64));
            CHECK(got.out.dtype() == dtype);
            CHECK(mismatch(got.out, want.out, tolerance_for(dtype)) == "");
            CHECK(mismatch(got.dx, want.dx, backward_tolerance(dtype)) == "");
            // The running statistics: updated in place when training (same values as the CPU's
            // update), untouched in eval.
            CHECK(mean_cuda.is_cuda());
            CHECK(mismatch(mean_cuda, mean_cpu, tolerance_for(kFloat32)) == "");
            CHECK(mismatch(var_cuda, var_cpu, tolerance_for(kFloat32)) == "");
            if (!training) CHECK(mismatch(mean_cuda, mean0, {0.0, 0.0}) == "");
            if (affine) {
              const Tensor xhat = training ? batch_norm(x.to(kFloat64), {}, {}, {}, {}, true)
                                           : batch_norm(x.to(kFloat64), mean0, var0);
              Shape reduced{0};
              for (int64_t d = 2; d < int64_t(shape.size()); ++d) reduced.push_back(d);
              const Tensor g64 = g.to(kFloat64);
              CHECK(got.dweight.dtype() == param);
              CHECK(mismatch_scaled(got.dweight, want.dweight, sum(abs(mul(g64, xhat)), reduced),
                                    backward_tolerance(param)) == "");
              CHECK(mismatch_scaled(got.dbias, want.dbias, sum(abs(g64), reduced),
                                    backward_tolerance(param)) == "");
            }
          }
        }
      }
    }
  }
}

TEST_CASE("CUDA batch_norm trains without running statistics", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kDTypes) {
    const Tensor x = random_input({5, 4, 9}, dtype, 801);
    const Tensor got = batch_norm(to_cuda(x), {}, {}, {}, {}, /*training=*/true);
    const Tensor want = batch_norm(x.to(kFloat64), {}, {}, {}, {}, true);
    CHECK(mismatch(got, want, tolerance_for(dtype)) == "");
  }
}

// ---- errors ---------------------------------------------------------------------------------

TEST_CASE("CUDA softmax and norms reject bad arguments as the CPU kernels do", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = to_cuda(random_input({2, 6, 3}, kFloat32, 901));
  CHECK_THROWS_AS(softmax(x, 3), Error);
  CHECK_THROWS_AS(log_softmax(x, -4), Error);
  CHECK_THROWS_AS(softmax(to_cuda(zeros({2, 3}, kInt64)), 1), Error);
  CHECK_THROWS_WITH(layer_norm(x, {4}), Contains("trailing dims"));
  CHECK_THROWS_WITH(layer_norm(x, {3}, to_cuda(ones({4}))), Contains("weight"));
  CHECK_THROWS_WITH(group_norm(x, 4), Contains("divide"));
  CHECK_THROWS_WITH(group_norm(x, 2, to_cuda(ones({5}))), Contains("weight"));
  CHECK_THROWS_WITH(batch_norm(x, {}, {}), Contains("eval mode"));
  CHECK_THROWS_WITH(batch_norm(to_cuda(ones({1, 6})), {}, {}, {}, {}, true),
                    Contains("more than 1 value"));
  CHECK_THROWS_WITH(batch_norm(x, to_cuda(zeros({6})), {}, {}, {}, true),
                    Contains("both given or both absent"));
  // The kernels' own checks (what the op layer does not check first).
  const Tensor y = cuda::norm_kernels.softmax(x, 1);
  CHECK_THROWS_WITH(cuda::norm_kernels.softmax_backward(y.to(kFloat16), y, 1), Contains("dtype"));
  CHECK_THROWS_WITH(cuda::norm_kernels.softmax_backward(y.narrow(1, 0, 2), y, 1),
                    Contains("shape"));
  const kernel::NormForward ln = cuda::norm_kernels.layer_norm(x, {3}, {}, {}, 1e-5);
  CHECK(ln.mean.dtype() == kFloat32);
  CHECK(ln.mean.sizes() == Shape{12});
  CHECK_THROWS_WITH(cuda::norm_kernels.layer_norm_backward(x, x, ln.mean.narrow(0, 0, 5), ln.rstd,
                                                           {3}, {}, false),
                    Contains("mean"));
  CHECK_THROWS_WITH(
      cuda::norm_kernels.layer_norm_backward(x.to(kFloat16), x, ln.mean, ln.rstd, {3}, {}, false),
      Contains("grad_output"));
  const kernel::NormForward gn = cuda::norm_kernels.group_norm(x, 3, {}, {}, 1e-5);
  CHECK(gn.mean.sizes() == Shape{2, 3});
  CHECK_THROWS_WITH(
      cuda::norm_kernels.group_norm_backward(x, x, gn.mean, gn.rstd.narrow(1, 0, 1), 3, {}, false),
      Contains("rstd"));
  const kernel::NormForward bn = cuda::norm_kernels.batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5);
  CHECK(bn.rstd.sizes() == Shape{6});
  CHECK_THROWS_WITH(cuda::norm_kernels.batch_norm_backward(x, x, bn.mean, bn.rstd.narrow(0, 0, 2),
                                                           {}, false, true),
                    Contains("rstd"));
  CHECK_THROWS_AS(cuda::norm_kernels.softmax(x.to(Device(kCPU)), 0), Error);
  CHECK_THROWS_WITH(cuda::norm_kernels.layer_norm(x, {3}, ones({3}), {}, 1e-5), Contains("CUDA"));
}
