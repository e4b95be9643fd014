// CPU kernel of the dropout family (kernel/dropout.h): the keep mask drawn from one uniform
// draw of the generator, and x * mask.
#include <algorithm>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/random.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/nn_common.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cpu {

namespace {

using kernel::DropoutForward;
using nn_common::acc_t;
using nn_common::load;
using nn_common::parallel_for;
using nn_common::store;

// ---- dropout ------------------------------------------------------------------------------

DropoutForward dropout(const Tensor& x, double p, Generator& gen) {
  const char* op = "dropout";
  kernel::check_dropout(op, x, p, kCPU);
  if (p == 0.0) return {x.clone(), ones(x.sizes(), x.dtype())};
  if (p == 1.0) return {zeros(x.sizes(), x.dtype()), zeros(x.sizes(), x.dtype())};
  const int64_t n = x.numel();
  std::vector<float> uniforms(static_cast<size_t>(n));
  random::fill_uniform(kFloat32, uniforms.data(), n, 0.0, 1.0, gen);
  const Tensor xc = x.contiguous();
  DropoutForward result{empty(x.sizes(), x.dtype()), empty(x.sizes(), x.dtype())};
  const double keep = 1.0 - p;
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // out = x * mask with the mask value as stored, so forward and the backward's dy * mask
    // scale by the same number (and a dropped NaN stays NaN, as x * 0 does in torch).
    const T scale = store<T>(1.0 / keep);
    const acc_t<T> scale_value = load(scale);
    const T* in = xc.data_ptr<T>();
    T* out = result.out.data_ptr<T>();
    T* mask = result.mask.data_ptr<T>();
    constexpr int64_t kChunk = 4096;
    parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](int64_t chunk) {
      const int64_t begin = chunk * kChunk, end = std::min(n, begin + kChunk);
      for (int64_t i = begin; i < end; ++i) {
        const bool kept = double(uniforms[size_t(i)]) < keep;
        mask[i] = kept ? scale : store<T>(0.0);
        out[i] = store<T>(load(in[i]) * (kept ? scale_value : acc_t<T>(0)));
      }
    });
  });
  return result;
}

}  // namespace

const kernel::DropoutKernels dropout_kernels = HG_DROPOUT_KERNELS;

}  // namespace hg::cpu
