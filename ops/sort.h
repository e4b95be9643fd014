// Sorting and selection (ops/sort.cpp): argsort, sort, topk, kthvalue, median.
//
//   auto [values, indices] = hg::topk(logits, 5);               // the 5 largest along dim -1
//   Tensor order = hg::argsort(x, 0, /*descending=*/true);
//
// torch's names, arguments and order: NaN sorts as the largest value; the sort is stable (equal
// elements keep their order, whatever `stable` says: torch's stable=True order). Indices are
// int64; values get gradients through the positions they came from (gather's).
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>

#include "halfgrad/core/tensor.h"

namespace hg {

Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// {values, indices} of x sorted along dim.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false,
                                bool stable = false);
// The k largest (smallest with largest = false) along dim, in order: {values, indices}.
// `sorted` is accepted for torch's signature; the result is always in order.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
// The k-th smallest (k from 1) along dim: {values, indices}.
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1,
                                    bool keepdim = false);
// The lower median (the ((n - 1) / 2)-th smallest) of all elements, or along dim with its
// index. A row holding NaN has median NaN (at its first NaN), as torch's median.
Tensor median(const Tensor& x);
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace hg
