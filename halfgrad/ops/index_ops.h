// Indexing and shape ops: where, masked_fill, cat, stack, split, chunk, gather, scatter_add,
// index_select, index_put, one_hot, and max/min along a dim (ops/index_ops.cpp).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg {}  // namespace hg
