// PyTorch's .pt / .pth files (what torch.save writes), read without running any of their code:
//
//   model->load_state_dict(io::load_torch_state_dict("resnet.pth"));
//   model->load_state_dict(io::load_torch_state_dict("checkpoint.pt", "model"));
//
//   io::TorchValue checkpoint = io::load_torch_file("checkpoint.pt");
//   int64_t epoch = checkpoint.at("epoch").to_int();
//   const Tensor& w = checkpoint.at("model").at("0.weight").to_tensor();
//
// The format (torch.save since PyTorch 1.6): a zip archive whose entries share one folder,
//   <archive>/data.pkl        the object, pickled (protocol 2 unless the caller chose another)
//   <archive>/data/<key>      each storage's bytes, little-endian
//   <archive>/byteorder       "little" (newer files; absent means little-endian)
//   <archive>/version, <archive>/.data/serialization_id, ...   not needed to read it
// A tensor is pickled as a call of torch._utils._rebuild_tensor_v2(storage, storage_offset,
// size, stride, requires_grad, backward_hooks[, metadata]) whose storage is a persistent id
// ('storage', torch.FloatStorage (or another typed storage), key, location, numel); dtypes
// without a typed storage (float8) use _rebuild_tensor_v3 with an untyped storage (numel
// counts bytes) and the dtype as one more argument.
//
// NOTE [Restricted unpickler] A pickle is a program: its GLOBAL opcodes name any Python
// callable and REDUCE calls it, so loading an arbitrary pickle runs arbitrary code. halfgrad
// reads data.pkl as torch.load(weights_only=True) does, and stricter: the only globals it
// accepts are the ones torch.save emits for plain data, resolved to fixed C++ handlers when
// the GLOBAL opcode is read:
//   collections.OrderedDict                   -> a dict (BUILD's attribute state is dropped)
//   torch._utils._rebuild_tensor_v2 / _v3     -> a CPU tensor over the storage, with the
//                                                file's dtype, shape, strides and offset
//   torch._utils._rebuild_parameter(_with_state) -> its tensor (requires_grad is ignored)
//   torch.Size                                -> a tuple of ints
//   _codecs.encode(text, "latin1")            -> bytes (protocol 2's spelling of bytes)
//   torch.<X>Storage, torch.UntypedStorage, torch.<dtype>  -> arguments of the above only
// Any other global (os.system, builtins.eval, an nn.Module class, numpy arrays, ...) is an
// hg::Error naming it, raised before any later opcode is read; so are the opcodes that build
// objects without REDUCE (INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4), sets, out-of-band buffers
// and the text opcodes of protocol 0 that torch.save never writes. Nothing in the file is ever
// executed: the unpickler only builds values (None, bool, int (64-bit), float, str, bytes,
// list, tuple, dict with str or int keys, tensor).
// Everything read from the file is checked before it is used: every length against the bytes
// left, memo indices, marks, the stack's depth and the types on it, each tensor's extent
// against its storage's bytes (so two views of one storage and non-contiguous tensors come
// out right, sharing one halfgrad storage as they shared one in torch), bool bytes (0 or 1),
// and the result's nesting (at most kMaxTorchValueDepth; a container that contains itself is
// an error). A corrupted or truncated file is an hg::Error naming the file and the byte of
// data.pkl where reading stopped; it never crashes, and no length is trusted (or allocated)
// before it is checked against the bytes there are.
//
// Not supported, each a clear error: the legacy format of torch.save before 1.6 (or with
// _use_new_zipfile_serialization=False) and TorchScript archives (torch.jit.save): re-save the
// state dict with torch.save; big-endian files; complex, quantized, unsigned 16/32/64-bit and
// other dtypes halfgrad lacks; sparse and nested tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "halfgrad/core/tensor.h"
#include "halfgrad/nn/module.h"

namespace hg::io {

// The deepest nesting of lists, tuples and dicts a torch file may hold (a state dict is 1 deep,
// a training checkpoint about 4).
inline constexpr size_t kMaxTorchValueDepth = 200;

// A value read from a torch file: the Python object torch.load would return, as a tree. Lists,
// tuples and dicts are shared, immutable nodes (a value is cheap to copy); a dict keeps its
// insertion order.
class TorchValue {
 public:
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, Tensor, List, Tuple, Dict };
  // A dict's key: a str or an int (optimizer.state_dict() keys its state by parameter index).
  using Key = std::variant<int64_t, std::string>;
  using Elements = std::vector<TorchValue>;
  using Items = std::vector<std::pair<Key, TorchValue>>;

  TorchValue() = default;  // None
  static TorchValue from_bool(bool value);
  static TorchValue from_int(int64_t value);
  static TorchValue from_double(double value);
  static TorchValue from_string(std::string value);
  static TorchValue from_bytes(std::string value);
  static TorchValue from_tensor(Tensor value);
  static TorchValue list(Elements elements);
  static TorchValue tuple(Elements elements);
  // An error when a key occurs twice.
  static TorchValue dict(Items items);

  Kind kind() const { return kind_; }
  // Python's name of the kind: "None", "bool", "int", "float", "str", "bytes", "Tensor",
  // "list", "tuple", "dict".
  std::string_view kind_name() const;
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_double() const { return kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_bytes() const { return kind_ == Kind::Bytes; }
  bool is_tensor() const { return kind_ == Kind::Tensor; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }

  // The value, or an hg::Error naming the kind expected and the kind it is.
  bool to_bool() const;
  int64_t to_int() const;
  double to_double() const;  // a float, or an int converted
  const std::string& to_string() const;
  const std::string& to_bytes() const;
  const Tensor& to_tensor() const;
  const Elements& elements() const;  // a list's or a tuple's
  const Items& items() const;        // a dict's, in insertion order
  size_t size() const;               // of a list, tuple or dict

  // A dict's entry: nullptr / an error naming the keys there are, when it has no such key.
  const TorchValue* find(std::string_view key) const;
  const TorchValue* find(int64_t key) const;
  const TorchValue& at(std::string_view key) const;
  const TorchValue& at(int64_t key) const;

 private:
  Kind kind_ = Kind::None;
  std::variant<std::monostate, bool, int64_t, double, std::string, Tensor,
               std::shared_ptr<const Elements>, std::shared_ptr<const Items>>
      payload_;
};

// A key as text: a str as it is, an int in decimal.
std::string torch_key_string(const TorchValue::Key& key);

// Reads a torch.save file (NOTE [Restricted unpickler]). Tensors are CPU tensors.
TorchValue load_torch_file(const std::string& path);

// The tensors of a state dict in a torch.save file, as nn::Module::load_state_dict takes them.
// The file holds a dict (a state dict), or `entry` names an entry of the file's top-level dict
// that holds it (a training checkpoint's "model" or "state_dict"). Nested dicts are flattened
// with "." as module names are ({"encoder": {"weight": w}} -> "encoder.weight"); any value that
// is neither a tensor nor a dict is an error naming its key.
nn::StateDict load_torch_state_dict(const std::string& path, std::string_view entry = {});

// The same for a value load_torch_file returned; `source` names it in errors.
nn::StateDict torch_state_dict(const TorchValue& value, std::string_view entry = {},
                               std::string_view source = "<value>");

// The restricted unpickler alone, on data.pkl's bytes: `read_storage(key)` returns the bytes
// of the storage record data/<key> (or throws). `source` names the bytes in errors.
using TorchStorageReader = std::function<std::vector<std::byte>(const std::string& key)>;
TorchValue unpickle_torch(std::span<const std::byte> pickle, const TorchStorageReader& read_storage,
                          std::string_view source = "<memory>");

}  // namespace hg::io
