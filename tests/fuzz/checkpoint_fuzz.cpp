// io::load_checkpoint under libFuzzer, structure-aware: each input is a list of edits to a valid
// checkpoint (a metadata field set to a fuzzed number, string or JSON token, or removed; a
// tensor's bytes flipped, replaced or renamed), so the inputs get past the safetensors parser
// to the checks of the optimizer's options and state and the scaler's values (the checkpoint's
// state "scaler", NOTE [Checkpoint state protocol]). A load either succeeds or raises hg::Error
// leaving the model, the optimizer and the scaler as they were; anything else (another
// exception, a crash, a sanitizer report) is a failure.
//
// Built with clang's -fsanitize=fuzzer when HALFGRAD_FUZZ is on (hg-fuzz-checkpoint, run by
// ctest for a bounded time over tests/fuzz/corpus/checkpoint); otherwise linked with
// replay_main.cpp, which runs every corpus file once (test_fuzz_checkpoint_replay).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "halfgrad/halfgrad.h"
#include "halfgrad/io/checkpoint.h"
#include "halfgrad/io/safetensors.h"

namespace {

using namespace hg;
using json = nlohmann::json;

// The input, read front to back; past its end every read gives 0.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return position_ >= size_; }
  uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }
  uint64_t bits64() {
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = value << 8 | byte();
    return value;
  }
  // Up to max_length bytes as a string (the length is the first byte).
  std::string text(size_t max_length) {
    const size_t length = byte() % (max_length + 1);
    std::string out;
    for (size_t i = 0; i < length && !empty(); ++i) out.push_back(char(byte()));
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

// JSON number tokens at the edges the checks guard: ranges of the options, int32/int64/uint64
// limits, values no double or no integer holds, and tokens that are not numbers at all.
constexpr const char* kTokens[] = {
    "0",
    "-0",
    "1",
    "-1",
    "0.5",
    "8.999",
    "8.5",
    "2",
    "0.999",
    "1e-8",
    "1e20",
    "-1e20",
    "1e400",
    "-1e400",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "9223372036854775296",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "1.5e308",
    "4.9e-324",
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "true",
    "false",
    "null",
    "\"1\"",
    "[]",
    "{}",
    "[1, 2]",
    "\"\"",
    "1e",
    "--1",
    "0x10",
};

constexpr const char* kOptionKeys[] = {"lr",           "beta1",    "beta2",    "eps",
                                       "weight_decay", "amsgrad",  "maximize", "momentum",
                                       "dampening",    "nesterov", "unknown"};
constexpr const char* kScalerKeys[] = {"scale",           "growth_factor",   "backoff_factor",
                                       "growth_interval", "_growth_tracker", "_overflow_tracker",
                                       "unknown"};
constexpr const char* kTopKeys[] = {"format",       "version", "optimizer.param_groups",
                                    "state.scaler", "rng.cpu", "extra.step"};

// The value an edit puts in place of a JSON field: a raw token (not necessarily valid JSON).
std::string fuzzed_token(ByteReader& in) {
  switch (in.byte() % 5) {
    case 0:
      return kTokens[in.byte() % std::size(kTokens)];
    case 1: {  // any double, as fmt writes it ("inf" and "nan" are not JSON)
      const uint64_t bits = in.bits64();
      double value;
      std::memcpy(&value, &bits, sizeof value);
      return fmt::format("{}", value);
    }
    case 2:
      return fmt::format("{}", int64_t(in.bits64()));
    case 3:
      return fmt::format("{}", in.bits64());
    default:
      return in.text(12);
  }
}

// One model, optimizer and scaler per optimizer kind, and the valid checkpoint they saved.
struct Setup {
  std::shared_ptr<nn::Linear> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<amp::GradScaler> scaler;
  io::SafetensorsContents saved;
  std::string saved_path;

  // A snapshot of what a failed load must leave as it was.
  std::vector<std::string> model_bytes;
  optim::OptimizerStateDict optimizer_state;
  std::map<std::string, double> scaler_state;
};

std::string path_for(const char* name) {
  return fmt::format("/tmp/halfgrad-checkpoint-fuzz-{}-{}.safetensors", ::getpid(), name);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) std::abort();
}

void train_one_step(Setup& s) {
  s.optimizer->zero_grad();
  const Tensor x = randn({4, 3});
  const Tensor loss = nn::functional::mse_loss(s.model->forward(x), zeros({4, 2}));
  s.scaler->scale(loss).backward();
  s.scaler->step(*s.optimizer);
  s.scaler->update();
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), size_t(c.nbytes()));
}

