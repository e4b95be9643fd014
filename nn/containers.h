// torch.nn's containers besides Sequential: ModuleList, ModuleDict, ParameterList,
// ParameterDict. Their entries are ordinary children and parameters, named "0", "1", ... in
// the lists and by key in the dicts, so parameters(), state_dict() ("layers.0.weight"), to(),
// train()/eval() and apply() reach them as torch's do. None has a forward: the owner calls
// the entries.
//
//   auto blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
//   for (int i = 0; i < n; ++i) blocks->append(nn::Linear(d, d));
//   for (const auto& block : *blocks) x = (*block)(x);
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "halfgrad/core/format.h"
#include "halfgrad/nn/module.h"

namespace hg::nn {

namespace detail {
// Iterates the values of a (name, value) list.
template <class Value>
class ValueIterator {
 public:
  using Base = typename std::vector<std::pair<std::string, Value>>::const_iterator;
  explicit ValueIterator(Base it) : it_(it) {}
  const Value& operator*() const { return it_->second; }
  const Value* operator->() const { return &it_->second; }
  ValueIterator& operator++() {
    ++it_;
    return *this;
  }
  bool operator==(const ValueIterator& other) const { return it_ == other.it_; }

 private:
  Base it_;
};

// A Python index (negative counts from the end) checked against size; `container` names the
// list in the error.
size_t list_index(const std::string& container, int64_t index, size_t size);
}  // namespace detail

// Sequential (modules.h) is a ModuleList with a forward.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(const std::vector<std::shared_ptr<Module>>& modules) { extend(modules); }
  std::string name() const override { return "ModuleList"; }

  template <class M>
  void append(std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "ModuleList holds nn::Module subclasses");
    register_module(std::to_string(size()), std::move(module));
  }
  template <class M>
  requires std::is_base_of_v<Module, std::remove_cvref_t<M>>
  void append(M&& module) {
    append(std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module)));
  }
  void extend(const std::vector<std::shared_ptr<Module>>& modules) {
    for (const auto& m : modules) append(m);
  }

  size_t size() const { return child_entries().size(); }
  bool empty() const { return size() == 0; }
  // The module at index (negative: from the end); an hg::Error outside the list.
  const std::shared_ptr<Module>& operator[](int64_t index) const {
    return child_entries()[detail::list_index(name(), index, size())].second;
  }
  // The module at index as an M (an error when it is not one).
  template <class M>
  std::shared_ptr<M> at(int64_t index) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[index]);
    HG_CHECK(typed != nullptr, "{}::at({}): the module is a {}, not the type asked for", name(),
             index, (*this)[index]->name());
    return typed;
  }
  detail::ValueIterator<std::shared_ptr<Module>> begin() const {
    return detail::ValueIterator<std::shared_ptr<Module>>(child_entries().begin());
  }
  detail::ValueIterator<std::shared_ptr<Module>> end() const {
    return detail::ValueIterator<std::shared_ptr<Module>>(child_entries().end());
  }
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& items) {
    for (const auto& [key, module] : items) insert(key, module);
  }
  std::string name() const override { return "ModuleDict"; }

  // Adds the module under key, or replaces the one there (torch's dict[key] = module).
  void insert(const std::string& key, std::shared_ptr<Module> module) {
    set_child(key, std::move(module));
  }
  bool contains(const std::string& key) const;
  // The module under key; an hg::Error naming the key when there is none.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  size_t size() const { return child_entries().size(); }
  std::vector<std::string> keys() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& items() const {
    return child_entries();
  }
};

class ParameterList : public Module {
 public:
  ParameterList() = default;
  explicit ParameterList(const std::vector<Tensor>& parameters) {
    for (const Tensor& p : parameters) append(p);
  }
  std::string name() const override { return "ParameterList"; }
  std::string extra_repr() const override;

  // Registers a parameter (a leaf, made to require grad) as the next entry.
  Tensor& append(Tensor parameter) {
    return register_parameter(std::to_string(size()), std::move(parameter));
  }
  size_t size() const { return parameter_entries().size(); }
  const Tensor& operator[](int64_t index) const {
    return parameter_entries()[detail::list_index(name(), index, size())].second;
  }
  detail::ValueIterator<Tensor> begin() const {
    return detail::ValueIterator<Tensor>(parameter_entries().begin());
  }
  detail::ValueIterator<Tensor> end() const {
    return detail::ValueIterator<Tensor>(parameter_entries().end());
  }
};

class ParameterDict : public Module {
 public:
  ParameterDict() = default;
  explicit ParameterDict(const std::vector<std::pair<std::string, Tensor>>& items) {
    for (const auto& [key, parameter] : items) insert(key, parameter);
  }
  std::string name() const override { return "ParameterDict"; }
  std::string extra_repr() const override;

  // Adds the parameter under key, or replaces the one there.
  Tensor& insert(const std::string& key, Tensor parameter) {
    return set_parameter(key, std::move(parameter));
  }
  bool contains(const std::string& key) const;
  const Tensor& operator[](const std::string& key) const;
  size_t size() const { return parameter_entries().size(); }
  std::vector<std::string> keys() const;
  const std::vector<std::pair<std::string, Tensor>>& items() const { return parameter_entries(); }
};

}  // namespace hg::nn
