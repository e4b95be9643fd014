// The CPU multi_tensor table's switch for tests (the table itself: cpu/kernel_tables.h,
// contract: kernel/multi_tensor.h).
#pragma once

namespace hg::cpu::detail {

// Switches the AVX-512 passes of the multi_tensor table (Adam's and SGD's float32 passes and the
// float32 unscale: NOTE [Vectorized optimizer passes] in multi_tensor_avx512.cpp) on or off,
// process-wide; returns the previous setting. For tests, which compare them with the scalar
// loops. Without AVX-512 the scalar loops run either way.
bool set_vector_passes(bool enabled);

}  // namespace hg::cpu::detail