bool same_state(const optim::OptimizerStateDict& a, const optim::OptimizerStateDict& b) {
  if (a.state.size() != b.state.size() || a.param_groups.size() != b.param_groups.size()) {
    return false;
  }
  for (size_t g = 0; g < a.param_groups.size(); ++g) {
    if (a.param_groups[g].options != b.param_groups[g].options) return false;
  }
  for (const auto& [index, entries] : a.state) {
    const auto found = b.state.find(index);
    if (found == b.state.end() || found->second.size() != entries.size()) return false;
    for (const auto& [name, tensor] : entries) {
      const auto other = found->second.find(name);
      if (other == found->second.end() || bytes_of(tensor) != bytes_of(other->second)) {
        return false;
      }
    }
  }
  return true;
}

void take_snapshot(Setup& s) {
  s.model_bytes.clear();
  for (const Tensor& p : s.model->parameters()) s.model_bytes.push_back(bytes_of(p));
  s.optimizer_state = s.optimizer->state_dict();
  s.scaler_state = s.scaler->state_dict();
}

bool unchanged(const Setup& s) {
  const std::vector<Tensor> params = s.model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (bytes_of(params[i]) != s.model_bytes[i]) return false;
  }
  return same_state(s.optimizer_state, s.optimizer->state_dict()) &&
         s.scaler_state == s.scaler->state_dict();
}

std::unique_ptr<Setup> make_setup(bool adam) {
  auto s = std::make_unique<Setup>();
  manual_seed(7);
  s->model = std::make_shared<nn::Linear>(3, 2);
  if (adam) {
    s->optimizer = std::make_unique<optim::Adam>(s->model->parameters(),
                                                 optim::AdamOptions{.lr = 1e-2, .amsgrad = true});
  } else {
    s->optimizer = std::make_unique<optim::SGD>(
        s->model->parameters(), optim::SGDOptions{.lr = 1e-2, .momentum = 0.9, .nesterov = true});
  }
  s->scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions{.init_scale = 256.0, .growth_interval = 3, .hysteresis = 1});
  s->scaler->set_warning_handler([](std::string_view) {});
  train_one_step(*s);
  train_one_step(*s);
  s->saved_path = path_for(adam ? "adam-base" : "sgd-base");
  io::save_checkpoint(s->saved_path, *s->model, *s->optimizer, *s->scaler, {{"step", "2"}});
  s->saved = io::load_safetensors(s->saved_path);
  // Only the entries the edits know: an entry that covers the others (a checksum) would turn
  // every edit into one error before the checks this target is after.
  std::erase_if(s->saved.metadata, [](const auto& entry) {
    return std::find(std::begin(kTopKeys), std::end(kTopKeys), entry.first) == std::end(kTopKeys);
  });
  write_file(s->saved_path, io::to_safetensors_bytes(s->saved.tensors, s->saved.metadata));
  take_snapshot(*s);
  return s;
}

// `root` (a metadata entry) with `key` of `object` (root itself or an object inside it) set to a
// fuzzed token, or removed; the result need not be valid JSON.
std::string with_edited_field(json& root, json& object, const std::string& key, ByteReader& in) {
  if (in.byte() % 4 == 0) {
    object.erase(key);
    return root.dump();
  }
  constexpr std::string_view kPlaceholder = "\"@@fuzzed@@\"";
  object[key] = "@@fuzzed@@";
  std::string out = root.dump();
  out.replace(out.find(kPlaceholder), kPlaceholder.size(), fuzzed_token(in));
  return out;
}

