// The CUDA backend's kernel tables: one per family of HG_KERNEL_FAMILIES (kernel/families.h),
// with the CPU backend's semantics and errors on tensors of one CUDA device. cuda/<family>.cpp
// defines each; ops/kernel_lookup.h
// picks these or the CPU backend's tables (cpu/kernel_tables.h) by the device of a tensor argument.
#pragma once

#include "halfgrad/kernel/families.h"

namespace hg::cuda {

#define HG_DECLARE_TABLE(family, Family) extern const kernel::Family##Kernels family##_kernels;
HG_KERNEL_FAMILIES(HG_DECLARE_TABLE)
#undef HG_DECLARE_TABLE

}  // namespace hg::cuda
