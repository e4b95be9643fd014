// nn::Value: one argument or result of a module's forward, with its kind erased (what libtorch
// calls AnyValue and TorchScript an IValue, reduced to what forwards take and return).
//
//   Args args{x, Value(), int64_t(3)};             // forward(x, None, 3)
//   auto [out, state] = result.to<std::tuple<Tensor, std::tuple<Tensor, Tensor>>>();
//
// A Value is None, a Tensor, a bool, an integer, a floating number, a string or a tuple of
// Values. C++ types map onto those kinds through ValueTraits: std::optional<T> is None or a T,
// std::tuple, std::pair and std::vector are tuples, every integer type is an integer and every
// floating type a floating number. Hooks and nn::Sequential see a forward's inputs as Args and
// its result as one Value (NOTE [Module forward signature] in module.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "halfgrad/core/error.h"
#include "halfgrad/core/tensor.h"

namespace hg::nn {

class Value;
using Args = std::vector<Value>;

template <class T>
struct ValueTraits;

class Value {
 public:
  using Tuple = std::vector<Value>;

  Value() = default;  // None
  Value(Tensor tensor) : data_(std::move(tensor)) {}
  Value(bool value) : data_(value) {}
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) Value(I value)
      : data_(static_cast<int64_t>(value)) {}
  template <class F>
  requires std::is_floating_point_v<F> Value(F value) : data_(static_cast<double>(value)) {}
  Value(std::string text) : data_(std::move(text)) {}
  Value(const char* text) : data_(std::string(text)) {}
  Value(Tuple elements) : data_(std::move(elements)) {}

  // Any type a Value converts from or ValueTraits knows (std::optional, std::nullopt,
  // std::tuple, std::pair, std::vector, ...).
  template <class T>
  static Value from(T&& value) {
    using Plain = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<Plain, std::nullopt_t>) {
      return Value();
    } else if constexpr (std::is_convertible_v<T, Value>) {
      return Value(std::forward<T>(value));
    } else {
      return ValueTraits<Plain>::to_value(std::forward<T>(value));
    }
  }
  // This value as a T; an hg::Error naming `what` (e.g. "LSTM.forward argument 1"), the kind
  // expected and the kind held when it is not one.
  template <class T>
  T to(const char* what = "value") const {
    return ValueTraits<T>::from_value(*this, what);
  }

  bool is_none() const { return std::holds_alternative<std::monostate>(data_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_double() const { return std::holds_alternative<double>(data_); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_tuple() const { return std::holds_alternative<Tuple>(data_); }

  // The held value; an hg::Error naming what and the kind held otherwise. A bool or an integer
  // reads as a double, as Python's float(3) does.
  const Tensor& tensor(const char* what = "value") const;
  bool to_bool(const char* what = "value") const;
  int64_t to_int(const char* what = "value") const;
  double to_double(const char* what = "value") const;
  const std::string& string(const char* what = "value") const;
  const Tuple& tuple(const char* what = "value") const;

  // The kind as a Python user reads it ("None", "Tensor", "bool", "int", "float", "str") and a
  // tuple with its elements' kinds ("tuple(Tensor, None)").
  std::string kind() const;

 private:
  std::variant<std::monostate, Tensor, bool, int64_t, double, std::string, Tuple> data_;
};

// The kinds of a list of values, as a call would print them: "(Tensor, int)".
std::string describe(const Args& args);

// ---- ValueTraits: how a C++ type maps onto a Value ---------------------------------------------

template <>
struct ValueTraits<Value> {
  static Value to_value(Value value) { return value; }
  static Value from_value(const Value& value, const char*) { return value; }
};

template <>
struct ValueTraits<Tensor> {
  static Value to_value(Tensor tensor) { return Value(std::move(tensor)); }
  static Tensor from_value(const Value& value, const char* what) { return value.tensor(what); }
};

template <>
struct ValueTraits<bool> {
  static Value to_value(bool value) { return Value(value); }
  static bool from_value(const Value& value, const char* what) { return value.to_bool(what); }
};

template <class I>
requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) struct ValueTraits<I> {
  static Value to_value(I value) { return Value(value); }
  static I from_value(const Value& value, const char* what) {
    const int64_t v = value.to_int(what);
    HG_CHECK(std::in_range<I>(v), "{}: expected an integer that fits the parameter, got {}", what,
             v);
    return static_cast<I>(v);
  }
};

template <class F>
requires std::is_floating_point_v<F>
struct ValueTraits<F> {
  static Value to_value(F value) { return Value(value); }
  static F from_value(const Value& value, const char* what) {
    return static_cast<F>(value.to_double(what));
  }
};

template <>
struct ValueTraits<std::string> {
  static Value to_value(std::string text) { return Value(std::move(text)); }
  static std::string from_value(const Value& value, const char* what) { return value.string(what); }
};

template <class T>
struct ValueTraits<std::optional<T>> {
  static Value to_value(const std::optional<T>& value) {
    return value ? Value::from(*value) : Value();
  }
  static std::optional<T> from_value(const Value& value, const char* what) {
    if (value.is_none()) return std::nullopt;
    return value.to<T>(what);
  }
};

template <class T>
struct ValueTraits<std::vector<T>> {
  static Value to_value(const std::vector<T>& elements) {
    Value::Tuple out;
    out.reserve(elements.size());
    for (const T& e : elements) out.push_back(Value::from(e));
    return Value(std::move(out));
  }
  static std::vector<T> from_value(const Value& value, const char* what) {
    std::vector<T> out;
    for (const Value& e : value.tuple(what)) out.push_back(e.to<T>(what));
    return out;
  }
};

namespace detail {
// The tuple of `value` as exactly `size` elements (an hg::Error naming what otherwise).
const Value::Tuple& tuple_of_size(const Value& value, size_t size, const char* what);
}  // namespace detail

template <class... T>
struct ValueTraits<std::tuple<T...>> {
  static Value to_value(const std::tuple<T...>& elements) {
    return std::apply([](const T&... e) { return Value(Value::Tuple{Value::from(e)...}); },
                      elements);
  }
  static std::tuple<T...> from_value(const Value& value, const char* what) {
    const Value::Tuple& elements = detail::tuple_of_size(value, sizeof...(T), what);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<T...>(elements[I].template to<T>(what)...);
    }
    (std::index_sequence_for<T...>{});
  }
};

template <class A, class B>
struct ValueTraits<std::pair<A, B>> {
  static Value to_value(const std::pair<A, B>& p) {
    return Value(Value::Tuple{Value::from(p.first), Value::from(p.second)});
  }
  static std::pair<A, B> from_value(const Value& value, const char* what) {
    const Value::Tuple& elements = detail::tuple_of_size(value, 2, what);
    return {elements[0].template to<A>(what), elements[1].template to<B>(what)};
  }
};

}  // namespace hg::nn
