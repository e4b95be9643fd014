// Checkpoints (checkpoint.h): a model, its optimizer and the named states of everything else a
// resume needs saved to one safetensors file, and checked as they are loaded back; the adapters
// of halfgrad's stateful types below io to the state protocol (stateful.h).
#include "halfgrad/io/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/amp/initialize.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"
#include "halfgrad/cpu/kernel_choices.h"
#include "halfgrad/io/safetensors.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/ops/fp8.h"
#include "halfgrad/optim/lr_scheduler.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::io {

namespace {

using json = nlohmann::json;

constexpr std::string_view kFormat = "halfgrad-checkpoint";
constexpr std::string_view kVersion = "2";
constexpr std::string_view kModelPrefix = "model.";
constexpr std::string_view kStatePrefix = "optimizer.state.";
constexpr std::string_view kExtraPrefix = "extra.";

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The JSON of metadata entry `key`, or an error naming the file and the key.
json metadata_json(const std::map<std::string, std::string>& metadata, const std::string& key,
                   const std::string& path) {
  const auto found = metadata.find(key);
  HG_CHECK(found != metadata.end(),
           "load_checkpoint: \"{}\": expected the metadata key \"{}\", it is missing", path, key);
  json value = json::parse(found->second, nullptr, /*allow_exceptions=*/false);
  HG_CHECK(!value.is_discarded(), "load_checkpoint: \"{}\": metadata \"{}\" is not valid JSON",
           path, key);
  return value;
}

// {"name": number, ...} -> map; an error naming the metadata key otherwise.
std::map<std::string, double> number_map(const json& value, const std::string& key,
                                         const std::string& path) {
  HG_CHECK(value.is_object(), "load_checkpoint: \"{}\": expected \"{}\" to be an object, got {}",
           path, key, value.type_name());
  std::map<std::string, double> out;
  for (const auto& [name, item] : value.items()) {
    HG_CHECK(item.is_number(), "load_checkpoint: \"{}\": \"{}\" entry \"{}\": expected a number",
             path, key, name);
    out.emplace(name, item.get<double>());
  }
  return out;
}

optim::OptimizerStateDict optimizer_state(const TensorMap& tensors,
                                          const std::map<std::string, std::string>& metadata,
                                          const std::string& path) {
  optim::OptimizerStateDict state;
  const json groups = metadata_json(metadata, "optimizer.param_groups", path);
  HG_CHECK(groups.is_array(),
           "load_checkpoint: \"{}\": expected \"optimizer.param_groups\" to be an array, got {}",
           path, groups.type_name());
  for (const json& group : groups) {
    HG_CHECK(group.is_object() && group.contains("options") && group.contains("params") &&
                 group["params"].is_array(),
             "load_checkpoint: \"{}\": expected each of \"optimizer.param_groups\" to hold "
             "options and params",
             path);
    optim::OptimizerStateDict::Group loaded;
    loaded.options = number_map(group["options"], "optimizer.param_groups", path);
    for (const json& index : group["params"]) {
      HG_CHECK(index.is_number_integer(),
               "load_checkpoint: \"{}\": expected integer parameter indices in "
               "\"optimizer.param_groups\", got {}",
               path, index.dump());
      loaded.params.push_back(index.get<int64_t>());
    }
    state.param_groups.push_back(std::move(loaded));
  }
  for (const auto& [key, tensor] : tensors) {
    if (!starts_with(key, kStatePrefix)) continue;
    const std::string_view rest = std::string_view(key).substr(kStatePrefix.size());
    const size_t dot = rest.find('.');
    int64_t index = -1;
    const auto [end, error] =
        std::from_chars(rest.data(), rest.data() + std::min(dot, rest.size()), index);
    HG_CHECK(dot != std::string_view::npos && dot + 1 < rest.size() && error == std::errc() &&
                 end == rest.data() + dot && index >= 0,
             "load_checkpoint: \"{}\": key \"{}\": expected optimizer.state.<index>.<name>", path,
             key);
    state.state[index][std::string(rest.substr(dot + 1))] = tensor;
  }
  return state;
}

// The checkpoint's model entries against the model: the same keys, shapes and dtypes. Every
// mismatch is added to `problems`.
void check_model_state(const nn::Module& model, const TensorMap& loaded,
                       std::vector<std::string>& problems) {
  const nn::StateDict own = model.state_dict();
  for (const auto& [key, tensor] : own) {
    const auto found = loaded.find(key);
    if (found == loaded.end()) {
      problems.push_back(fmt::format("missing key \"{}{}\" (the model has it, the checkpoint not)",
                                     kModelPrefix, key));
    } else if (found->second.sizes() != tensor.sizes() || found->second.dtype() != tensor.dtype()) {
      problems.push_back(fmt::format("key \"{}{}\": expected {} of shape {}, got {} of shape {}",
                                     kModelPrefix, key, dtype_name(tensor.dtype()), tensor.sizes(),
                                     dtype_name(found->second.dtype()), found->second.sizes()));
    }
  }
  for (const auto& [key, tensor] : loaded) {
    if (own.count(key) == 0) {
      problems.push_back(
          fmt::format("unexpected key \"{}{}\" (the model has no such parameter or buffer)",
                      kModelPrefix, key));
    }
  }
}

// ---- the state protocol's values as JSON (NOTE [Checkpoint state protocol]) ----------------

json float_json(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

json value_json(const StateValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, double>) {
          return float_json(v);
        } else if constexpr (std::is_same_v<V, std::vector<double>>) {
          json list = json::array();
          for (double d : v) list.push_back(float_json(d));
          return list;
        } else {
          return v;
        }
      },
      value);
}

