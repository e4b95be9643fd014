// The CPU backend's kernel tables, one per family of HG_KERNEL_FAMILIES (kernel/families.h):
// kernel/<family>.h declares each table's functions with their contracts, cpu/<family>.cpp
// defines them. ops/kernel_lookup.h picks these or the CUDA backend's tables (cuda/kernel_tables.h)
// by the device of a tensor argument.
#pragma once

#include "halfgrad/kernel/families.h"

namespace hg::cpu {

#define HG_DECLARE_TABLE(family, Family) extern const kernel::Family##Kernels family##_kernels;
HG_KERNEL_FAMILIES(HG_DECLARE_TABLE)
#undef HG_DECLARE_TABLE

}  // namespace hg::cpu
