// Printing (format.h): tensors as torch prints them, and ostream << for the core types.
#include "halfgrad/core/format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "halfgrad/core/cast.h"

namespace hg {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;  // more elements than this: elide
constexpr int64_t kEdgeItems = 3;              // shown at each end of an elided dim
constexpr size_t kLineWidth = 80;
constexpr int64_t kEllipsis = -1;

enum class Style { Integral, Fixed, Scientific, Integer, Boolean };

class TensorPrinter {
 public:
  explicit TensorPrinter(const Tensor& tensor)
      : tensor_(tensor),
        values_(tensor.is_cpu() ? tensor : tensor.to(Device(kCPU))),  // printing waits for it
        summarize_(tensor.numel() > kSummarizeThreshold) {}

  std::string print() {
    collect(0, static_cast<const char*>(values_.data_ptr()));
    choose_style();
    for (const char* element : elements_) texts_.push_back(format_element(element));
    for (const std::string& text : texts_) width_ = std::max(width_, text.size());
    constexpr size_t kIndent = 7;  // strlen("tensor(")
    std::string body = build(0, kIndent);
    std::string out = "tensor(" + body;
    if (tensor_.dim() > 0) out += fmt::format(", shape={}", tensor_.sizes());
    out += fmt::format(", dtype={}", tensor_.dtype());
    if (!tensor_.is_cpu()) out += fmt::format(", device={}", tensor_.device());
    return out + ")";
  }

 private:
  std::vector<int64_t> shown_indices(int64_t size) const {
    std::vector<int64_t> indices;
    if (summarize_ && size > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) indices.push_back(i);
      indices.push_back(kEllipsis);
      for (int64_t i = size - kEdgeItems; i < size; ++i) indices.push_back(i);
    } else {
      for (int64_t i = 0; i < size; ++i) indices.push_back(i);
    }
    return indices;
  }

  const char* element_at(const char* base, int64_t depth, int64_t index) const {
    return base + index * values_.strides()[depth] * int64_t(values_.element_size());
  }

  // Gathers the addresses of the elements that will be shown, in print order.
  void collect(int64_t depth, const char* base) {
    if (depth == tensor_.dim()) {
      elements_.push_back(base);
      return;
    }
    for (int64_t index : shown_indices(tensor_.sizes()[depth])) {
      if (index != kEllipsis) collect(depth + 1, element_at(base, depth, index));
    }
  }

  double read_double(const char* element) const {
    return visit_any_dtype(tensor_.dtype(), [element](auto tag) {
      using T = typename decltype(tag)::type;
      T value;
      std::memcpy(&value, element, sizeof(T));
      return cast_value<double>(value);
    });
  }

  // PyTorch's choice: one style for all shown elements, picked from their magnitudes.
  void choose_style() {
    if (tensor_.dtype() == kBool) {
      style_ = Style::Boolean;
      return;
    }
    if (!tensor_.is_floating_point()) {
      style_ = Style::Integer;
      return;
    }
    bool all_integral = true;
    double max_abs = 0.0, min_abs = INFINITY;
    for (const char* element : elements_) {
      const double value = read_double(element);
      if (!std::isfinite(value)) continue;
      all_integral = all_integral && value == std::trunc(value);
      if (value == 0.0) continue;
      max_abs = std::max(max_abs, std::abs(value));
      min_abs = std::min(min_abs, std::abs(value));
    }
    const bool wide_range = max_abs > 0.0 && (max_abs / min_abs > 1000.0 || max_abs > 1e8);
    if (all_integral) {
      style_ = wide_range ? Style::Scientific : Style::Integral;
    } else {
      style_ = wide_range || (max_abs > 0.0 && min_abs < 1e-4) ? Style::Scientific : Style::Fixed;
    }
  }

  std::string format_element(const char* element) const {
    if (style_ == Style::Boolean) return *reinterpret_cast<const bool*>(element) ? "True" : "False";
    if (style_ == Style::Integer) {
      const int64_t value = visit_dtype(tensor_.dtype(), [element](auto tag) -> int64_t {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_integral_v<T>) {
          T stored;
          std::memcpy(&stored, element, sizeof(T));
          return int64_t(stored);
        } else {
          return 0;  // not reached: the Integer style is chosen for integer dtypes only
        }
      });
      return fmt::format("{}", value);
    }
    const double value = read_double(element);
    if (std::isnan(value)) return "nan";
    if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
    switch (style_) {
      case Style::Integral:
        return fmt::format("{:.0f}.", value);
      case Style::Scientific:
        return fmt::format("{:.4e}", value);
      default:
        return fmt::format("{:.4f}", value);
    }
  }

  std::string next_text() { return fmt::format("{:>{}}", texts_[next_++], width_); }

  std::string build(int64_t depth, size_t indent) {
    if (tensor_.dim() == 0) return texts_.at(next_++);
    if (tensor_.numel() == 0 && depth == 0) return "[]";
    const std::vector<int64_t> indices = shown_indices(tensor_.sizes()[depth]);
    std::string out = "[";
    const bool innermost = depth == tensor_.dim() - 1;
    size_t line = indent + 1;
    for (size_t k = 0; k < indices.size(); ++k) {
      if (innermost) {
        std::string piece = indices[k] == kEllipsis ? "..." : next_text();
        if (k > 0) {
          out += ",";
          if (line + 2 + piece.size() > kLineWidth) {
            out.push_back('\n');
            out.append(indent + 1, ' ');
            line = indent + 1;
          } else {
            out += " ";
            line += 2;
          }
        }
        out += piece;
        line += piece.size();
      } else {
        if (k > 0) {
          out.push_back(',');
          out.append(size_t(tensor_.dim() - depth - 1), '\n');
          out.append(indent + 1, ' ');
        }
        out += indices[k] == kEllipsis ? "..." : build(depth + 1, indent + 1);
      }
    }
    return out + "]";
  }

  const Tensor& tensor_;
  Tensor values_;  // tensor_ on the CPU
  bool summarize_;
  Style style_ = Style::Fixed;
  std::vector<const char*> elements_;
  std::vector<std::string> texts_;
  size_t width_ = 0;
  size_t next_ = 0;
};

}  // namespace

std::string to_string(const Tensor& tensor) {
  if (!tensor.defined()) return "tensor(undefined)";
  return TensorPrinter(tensor).print();  // it reads a CPU copy, and names tensor's device
}

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }
std::ostream& operator<<(std::ostream& out, Device device) {
  return out << fmt::format("{}", device);
}
std::ostream& operator<<(std::ostream& out, const Shape& shape) {
  return out << fmt::format("{}", shape);
}
std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  return out << to_string(tensor);
}

}  // namespace hg