// A JSON value read back; nullopt for one the protocol does not write.
std::optional<StateValue> json_value(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u <= uint64_t(std::numeric_limits<int64_t>::max())) return StateValue(int64_t(u));
    return StateValue(u);
  }
  if (value.is_number_integer()) return StateValue(value.get<int64_t>());
  if (value.is_number_float()) return StateValue(value.get<double>());
  if (value.is_string()) return StateValue(value.get<std::string>());
  if (value.is_array()) {  // of numbers, and the strings non-finite ones are written as
    std::vector<double> list;
    for (const json& item : value) {
      if (item.is_number()) {
        list.push_back(item.get<double>());
      } else if (item == "inf" || item == "-inf" || item == "nan") {
        list.push_back(item == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                       : item == "inf" ? std::numeric_limits<double>::infinity()
                                       : -std::numeric_limits<double>::infinity());
      } else {
        return std::nullopt;
      }
    }
    return StateValue(std::move(list));
  }
  return std::nullopt;
}

// ---- halfgrad's types below io, adapted to the protocol ---------------------------------------

class SchedulerState : public Stateful {
 public:
  explicit SchedulerState(optim::LRScheduler& scheduler) : scheduler_(scheduler) {}
  std::string state_kind() const override { return scheduler_.name(); }
  ObjectState state_dict() const override {
    const optim::LRSchedulerStateDict state = scheduler_.state_dict();
    ObjectState out;
    out.values = {
        {"last_epoch", state.last_epoch}, {"base_lrs", state.base_lrs}, {"last_lr", state.last_lr}};
    for (const auto& [key, value] : state.extra) out.values.emplace(key, value);
    return out;
  }
  void check_state_dict(const ObjectState& state) const override {
    scheduler_.check_state_dict(read(state));
  }
  void load_state_dict(const ObjectState& state) override {
    scheduler_.load_state_dict(read(state));
  }

 private:
  static optim::LRSchedulerStateDict read(const ObjectState& state) {
    HG_CHECK(state.tensors.empty(), "expected no tensors, got \"{}\"",
             state.tensors.empty() ? std::string() : state.tensors.begin()->first);
    optim::LRSchedulerStateDict out;
    out.last_epoch = state.get_int("last_epoch");
    out.base_lrs = state.get_doubles("base_lrs");
    out.last_lr = state.get_doubles("last_lr");
    for (const auto& [key, value] : state.values) {
      if (key != "last_epoch" && key != "base_lrs" && key != "last_lr") {
        out.extra[key] = state.get_double(key);
      }
    }
    return out;
  }
  optim::LRScheduler& scheduler_;
};

