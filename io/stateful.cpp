// The state protocol (stateful.h): typed reads of a saved state, with errors that name the key.
#include "halfgrad/io/stateful.h"

#include <cmath>
#include <limits>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"

namespace hg::io {

namespace {

const StateValue& find_value(const ObjectState& state, const std::string& key,
                             const char* expected) {
  const auto found = state.values.find(key);
  HG_CHECK(found != state.values.end(), "expected the value \"{}\" ({}), it is missing", key,
           expected);
  return found->second;
}

// A float from a number or one of the strings a non-finite float is saved as.
bool as_double(const StateValue& value, double& out) {
  if (const auto* d = std::get_if<double>(&value)) {
    out = *d;
  } else if (const auto* i = std::get_if<int64_t>(&value)) {
    out = double(*i);
  } else if (const auto* u = std::get_if<uint64_t>(&value)) {
    out = double(*u);
  } else if (const auto* s = std::get_if<std::string>(&value)) {
    if (*s == "inf") {
      out = std::numeric_limits<double>::infinity();
    } else if (*s == "-inf") {
      out = -std::numeric_limits<double>::infinity();
    } else if (*s == "nan") {
      out = std::numeric_limits<double>::quiet_NaN();
    } else {
      return false;
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace

const char* state_value_type(const StateValue& value) {
  switch (value.index()) {
    case 0:
    case 1:
      return "an integer";
    case 2:
      return "a float";
    case 3:
      return "a string";
    default:
      return "a list of floats";
  }
}

int64_t ObjectState::get_int(const std::string& key) const {
  const StateValue& value = find_value(*this, key, "an integer");
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  const auto* u = std::get_if<uint64_t>(&value);
  HG_CHECK(u != nullptr && *u <= uint64_t(std::numeric_limits<int64_t>::max()),
           "\"{}\": expected an integer in the int64 range, got {}", key,
           u != nullptr ? fmt::format("{}", *u) : state_value_type(value));
  return int64_t(*u);
}

uint64_t ObjectState::get_uint(const std::string& key) const {
  const StateValue& value = find_value(*this, key, "an unsigned integer");
  if (const auto* u = std::get_if<uint64_t>(&value)) return *u;
  const auto* i = std::get_if<int64_t>(&value);
  HG_CHECK(i != nullptr && *i >= 0, "\"{}\": expected an unsigned integer, got {}", key,
           i != nullptr ? fmt::format("{}", *i) : state_value_type(value));
  return uint64_t(*i);
}

double ObjectState::get_double(const std::string& key) const {
  const StateValue& value = find_value(*this, key, "a number");
  double out = 0;
  HG_CHECK(as_double(value, out), "\"{}\": expected a number, got {}", key,
           state_value_type(value));
  return out;
}

const std::string& ObjectState::get_string(const std::string& key) const {
  const StateValue& value = find_value(*this, key, "a string");
  const auto* s = std::get_if<std::string>(&value);
  HG_CHECK(s != nullptr, "\"{}\": expected a string, got {}", key, state_value_type(value));
  return *s;
}

std::vector<double> ObjectState::get_doubles(const std::string& key) const {
  const StateValue& value = find_value(*this, key, "a list of numbers");
  const auto* list = std::get_if<std::vector<double>>(&value);
  HG_CHECK(list != nullptr, "\"{}\": expected a list of numbers, got {}", key,
           state_value_type(value));
  return *list;
}

const Tensor& ObjectState::get_tensor(const std::string& key) const {
  const auto found = tensors.find(key);
  HG_CHECK(found != tensors.end(), "expected the tensor \"{}\", it is missing", key);
  return found->second;
}

ObjectState ObjectState::part(const std::string& prefix) const {
  ObjectState out;
  for (const auto& [key, value] : values) {
    if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0) {
      out.values.emplace(key.substr(prefix.size()), value);
    }
  }
  for (const auto& [key, tensor] : tensors) {
    if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0) {
      out.tensors.emplace(key.substr(prefix.size()), tensor);
    }
  }
  return out;
}

void ObjectState::add_part(const std::string& prefix, const ObjectState& part) {
  for (const auto& [key, value] : part.values) values[prefix + key] = value;
  for (const auto& [key, tensor] : part.tensors) tensors[prefix + key] = tensor;
}

}  // namespace hg::io
