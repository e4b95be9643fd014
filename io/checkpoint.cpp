// Checkpoints (checkpoint.h): a model, its optimizer and its GradScaler saved to one safetensors
// file and checked as they are loaded back.
#include "halfgrad/io/checkpoint.h"

#include <charconv>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"
#include "halfgrad/io/safetensors.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::io {

namespace {

using json = nlohmann::json;

constexpr std::string_view kFormat = "halfgrad-checkpoint";
constexpr std::string_view kVersion = "1";
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

// Checks the checkpoint's model entries against the model: the same keys, shapes and dtypes.
void check_model_state(const nn::Module& model, const TensorMap& loaded, const std::string& path) {
  const nn::StateDict own = model.state_dict();
  for (const auto& [key, tensor] : own) {
    const auto found = loaded.find(key);
    HG_CHECK(found != loaded.end(),
             "load_checkpoint: \"{}\": expected the model key \"{}{}\", it is missing", path,
             kModelPrefix, key);
    HG_CHECK(found->second.sizes() == tensor.sizes() && found->second.dtype() == tensor.dtype(),
             "load_checkpoint: \"{}\": key \"{}{}\": expected {} of shape {}, got {} of shape {}",
             path, kModelPrefix, key, dtype_name(tensor.dtype()), tensor.sizes(),
             dtype_name(found->second.dtype()), found->second.sizes());
  }
  for (const auto& [key, tensor] : loaded) {
    HG_CHECK(own.count(key) == 1,
             "load_checkpoint: \"{}\": unexpected key \"{}{}\" (the model has no such parameter "
             "or buffer)",
             path, kModelPrefix, key);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler& scaler,
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
      {"scaler", json(scaler.state_dict()).dump()},
      {"rng.cpu", json{{"seed", rng.seed}, {"offset", rng.offset}}.dump()},
  };
  for (const auto& [key, value] : extra) metadata.emplace(std::string(kExtraPrefix) + key, value);
  save(path, tensors, metadata);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   amp::GradScaler& scaler,
                                                   LoadCheckpointOptions options) {
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
  HG_CHECK(version != metadata.end() && version->second == kVersion,
           "load_checkpoint: \"{}\": expected checkpoint version {}, got {}", path, kVersion,
           version == metadata.end() ? std::string("none") : version->second);

  // 2. Its parts, each checked as far as it can be without the objects.
  TensorMap model_state;
  for (const auto& [key, tensor] : contents.tensors) {
    if (starts_with(key, kModelPrefix)) {
      model_state.emplace(key.substr(kModelPrefix.size()), tensor);
    } else {
      HG_CHECK(starts_with(key, kStatePrefix),
               "load_checkpoint: \"{}\": unexpected key \"{}\" (expected model.* and "
               "optimizer.state.* tensors)",
               path, key);
    }
  }
  check_model_state(model, model_state, path);
  const optim::OptimizerStateDict optimizer_dict =
      optimizer_state(contents.tensors, metadata, path);
  const std::map<std::string, double> scaler_state =
      number_map(metadata_json(metadata, "scaler", path), "scaler", path);
  const json rng = metadata_json(metadata, "rng.cpu", path);
  HG_CHECK(rng.is_object() && rng.contains("seed") && rng.contains("offset") &&
               rng["seed"].is_number_unsigned() && rng["offset"].is_number_unsigned(),
           "load_checkpoint: \"{}\": expected \"rng.cpu\" to hold an unsigned seed and offset",
           path);

  // 3. NOTE [All-or-nothing resume]: the scaler, then the optimizer (rolling the scaler back
  // on its error), then the model and the generator, which can no longer fail.
  const std::map<std::string, double> scaler_before = scaler.state_dict();
  try {
    scaler.load_state_dict(scaler_state);
  } catch (const Error& e) {
    HG_ERROR("load_checkpoint: \"{}\": scaler: {}", path, e.what());
  }
  try {
    optimizer.load_state_dict(optimizer_dict);
  } catch (const Error& e) {
    if (!scaler_before.empty()) scaler.load_state_dict(scaler_before);
    HG_ERROR("load_checkpoint: \"{}\": optimizer: {}", path, e.what());
  }
  model.load_state_dict(model_state, /*strict=*/true);
  if (options.restore_rng) {
    default_generator().set_state({rng["seed"].get<uint64_t>(), rng["offset"].get<uint64_t>()});
  }

  std::map<std::string, std::string> extra;
  for (const auto& [key, value] : metadata) {
    if (starts_with(key, kExtraPrefix)) extra.emplace(key.substr(kExtraPrefix.size()), value);
  }
  return extra;
}

}  // namespace hg::io