class PlateauState : public Stateful {
 public:
  explicit PlateauState(optim::ReduceLROnPlateau& scheduler) : scheduler_(scheduler) {}
  std::string state_kind() const override { return "ReduceLROnPlateau"; }
  ObjectState state_dict() const override {
    const optim::PlateauStateDict state = scheduler_.state_dict();
    ObjectState out;
    out.values = {{"last_epoch", state.last_epoch},
                  {"best", state.best},
                  {"num_bad_epochs", state.num_bad_epochs},
                  {"cooldown_counter", state.cooldown_counter},
                  {"last_lr", state.last_lr}};
    return out;
  }
  void check_state_dict(const ObjectState& state) const override { read(state); }
  void load_state_dict(const ObjectState& state) override {
    scheduler_.load_state_dict(read(state));
  }

 private:
  optim::PlateauStateDict read(const ObjectState& state) const {
    HG_CHECK(state.values.size() == 5 && state.tensors.empty(),
             "expected last_epoch, best, num_bad_epochs, cooldown_counter and last_lr, got {} "
             "values and {} tensors",
             state.values.size(), state.tensors.size());
    optim::PlateauStateDict out;
    out.last_epoch = state.get_int("last_epoch");
    out.best = state.get_double("best");
    out.num_bad_epochs = state.get_int("num_bad_epochs");
    out.cooldown_counter = state.get_int("cooldown_counter");
    out.last_lr = state.get_doubles("last_lr");
    HG_CHECK(out.last_epoch >= 0 && out.num_bad_epochs >= 0 && out.cooldown_counter >= 0,
             "expected last_epoch, num_bad_epochs and cooldown_counter >= 0, got {}, {} and {}",
             out.last_epoch, out.num_bad_epochs, out.cooldown_counter);
    HG_CHECK(out.last_lr.size() == scheduler_.get_last_lr().size(),
             "expected one last_lr per param group ({}), got {}", scheduler_.get_last_lr().size(),
             out.last_lr.size());
    return out;
  }
  optim::ReduceLROnPlateau& scheduler_;
};

// GradScaler::load_state_dict checks the values' ranges itself: the check here is of their
// types, and load_checkpoint puts a scaler back when a later load fails.
class ScalerState : public Stateful {
 public:
  explicit ScalerState(amp::GradScaler& scaler) : scaler_(scaler) {}
  std::string state_kind() const override { return "GradScaler"; }
  ObjectState state_dict() const override {
    ObjectState out;
    for (const auto& [key, value] : scaler_.state_dict()) out.values.emplace(key, value);
    return out;
  }
  void check_state_dict(const ObjectState& state) const override { read(state); }
  void load_state_dict(const ObjectState& state) override { scaler_.load_state_dict(read(state)); }
  amp::GradScaler& scaler() { return scaler_; }

 private:
  static std::map<std::string, double> read(const ObjectState& state) {
    HG_CHECK(state.tensors.empty(), "expected no tensors, got \"{}\"",
             state.tensors.empty() ? std::string() : state.tensors.begin()->first);
    std::map<std::string, double> out;
    for (const auto& [key, value] : state.values) out[key] = state.get_double(key);
    return out;
  }
  amp::GradScaler& scaler_;
};

// amp::initialize's handle: values "opt_level", "overflow" and its loss scaler's keys under
// "loss_scaler.", tensors "master_weights.<group>.<index>" (the float32 masters, with master
// weights). The handle checks the values; the tensors expected are the handle's own masters.
class AmpHandleAdapter : public Stateful {
 public:
  explicit AmpHandleAdapter(amp::AmpHandle& handle) : handle_(handle) {}
  std::string state_kind() const override { return "AmpHandle"; }
  ObjectState state_dict() const override {
    const amp::AmpHandleState state = handle_.checkpoint_state();
    ObjectState out;
    out.values["opt_level"] = std::string(amp::opt_level_name(state.opt_level));
    out.values["overflow"] = int64_t(state.overflow);
    for (const auto& [key, value] : state.loss_scaler) {
      out.values.emplace(std::string(kScalerPrefix) + key, value);
    }
    for (size_t g = 0; g < state.master_weights.size(); ++g) {
      for (size_t i = 0; i < state.master_weights[g].size(); ++i) {
        out.tensors[master_key(g, i)] = state.master_weights[g][i];
      }
    }
    return out;
  }
  void check_state_dict(const ObjectState& state) const override {
    const Read read_state = read(state);
    handle_.check_checkpoint_state(read_state.state);  // the opt level first, then the rest
    HG_CHECK(read_state.tensors_used == state.tensors.size(),
             "expected only the handle's {} master weights as tensors, got {} tensors",
             read_state.tensors_used, state.tensors.size());
  }
  void load_state_dict(const ObjectState& state) override {
    handle_.load_checkpoint_state(read(state).state);
  }

