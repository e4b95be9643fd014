// Every kernel family's table type (kernel/<family>.h), and the list of the families both
// backends implement, from which cpu/kernel_tables.h and cuda/kernel_tables.h declare their tables.
#pragma once

#include "halfgrad/kernel/attention.h"
#include "halfgrad/kernel/conv.h"
#include "halfgrad/kernel/dropout.h"
#include "halfgrad/kernel/elementwise.h"
#include "halfgrad/kernel/embedding.h"
#include "halfgrad/kernel/index.h"
#include "halfgrad/kernel/linalg.h"
#include "halfgrad/kernel/loss.h"
#include "halfgrad/kernel/multi_tensor.h"
#include "halfgrad/kernel/norm.h"
#include "halfgrad/kernel/pool.h"
#include "halfgrad/kernel/reduce.h"

// X(family, Family) for each family with a table on every backend: the table's type is
// kernel::<Family>Kernels, a backend's table <backend>::<family>_kernels.
// clang-format off
#define HG_KERNEL_FAMILIES(X) \
  X(elementwise, Elementwise) \
  X(reduce, Reduce)           \
  X(linalg, Linalg)           \
  X(index, Index)             \
  X(norm, Norm)               \
  X(conv, Conv)               \
  X(pool, Pool)               \
  X(embedding, Embedding)     \
  X(dropout, Dropout)         \
  X(loss, Loss)               \
  X(attention, Attention)     \
  X(multi_tensor, MultiTensor)
// clang-format on
