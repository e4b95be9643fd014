// bf16_params, shared by the optimizers (optim/ internal); the fused passes themselves are the
// multi_tensor family's (kernel/multi_tensor.h, cpu/multi_tensor.cpp, cuda/multi_tensor.cu).
#pragma once

#include <vector>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::optim::detail {

// NOTE [bf16_params] The optimizers' bf16_params option (every optimizer of the skeleton,
// fused_optimizer.h, takes it) trains bfloat16 parameters with no float32 master copy, as llm.c
// does: the state buffers are float32, each element's update is computed in float32 from the
// widened parameter, and the new value is stored with stochastic rounding
// (NOTE [Stochastic rounding] in core/stochastic_rounding.h). Round to nearest would drop every
// update smaller than half an ulp of the weight (1/256 of it in bfloat16), so small learning rates
// stop training; rounded stochastically the weight moves by the update on average. Each parameter
// stepped draws ceil(numel / 4) Philox blocks from the optimizer's generator, in group and
// parameter order; element i reads word i % 4 of block first + i / 4, as the cast does, on the CPU
// and in the CUDA kernels alike. (On CUDA the words are drawn even when found_inf skips the step,
// which the host cannot see; on the CPU a skipped step draws nothing.)

// bf16_params' check: every parameter of every group is bfloat16.
inline void check_bf16_params(const char* optimizer, const std::vector<ParamGroup>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const DType dtype = groups[g].params[i].dtype();
      HG_CHECK(dtype == kBFloat16,
               "{}: bf16_params expects bfloat16 parameters, got {} (parameter {} of group {}); "
               "convert the model with .to(kBFloat16) first",
               optimizer, dtype_name(dtype), i, g);
    }
  }
}

}  // namespace hg::optim::detail