 private:
  static constexpr std::string_view kScalerPrefix = "loss_scaler.";
  static std::string master_key(size_t group, size_t index) {
    return fmt::format("master_weights.{}.{}", group, index);
  }
  struct Read {
    amp::AmpHandleState state;
    size_t tensors_used = 0;
  };
  // The values, and the masters found under the keys of the handle's own masters (a group stops
  // at its first missing key, for the handle's check to name the count it expected).
  Read read(const ObjectState& state) const {
    Read out;
    out.state.opt_level = amp::opt_level_from_string(state.get_string("opt_level"));
    const int64_t overflow = state.get_int("overflow");
    HG_CHECK(overflow == 0 || overflow == 1, "\"overflow\": expected 0 or 1, got {}", overflow);
    out.state.overflow = overflow == 1;
    for (const auto& [key, value] : state.values) {
      if (key == "opt_level" || key == "overflow") continue;
      HG_CHECK(starts_with(key, kScalerPrefix),
               "expected opt_level, overflow and loss_scaler.* values, got \"{}\"", key);
      out.state.loss_scaler[key.substr(kScalerPrefix.size())] = state.get_double(key);
    }
    const std::vector<size_t> own = handle_.master_weight_counts();
    for (size_t g = 0; g < own.size(); ++g) {
      std::vector<Tensor> masters;
      for (size_t i = 0; i < own[g]; ++i) {
        const auto found = state.tensors.find(master_key(g, i));
        if (found == state.tensors.end()) break;
        masters.push_back(found->second);
      }
      out.tensors_used += masters.size();
      out.state.master_weights.push_back(std::move(masters));
    }
    return out;
  }
  amp::AmpHandle& handle_;
};

// NOTE [Fp8 state in checkpoints] A DelayedScaling recipe knows its layers by their weights'
// TensorImpls, which a new process does not share: the checkpoint names each layer by its
// weight's name in the model ("0.weight"), and saves its amax history, scale and scale_inv as
// tensors "<weight>.amax_history", "<weight>.scale", "<weight>.scale_inv" and whether it ran
// since the last update as "<weight>.ran", with the recipe's options, which must match on load.
// Loading makes (or finds) each layer's state on its weight's device with new tensors (operands
// an earlier step saved keep theirs) and drops its weight cast; the recipe's step counter, which
// only keys the weight-cast cache, is not saved. The next region's update then computes the
// scales an uninterrupted run computes.
class Fp8State : public Stateful {
 public:
  Fp8State(ops::DelayedScaling& recipe, const nn::Module& model)
      : recipe_(recipe), parameters_(model.named_parameters()) {}
  std::string state_kind() const override { return "DelayedScaling"; }

  ObjectState state_dict() const override {
    ObjectState out = options_state();
    for (const auto& [name, weight] : parameters_) {
      const std::shared_ptr<ops::Fp8LayerState> layer = recipe_.find(weight);
      if (layer == nullptr) continue;
      out.values[name + ".ran"] = int64_t(layer->ran);
      out.tensors[name + ".amax_history"] = layer->amax_history;
      out.tensors[name + ".scale"] = layer->scale;
      out.tensors[name + ".scale_inv"] = layer->scale_inv;
    }
    return out;
  }

  void check_state_dict(const ObjectState& state) const override { layers(state); }

  void load_state_dict(const ObjectState& state) override {
    for (const auto& [name, weight] : layers(state)) {
      const std::shared_ptr<ops::Fp8LayerState> layer = recipe_.state_for(weight);
      const Device device = weight.device();
      layer->amax_history = state.get_tensor(name + ".amax_history").to(device).clone();
      layer->scale = state.get_tensor(name + ".scale").to(device).clone();
      layer->scale_inv = state.get_tensor(name + ".scale_inv").to(device).clone();
      layer->ran = state.get_int(name + ".ran") != 0;
      layer->weight_fp8 = Tensor();
      layer->weight_scale_inv = Tensor();
      layer->weight_step = 0;
      layer->weight_version = 0;
    }
  }

