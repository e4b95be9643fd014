// The indices of Tensor::index and Tensor::index_put_, as libtorch's (torch::indexing):
//
//   using namespace hg::indexing;
//   Tensor row = x.index({0});                          // x[0]
//   Tensor cols = x.index({Slice(), Slice(1, None, 2)}); // x[:, 1::2]
//   Tensor last = x.index({"...", -1});                 // x[..., -1]
//   Tensor picked = x.index({mask});                    // x[mask], mask a bool tensor
//   x.index_put_({Slice(), idx}, 0.0);                  // x[:, idx] = 0
//
// An index is an integer, a Slice, None (a new dim of size 1), the Ellipsis ("..." or
// Ellipsis), true/false, or a tensor (int64/int32 positions, or a bool mask over as many dims as
// it has). The semantics are PyTorch's (ops/tensor_index.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "halfgrad/core/error.h"
#include "halfgrad/core/tensor.h"

namespace hg {

namespace indexing {

// start:stop:step, each optional (None), as Python's slice; step > 0.
struct Slice {
  Slice(std::optional<int64_t> start_ = std::nullopt, std::optional<int64_t> stop_ = std::nullopt,
        std::optional<int64_t> step_ = std::nullopt)
      : start(start_), stop(stop_), step(step_) {}
  std::optional<int64_t> start, stop, step;
};

struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};
inline constexpr std::nullopt_t None = std::nullopt;

}  // namespace indexing

class TensorIndex {
 public:
  enum class Kind { Integer, Slice, None, Ellipsis, Boolean, Tensor };

  TensorIndex(int64_t i) : kind_(Kind::Integer), integer_(i) {}
  TensorIndex(int i) : kind_(Kind::Integer), integer_(i) {}
  TensorIndex(bool b) : kind_(Kind::Boolean), boolean_(b) {}
  TensorIndex(indexing::Slice s) : kind_(Kind::Slice), slice_(s) {}
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}
  TensorIndex(indexing::EllipsisIndexType) : kind_(Kind::Ellipsis) {}
  TensorIndex(const char* text) : kind_(Kind::Ellipsis) {
    HG_CHECK(std::string_view(text) == "...",
             "index: expected \"...\" as the text of an index, got \"{}\"", text);
  }
  TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  bool boolean() const { return boolean_; }
  const indexing::Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  bool boolean_ = false;
  indexing::Slice slice_{};
  Tensor tensor_{};
};

}  // namespace hg