// Metadata entry `entry` (a JSON object) with `key` edited; left alone when it is not an object.
void edit_object(std::map<std::string, std::string>& metadata, const std::string& entry,
                 const std::string& key, ByteReader& in) {
  const auto found = metadata.find(entry);
  if (found == metadata.end()) return;
  json value = json::parse(found->second, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return;
  found->second = with_edited_field(value, value, key, in);
}

void apply_edit(io::SafetensorsContents& c, ByteReader& in) {
  std::map<std::string, std::string>& metadata = c.metadata;
  switch (in.byte() % 6) {
    case 0: {  // an option of a param group
      const auto found = metadata.find("optimizer.param_groups");
      if (found == metadata.end()) return;
      json groups = json::parse(found->second, nullptr, /*allow_exceptions=*/false);
      if (!groups.is_array() || groups.empty() || !groups[0].is_object() ||
          !groups[0].contains("options") || !groups[0]["options"].is_object()) {
        return;
      }
      found->second = with_edited_field(groups, groups[0]["options"],
                                        kOptionKeys[in.byte() % std::size(kOptionKeys)], in);
      return;
    }
    case 1: {  // a scaler field (the values of the state "scaler"), or the state's kind
      const auto found = metadata.find("state.scaler");
      if (found == metadata.end()) return;
      json state = json::parse(found->second, nullptr, /*allow_exceptions=*/false);
      if (!state.is_object() || !state.contains("values") || !state["values"].is_object()) return;
      if (in.byte() % 8 == 0) {
        found->second = with_edited_field(state, state, "kind", in);
      } else {
        found->second = with_edited_field(state, state["values"],
                                          kScalerKeys[in.byte() % std::size(kScalerKeys)], in);
      }
      return;
    }
    case 2:  // the generator's seed or offset
      edit_object(metadata, "rng.cpu", in.byte() % 2 ? "seed" : "offset", in);
      return;
    case 3: {  // a whole metadata entry: removed or replaced by a token
      const char* key = kTopKeys[in.byte() % std::size(kTopKeys)];
      if (in.byte() % 2) {
        metadata.erase(key);
      } else {
        metadata[key] = fuzzed_token(in);
      }
      return;
    }
    case 4: {  // a few bytes of a tensor flipped (a step count, a buffer, a weight)
      if (c.tensors.empty()) return;
      auto it = std::next(c.tensors.begin(), long(in.byte() % c.tensors.size()));
      Tensor copy = it->second.contiguous().clone();
      if (copy.nbytes() == 0) return;
      auto* bytes = static_cast<uint8_t*>(copy.data_ptr());
      const int flips = 1 + in.byte() % 4;
      for (int i = 0; i < flips; ++i) {
        const size_t high = in.byte();
        const size_t at = (high << 8 | in.byte()) % size_t(copy.nbytes());
        bytes[at] ^= uint8_t(in.byte() | 1);
      }
      it->second = copy;
      return;
    }
    default: {  // a tensor replaced by a scalar of another value or dtype, or removed
      if (c.tensors.empty()) return;
      auto it = std::next(c.tensors.begin(), long(in.byte() % c.tensors.size()));
      const uint8_t how = in.byte() % 3;
      if (how == 0) {
        c.tensors.erase(it);
        return;
      }
      const uint64_t bits = in.bits64();
      double value;
      std::memcpy(&value, &bits, sizeof value);
      if (in.byte() % 2) value = double(int64_t(in.bits64() % 4096)) - 16;  // small integers
      it->second = scalar_tensor(value, how == 1 ? kFloat64 : kFloat32);
      return;
    }
  }
}

}  // namespace

// The files the target writes, removed at exit.
struct Files {
  ~Files() {
    for (const char* name : {"adam-base", "sgd-base", "input"}) std::remove(path_for(name).c_str());
  }
};

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Files files;
  static std::unique_ptr<Setup> setups[2] = {make_setup(false), make_setup(true)};
  static const std::string path = path_for("input");
  ByteReader in(data, size);
  const bool adam = in.byte() % 2 == 1;
  Setup& s = *setups[adam];
  io::SafetensorsContents edited = s.saved;
  const int edits = in.byte() % 6;
  for (int i = 0; i < edits; ++i) apply_edit(edited, in);
  try {
    write_file(path, hg::io::to_safetensors_bytes(edited.tensors, edited.metadata));
  } catch (const hg::Error&) {
    return 0;  // an edit no file can hold (a metadata string that is not UTF-8): save refuses it
  }

  bool loaded = false;
  try {
    io::load_checkpoint(path, *s.model, *s.optimizer, *s.scaler);
    loaded = true;
  } catch (const hg::Error& e) {
    // HALFGRAD_FUZZ_VERBOSE=1 shows which check refused each input (to see what a corpus file
    // reaches).
    static const bool verbose = std::getenv("HALFGRAD_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
    // NOTE [All-or-nothing resume]: refused, and nothing changed.
    if (!unchanged(s)) {
      std::fprintf(stderr,
                   "checkpoint fuzz: a failed load changed the model, optimizer or scaler\n");
      std::abort();
    }
  }
  if (loaded) {
    // What loads must be usable: one training step with the loaded values.
    try {
      train_one_step(s);
    } catch (const hg::Error&) {
      // The scaler may be left between step() and update(): start the next input afresh.
      setups[adam] = make_setup(adam);
      return 0;
    }
    io::load_checkpoint(s.saved_path, *s.model, *s.optimizer, *s.scaler);  // back to the base
    if (!unchanged(s)) {
      std::fprintf(stderr, "checkpoint fuzz: reloading the saved checkpoint did not restore it\n");
      std::abort();
    }
  }
  return 0;
}