 private:
  ObjectState options_state() const {
    const ops::DelayedScalingOptions& o = recipe_.options();
    ObjectState out;
    out.values = {{"margin", int64_t(o.margin)},
                  {"fp8_format", o.fp8_format == ops::Fp8Format::Hybrid ? "hybrid" : "e4m3"},
                  {"amax_history_len", o.amax_history_len},
                  {"amax_compute_algo",
                   o.amax_compute_algo == ops::AmaxCompute::Max ? "max" : "most_recent"}};
    return out;
  }

  // The saved layers' weights in the model, every entry checked.
  std::vector<std::pair<std::string, Tensor>> layers(const ObjectState& state) const {
    const ObjectState own = options_state();
    for (const auto& [key, value] : own.values) {
      HG_CHECK(state.has(key) && state.values.at(key) == value,
               "expected the recipe's {} {}, the state was saved with {}", key,
               value_json(value).dump(),
               state.has(key) ? value_json(state.values.at(key)).dump() : std::string("none"));
    }
    const int64_t history = recipe_.options().amax_history_len;
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& [key, tensor] : state.tensors) {
      constexpr std::string_view kHistory = ".amax_history";
      if (key.size() <= kHistory.size() ||
          key.compare(key.size() - kHistory.size(), kHistory.size(), kHistory) != 0) {
        continue;
      }
      const std::string name = key.substr(0, key.size() - kHistory.size());
      const auto weight = std::find_if(parameters_.begin(), parameters_.end(),
                                       [&](const auto& entry) { return entry.first == name; });
      HG_CHECK(weight != parameters_.end(),
               "layer \"{}\": expected a parameter of that name in the model, it has none", name);
      const std::pair<const char*, Shape> fields[] = {
          {".amax_history", {history, 3}}, {".scale", {3}}, {".scale_inv", {3}}};
      for (const auto& [field, shape] : fields) {
        const Tensor& t = state.get_tensor(name + field);
        HG_CHECK(t.dtype() == kFloat32 && t.sizes() == shape,
                 "tensor \"{}{}\": expected float32 of shape {}, got {} of shape {}", name, field,
                 shape, dtype_name(t.dtype()), t.sizes());
      }
      const int64_t ran = state.get_int(name + ".ran");
      HG_CHECK(ran == 0 || ran == 1, "\"{}.ran\": expected 0 or 1, got {}", name, ran);
      out.emplace_back(name, weight->second);
    }
    // Nothing else: each tensor and value belongs to a layer found above, or is an option.
    const size_t expected_values = own.values.size() + out.size();
    HG_CHECK(state.tensors.size() == 3 * out.size() && state.values.size() == expected_values,
             "expected the recipe's options and, per layer, an amax_history, a scale, a scale_inv "
             "and ran; got {} tensors and {} values for {} layers",
             state.tensors.size(), state.values.size(), out.size());
    return out;
  }

  ops::DelayedScaling& recipe_;
  std::vector<std::pair<std::string, Tensor>> parameters_;
};

// A state given to save_checkpoint or load_checkpoint, as Stateful.
struct Target {
  std::string name;
  Stateful* object = nullptr;
  std::unique_ptr<Stateful> adapter;  // owns `object` when it is an adapter
  amp::GradScaler* scaler = nullptr;  // a GradScaler, loaded first (NOTE [All-or-nothing resume])
};

constexpr std::string_view kNamedStatePrefix = "state.";

