// Sorting and selection (ops/sort.cpp): argsort, sort, topk, kthvalue, median, quantile,
// nanquantile.
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
#include <string_view>
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
// The q-th quantiles (q a number, or a 0-d or 1-D tensor of input's dtype, in [0, 1]) of all
// elements or along dim, as torch.quantile (NOTE [Quantiles] in ops/sort.cpp): input float32 or
// float64; interpolation "linear", "lower", "higher", "nearest" or "midpoint"; a 1-D q adds a
// leading dim. A slice holding NaN gives NaN; nanquantile ignores NaN (NaN only when all are).
Tensor quantile(const Tensor& input, const Tensor& q, std::optional<int64_t> dim = std::nullopt,
                bool keepdim = false, std::string_view interpolation = "linear");
Tensor quantile(const Tensor& input, double q, std::optional<int64_t> dim = std::nullopt,
                bool keepdim = false, std::string_view interpolation = "linear");
Tensor nanquantile(const Tensor& input, const Tensor& q, std::optional<int64_t> dim = std::nullopt,
                   bool keepdim = false, std::string_view interpolation = "linear");
Tensor nanquantile(const Tensor& input, double q, std::optional<int64_t> dim = std::nullopt,
                   bool keepdim = false, std::string_view interpolation = "linear");

}  // namespace hg
