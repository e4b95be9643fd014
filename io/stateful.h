// The state protocol of checkpoints: everything a resume must put back besides the model and
// the optimizer (an LR scheduler, a DataLoader's place in its epoch, an fp8 recipe's amax
// histories, a GradScaler) gives its state as named values and tensors, and takes it back.
//
//   class MyCounter : public io::Stateful {
//     std::string state_kind() const override { return "MyCounter"; }
//     io::ObjectState state_dict() const override { return {{{"count", count_}}, {}}; }
//     void check_state_dict(const io::ObjectState& state) const override {
//       HG_CHECK(state.get_int("count") >= 0, "MyCounter: expected a count >= 0");
//     }
//     void load_state_dict(const io::ObjectState& state) override {
//       count_ = state.get_int("count");
//     }
//     int64_t count_ = 0;
//   };
//   io::save_checkpoint(path, model, opt, {{"counter", &counter}, {"loader", &loader}});
//
// NOTE [Checkpoint state protocol] A stateful object is Stateful: state_dict() gives an
// ObjectState (numbers, strings and lists of numbers, which a checkpoint writes as one JSON
// object in its metadata, and tensors, which it writes as tensors), check_state_dict() says
// whether a state fits the object (an hg::Error naming what was expected and what was given;
// nothing changes), and load_state_dict() takes a state that passed the check and must not fail
// on one. The split lets load_checkpoint check every object before it changes any (NOTE
// [All-or-nothing resume]). state_kind() names the kind of object ("DataLoader"): a checkpoint
// refuses to load a state into an object of another kind. The DataLoader and DistributedSampler
// are Stateful; halfgrad's types below io (LR schedulers, ReduceLROnPlateau, GradScaler,
// amp::initialize's AmpHandle, the fp8 recipe) are adapted to the protocol inside io/checkpoint.cpp, which their layers cannot see.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::io {

// One value of a saved state: an integer, a float, a string or a list of floats. In the file it
// is JSON; a float that is not finite is written as the string "inf", "-inf" or "nan".
using StateValue = std::variant<int64_t, uint64_t, double, std::string, std::vector<double>>;

// What a stateful object saves: named values and named tensors.
struct ObjectState {
  std::map<std::string, StateValue> values;
  std::map<std::string, Tensor> tensors;

  // Typed reads. A missing key or a value of another type is an hg::Error naming the key, the
  // type expected and the one found. get_int and get_uint take either integer type when the value
  // fits; get_double takes integers and the strings "inf", "-inf" and "nan" too.
  bool has(const std::string& key) const { return values.count(key) > 0; }
  int64_t get_int(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  double get_double(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  std::vector<double> get_doubles(const std::string& key) const;
  const Tensor& get_tensor(const std::string& key) const;

  // The entries under `prefix` ("sampler."), with the prefix taken off: a part's own state.
  ObjectState part(const std::string& prefix) const;
  // Adds `part`'s entries under `prefix`.
  void add_part(const std::string& prefix, const ObjectState& part);
};

// The name of a StateValue's type, for messages ("an integer", "a string", ...).
const char* state_value_type(const StateValue& value);

// Something a checkpoint saves and restores by name (NOTE [Checkpoint state protocol]).
class Stateful {
 public:
  virtual ~Stateful() = default;
  // The kind of object, recorded with its state.
  virtual std::string state_kind() const = 0;
  virtual ObjectState state_dict() const = 0;
  // Throws an hg::Error when `state` does not fit this object; changes nothing.
  virtual void check_state_dict(const ObjectState& state) const = 0;
  // Takes a state that passed check_state_dict.
  virtual void load_state_dict(const ObjectState& state) = 0;
};

}  // namespace hg::io