std::vector<Target> targets(const std::vector<NamedState>& states, const nn::Module& model,
                            std::string_view caller) {
  std::vector<Target> out;
  std::set<std::string> names;
  for (const NamedState& state : states) {
    const std::string& name = state.name();
    const bool well_formed = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    HG_CHECK(well_formed, "{}: expected a state name of letters, digits, '_' and '-', got \"{}\"",
             caller, name);
    HG_CHECK(names.insert(name).second, "{}: expected different state names, got \"{}\" twice",
             caller, name);
    Target target;
    target.name = name;
    std::visit(
        [&](auto* object) {
          using T = std::remove_pointer_t<decltype(object)>;
          HG_CHECK(object != nullptr, "{}: state \"{}\" is a null pointer", caller, name);
          if constexpr (std::is_same_v<T, Stateful>) {
            target.object = object;
          } else {
            if constexpr (std::is_same_v<T, optim::LRScheduler>) {
              target.adapter = std::make_unique<SchedulerState>(*object);
            } else if constexpr (std::is_same_v<T, optim::ReduceLROnPlateau>) {
              target.adapter = std::make_unique<PlateauState>(*object);
            } else if constexpr (std::is_same_v<T, amp::GradScaler>) {
              target.adapter = std::make_unique<ScalerState>(*object);
              target.scaler = object;
            } else if constexpr (std::is_same_v<T, amp::AmpHandle>) {
              target.adapter = std::make_unique<AmpHandleAdapter>(*object);
            } else {
              target.adapter = std::make_unique<Fp8State>(*object, model);
            }
            target.object = target.adapter.get();
          }
        },
        state.object());
    out.push_back(std::move(target));
  }
  return out;
}

// A state the file holds.
struct SavedState {
  std::string kind;
  ObjectState state;
};

