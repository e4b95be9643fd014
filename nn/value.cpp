// nn::Value (value.h): the kinds a forward's arguments and results take, and the errors that
// name them.
#include "halfgrad/nn/value.h"

namespace hg::nn {

std::string Value::kind() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return "None";
        } else if constexpr (std::is_same_v<T, Tensor>) {
          return "Tensor";
        } else if constexpr (std::is_same_v<T, bool>) {
          return "bool";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return "int";
        } else if constexpr (std::is_same_v<T, double>) {
          return "float";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return "str";
        } else {
          return "tuple" + describe(v);
        }
      },
      data_);
}

std::string describe(const Args& args) {
  std::string out = "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ", ";
    out += args[i].kind();
  }
  return out + ")";
}

const Tensor& Value::tensor(const char* what) const {
  HG_CHECK(is_tensor(), "{}: expected a Tensor, got {}", what, kind());
  return std::get<Tensor>(data_);
}

bool Value::to_bool(const char* what) const {
  HG_CHECK(is_bool(), "{}: expected a bool, got {}", what, kind());
  return std::get<bool>(data_);
}

int64_t Value::to_int(const char* what) const {
  HG_CHECK(is_int(), "{}: expected an int, got {}", what, kind());
  return std::get<int64_t>(data_);
}

double Value::to_double(const char* what) const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(data_));
  if (is_bool()) return std::get<bool>(data_) ? 1.0 : 0.0;
  HG_CHECK(is_double(), "{}: expected a float, got {}", what, kind());
  return std::get<double>(data_);
}

const std::string& Value::string(const char* what) const {
  HG_CHECK(is_string(), "{}: expected a str, got {}", what, kind());
  return std::get<std::string>(data_);
}

const Value::Tuple& Value::tuple(const char* what) const {
  HG_CHECK(is_tuple(), "{}: expected a tuple, got {}", what, kind());
  return std::get<Tuple>(data_);
}

namespace detail {
const Value::Tuple& tuple_of_size(const Value& value, size_t size, const char* what) {
  const Value::Tuple& elements = value.tuple(what);
  HG_CHECK(elements.size() == size, "{}: expected a tuple of {} elements, got {}", what, size,
           value.kind());
  return elements;
}
}  // namespace detail

}  // namespace hg::nn
