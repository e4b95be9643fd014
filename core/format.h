// fmt formatters (and ostream <<) for halfgrad's types, so messages and prints read:
//   fmt::print("{} {} {}\n", t.dtype(), t.device(), t.sizes());   // float16 cpu [2, 3]
//   fmt::print("{}\n", t);   // tensor([[1.0000, 2.5000], ...], shape=[2, 3], dtype=float16)
#pragma once

#include <ostream>
#include <string>

#include <fmt/format.h>

#include "halfgrad/core/tensor.h"

namespace hg {

// PyTorch-style text of a tensor: nested brackets, one number style for all elements
// (integral "1.", fixed "0.1250" or scientific "1.0000e-05"), columns aligned, and the
// middle of each long dim elided ("...") once the tensor has more than 1000 elements.
std::string to_string(const Tensor& tensor);

std::ostream& operator<<(std::ostream& out, DType dtype);
std::ostream& operator<<(std::ostream& out, Device device);
std::ostream& operator<<(std::ostream& out, const Shape& shape);
std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

}  // namespace hg

template <>
struct fmt::formatter<hg::DType> : fmt::formatter<std::string_view> {
  auto format(hg::DType dtype, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(hg::dtype_name(dtype), ctx);
  }
};

template <>
struct fmt::formatter<hg::DeviceType> : fmt::formatter<std::string_view> {
  auto format(hg::DeviceType type, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(hg::device_type_name(type), ctx);
  }
};

template <>
struct fmt::formatter<hg::Device> : fmt::formatter<std::string_view> {
  auto format(hg::Device device, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(
        device.is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", int(device.index)), ctx);
  }
};

template <>
struct fmt::formatter<hg::Shape> : fmt::formatter<std::string_view> {
  auto format(const hg::Shape& shape, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(
        fmt::format("[{}]", fmt::join(shape.begin(), shape.end(), ", ")), ctx);
  }
};

// Half, BFloat16 and the float8 types print as the float they hold, with float's format specs
// ("{:.3f}").
template <>
struct fmt::formatter<hg::Half> : fmt::formatter<float> {
  auto format(hg::Half value, format_context& ctx) const {
    return fmt::formatter<float>::format(static_cast<float>(value), ctx);
  }
};

template <>
struct fmt::formatter<hg::BFloat16> : fmt::formatter<float> {
  auto format(hg::BFloat16 value, format_context& ctx) const {
    return fmt::formatter<float>::format(static_cast<float>(value), ctx);
  }
};

template <class Format>
struct fmt::formatter<hg::Float8<Format>> : fmt::formatter<float> {
  auto format(hg::Float8<Format> value, format_context& ctx) const {
    return fmt::formatter<float>::format(static_cast<float>(value), ctx);
  }
};

template <>
struct fmt::formatter<hg::Tensor> : fmt::formatter<std::string_view> {
  auto format(const hg::Tensor& tensor, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(hg::to_string(tensor), ctx);
  }
};