// The states of a version-2 file's metadata (their tensors are added by the caller).
std::map<std::string, SavedState> saved_states(const std::map<std::string, std::string>& metadata,
                                               const std::string& path) {
  std::map<std::string, SavedState> out;
  for (const auto& [key, text] : metadata) {
    if (!starts_with(key, kNamedStatePrefix)) continue;
    const std::string name = key.substr(kNamedStatePrefix.size());
    const json entry = metadata_json(metadata, key, path);
    HG_CHECK(entry.is_object() && entry.contains("kind") && entry["kind"].is_string() &&
                 entry.contains("values") && entry["values"].is_object(),
             "load_checkpoint: \"{}\": expected metadata \"{}\" to hold a kind and values", path,
             key);
    SavedState saved{entry["kind"].get<std::string>(), {}};
    for (const auto& [value_key, value] : entry["values"].items()) {
      std::optional<StateValue> read = json_value(value);
      HG_CHECK(read.has_value(),
               "load_checkpoint: \"{}\": state \"{}\": value \"{}\": expected a number, a string "
               "or a list of numbers, got {}",
               path, name, value_key, value.dump());
      saved.state.values.emplace(value_key, std::move(*read));
    }
    out.emplace(name, std::move(saved));
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const std::vector<NamedState>& states,
                     const std::map<std::string, std::string>& extra) {
  TensorMap tensors;
  for (const auto& [key, tensor] : model.state_dict()) {
    tensors.emplace(std::string(kModelPrefix) + key, tensor);
  }
  const optim::OptimizerStateDict optimizer_state = optimizer.state_dict();
  for (const auto& [index, entries] : optimizer_state.state) {
    for (const auto& [name, tensor] : entries) {
      tensors.emplace(fmt::format("{}{}.{}", kStatePrefix, index, name), tensor);
    }
  }
  json groups = json::array();
  for (const optim::OptimizerStateDict::Group& group : optimizer_state.param_groups) {
    groups.push_back({{"options", group.options}, {"params", group.params}});
  }
  const Generator::State rng = default_generator().get_state();

  std::map<std::string, std::string> metadata = {
      {"format", std::string(kFormat)},
      {"version", std::string(kVersion)},
      {"optimizer.param_groups", groups.dump()},
      {"rng.cpu", json{{"seed", rng.seed}, {"offset", rng.offset}}.dump()},
      {"kernel_choices", cpu::save_kernel_choices()},
  };
  for (const Target& target : targets(states, model, "save_checkpoint")) {
    const ObjectState state = target.object->state_dict();
    json values = json::object();
    for (const auto& [key, value] : state.values) values[key] = value_json(value);
    const std::string prefix = std::string(kNamedStatePrefix) + target.name;
    metadata.emplace(prefix,
                     json{{"kind", target.object->state_kind()}, {"values", values}}.dump());
    for (const auto& [key, tensor] : state.tensors) {
      HG_CHECK(!key.empty() && tensor.defined(),
               "save_checkpoint: state \"{}\": expected named, defined tensors, got \"{}\"",
               target.name, key);
      tensors.emplace(prefix + "." + key, tensor);
    }
  }
  for (const auto& [key, value] : extra) metadata.emplace(std::string(kExtraPrefix) + key, value);
  save(path, tensors, metadata);
}

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler& scaler,
                     const std::map<std::string, std::string>& extra) {
  // Saving only reads the scaler.
  save_checkpoint(path, model, optimizer, {{"scaler", const_cast<amp::GradScaler*>(&scaler)}},
                  extra);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   const std::vector<NamedState>& states,
                                                   LoadCheckpointOptions options) {
  const std::vector<Target> given = targets(states, model, "load_checkpoint");

  // 1. The whole file, checked (NOTE [Safetensors validation]) and verified against its
  // checksums (NOTE [Safetensors checksums]).
  const SafetensorsContents contents =
      load_safetensors(path, {.require_checksum = options.require_checksum});
  const std::map<std::string, std::string>& metadata = contents.metadata;
  const auto format = metadata.find("format");
  HG_CHECK(format != metadata.end() && format->second == kFormat,
           "load_checkpoint: \"{}\": expected a halfgrad checkpoint (metadata format \"{}\"), got "
           "{}",
           path, kFormat,
           format == metadata.end() ? std::string("no format") : "\"" + format->second + "\"");
  const auto version = metadata.find("version");
  const bool version_1 = version != metadata.end() && version->second == "1";
  HG_CHECK(version != metadata.end() && (version_1 || version->second == kVersion),
           "load_checkpoint: \"{}\": expected checkpoint version 1 or {}, got {}", path, kVersion,
           version == metadata.end() ? std::string("none") : version->second);

  // 2. Its parts, each checked as far as it can be without the objects.
  std::map<std::string, SavedState> saved;
  if (version_1) {  // the scaler was the only state
    for (const auto& [key, value] :
         number_map(metadata_json(metadata, "scaler", path), "scaler", path)) {
      saved["scaler"].state.values.emplace(key, value);
    }
    saved["scaler"].kind = "GradScaler";
  } else {
    saved = saved_states(metadata, path);
  }
  TensorMap model_state;
  for (const auto& [key, tensor] : contents.tensors) {
    if (starts_with(key, kModelPrefix)) {
      model_state.emplace(key.substr(kModelPrefix.size()), tensor);
      continue;
    }
    if (starts_with(key, kStatePrefix)) continue;
    const std::string_view rest =
        std::string_view(key).substr(std::min(key.size(), kNamedStatePrefix.size()));
    const size_t dot = rest.find('.');
    const auto owner =
        dot == std::string_view::npos ? saved.end() : saved.find(std::string(rest.substr(0, dot)));
    HG_CHECK(starts_with(key, kNamedStatePrefix) && owner != saved.end() && dot + 1 < rest.size(),
             "load_checkpoint: \"{}\": unexpected key \"{}\" (expected model.*, "
             "optimizer.state.* and state.<name>.* tensors of a state the metadata names)",
             path, key);
    owner->second.state.tensors.emplace(std::string(rest.substr(dot + 1)), tensor);
  }

  // Every mismatch between the file and what it is loaded into, in one error.
  std::vector<std::string> problems;
  check_model_state(model, model_state, problems);
  for (const Target& target : given) {
    const auto found = saved.find(target.name);
    const std::string kind = target.object->state_kind();
    if (found == saved.end()) {
      problems.push_back(fmt::format("missing state \"{}\" (a {}; the checkpoint does not hold it)",
                                     target.name, kind));
    } else if (found->second.kind != kind) {
      problems.push_back(fmt::format("state \"{}\": expected a {}, the checkpoint holds a {}",
                                     target.name, kind, found->second.kind));
    }
  }
  for (const auto& entry : saved) {
    const bool wanted = std::any_of(given.begin(), given.end(), [&](const Target& target) {
      return target.name == entry.first;
    });
    if (!wanted) {
      problems.push_back(
          fmt::format("unexpected state \"{}\" (a {}; nothing was given to load it into)",
                      entry.first, entry.second.kind));
    }
  }
  auto refuse_if_any = [&] {
    if (problems.empty()) return;
    std::string list;
    for (const std::string& problem : problems) list += "\n  " + problem;
    HG_ERROR(
        "load_checkpoint: \"{}\": the checkpoint does not match what it is loaded into "
        "({} {}):{}",
        path, problems.size(), problems.size() == 1 ? "mismatch" : "mismatches", list);
  };
  refuse_if_any();

  const optim::OptimizerStateDict optimizer_dict =
      optimizer_state(contents.tensors, metadata, path);
  const json rng = metadata_json(metadata, "rng.cpu", path);
  HG_CHECK(rng.is_object() && rng.contains("seed") && rng.contains("offset") &&
               rng["seed"].is_number_unsigned() && rng["offset"].is_number_unsigned(),
           "load_checkpoint: \"{}\": expected \"rng.cpu\" to hold an unsigned seed and offset",
           path);
  // The GEMM and conv2d paths of the process that saved (NOTE [Kernel choices across
  // processes]); absent from checkpoints written before halfgrad kept them.
  const auto kernel_choices = metadata.find("kernel_choices");
  if (kernel_choices != metadata.end()) {
    try {
      cpu::check_kernel_choices(kernel_choices->second);
    } catch (const Error& e) {
      HG_ERROR("load_checkpoint: \"{}\": metadata \"kernel_choices\": {}", path, e.what());
    }
  }
  // Each state against its object (NOTE [Checkpoint state protocol]).
  for (const Target& target : given) {
    try {
      target.object->check_state_dict(saved.at(target.name).state);
    } catch (const Error& e) {
      problems.push_back(
          fmt::format("state \"{}\" ({}): {}", target.name, target.object->state_kind(), e.what()));
    }
  }
  refuse_if_any();

  // 3. NOTE [All-or-nothing resume]: the scalers, then the optimizer (rolling the scalers back
  // on its error), then the other states, the model and the generator, which can no longer fail.
  std::vector<std::pair<amp::GradScaler*, std::map<std::string, double>>> scalers_before;
  auto put_scalers_back = [&] {
    for (auto& [scaler, before] : scalers_before) {
      if (!before.empty()) scaler->load_state_dict(before);
    }
  };
  for (const Target& target : given) {
    if (target.scaler == nullptr) continue;
    std::map<std::string, double> before = target.scaler->state_dict();
    try {
      target.object->load_state_dict(saved.at(target.name).state);
    } catch (const Error& e) {
      put_scalers_back();
      HG_ERROR("load_checkpoint: \"{}\": state \"{}\" (GradScaler): {}", path, target.name,
               e.what());
    }
    scalers_before.emplace_back(target.scaler, std::move(before));
  }
  try {
    optimizer.load_state_dict(optimizer_dict);
  } catch (const Error& e) {
    put_scalers_back();
    HG_ERROR("load_checkpoint: \"{}\": optimizer: {}", path, e.what());
  }
  for (const Target& target : given) {
    if (target.scaler == nullptr) target.object->load_state_dict(saved.at(target.name).state);
  }
  model.load_state_dict(model_state, /*strict=*/true);
  if (options.restore_rng) {
    default_generator().set_state({rng["seed"].get<uint64_t>(), rng["offset"].get<uint64_t>()});
  }
  if (options.restore_kernel_choices && kernel_choices != metadata.end()) {
    try {
      cpu::restore_kernel_choices(kernel_choices->second);  // checked above
    } catch (const Error&) {
      // Only a bad HALFGRAD_CPU_GEMM or HALFGRAD_CPU_CONV gets here, and it fails the first
      // product that reads it: the load, which can no longer fail, is complete.
    }
  }

  std::map<std::string, std::string> extra;
  for (const auto& [key, value] : metadata) {
    if (starts_with(key, kExtraPrefix)) extra.emplace(key.substr(kExtraPrefix.size()), value);
  }
  return extra;
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   amp::GradScaler& scaler,
                                                   LoadCheckpointOptions options) {
  return load_checkpoint(path, model, optimizer, {{"scaler", &scaler}}, options);
}

}  // namespace hg::io
