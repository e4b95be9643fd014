// The containers (containers.h): lookups and printed forms.
#include "halfgrad/nn/containers.h"

#include <algorithm>

namespace hg::nn {

size_t detail::list_index(const std::string& container, int64_t index, size_t size) {
  const int64_t n = int64_t(size);
  HG_CHECK(index >= -n && index < n, "{}: index {} is out of range for {} entries", container,
           index, n);
  return size_t(index < 0 ? index + n : index);
}

namespace {

template <class Entries>
auto find_key(const Entries& entries, const std::string& key) {
  return std::find_if(entries.begin(), entries.end(),
                      [&](const auto& e) { return e.first == key; });
}

template <class Entries>
std::vector<std::string> keys_of(const Entries& entries) {
  std::vector<std::string> keys;
  for (const auto& e : entries) keys.push_back(e.first);
  return keys;
}

// torch's ParameterList/ParameterDict lines, indented by two as torch's: "  (key): Parameter
// containing: [float32 of size 3x4]" (torch prints torch.float32).
template <class Entries>
std::string describe_parameters(const Entries& entries) {
  std::string out;
  for (const auto& [key, p] : entries) {
    std::string size;
    for (int64_t d = 0; d < p.dim(); ++d) {
      if (d > 0) size += 'x';
      size += std::to_string(p.size(d));
    }
    out += fmt::format("{}  ({}): Parameter containing: [{} of size {}]", out.empty() ? "" : "\n",
                       key, p.dtype(), size);
  }
  return out;
}

}  // namespace

bool ModuleDict::contains(const std::string& key) const {
  return find_key(child_entries(), key) != child_entries().end();
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  const auto found = find_key(child_entries(), key);
  HG_CHECK(found != child_entries().end(), "ModuleDict: no module under the key \"{}\"", key);
  return found->second;
}

std::vector<std::string> ModuleDict::keys() const { return keys_of(child_entries()); }

std::string ParameterList::extra_repr() const { return describe_parameters(parameter_entries()); }

bool ParameterDict::contains(const std::string& key) const {
  return find_key(parameter_entries(), key) != parameter_entries().end();
}

const Tensor& ParameterDict::operator[](const std::string& key) const {
  const auto found = find_key(parameter_entries(), key);
  HG_CHECK(found != parameter_entries().end(), "ParameterDict: no parameter under the key \"{}\"",
           key);
  return found->second;
}

std::vector<std::string> ParameterDict::keys() const { return keys_of(parameter_entries()); }

std::string ParameterDict::extra_repr() const { return describe_parameters(parameter_entries()); }

}  // namespace hg::nn
