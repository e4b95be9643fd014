// torch.save files (torch_file.h): the value tree, the restricted unpickler (NOTE [Restricted
// unpickler]), the archive around it, and state dicts.
#include "halfgrad/io/torch_file.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/io/zip.h"

namespace hg::io {

// Storages are little-endian bytes, read as they are (NOTE [Little-endian hosts]).
static_assert(std::endian::native == std::endian::little,
              "halfgrad's torch file reader assumes a little-endian host");

// ---- TorchValue ----------------------------------------------------------------------------

namespace {

std::string_view kind_name_of(TorchValue::Kind kind) {
  switch (kind) {
    case TorchValue::Kind::None:
      return "None";
    case TorchValue::Kind::Bool:
      return "bool";
    case TorchValue::Kind::Int:
      return "int";
    case TorchValue::Kind::Float:
      return "float";
    case TorchValue::Kind::String:
      return "str";
    case TorchValue::Kind::Bytes:
      return "bytes";
    case TorchValue::Kind::Tensor:
      return "Tensor";
    case TorchValue::Kind::List:
      return "list";
    case TorchValue::Kind::Tuple:
      return "tuple";
    case TorchValue::Kind::Dict:
      return "dict";
  }
  return "?";
}

// A kind's name with its article, for messages: "an int", "a list", "None", "bytes".
std::string a_kind(std::string_view name) {
  if (name == "None" || name == "bytes") return std::string(name);
  return fmt::format("{} {}", name == "int" ? "an" : "a", name);
}

// A key as Python prints it in a message: 'name' or 7.
std::string quoted_key(const TorchValue::Key& key) {
  if (const auto* text = std::get_if<std::string>(&key)) return fmt::format("\"{}\"", *text);
  return std::to_string(std::get<int64_t>(key));
}

// The keys of a dict for a message, the first few.
std::string key_list(const TorchValue::Items& items) {
  constexpr size_t kShown = 12;
  std::string text = "[";
  for (size_t i = 0; i < items.size() && i < kShown; ++i) {
    if (i > 0) text += ", ";
    text += quoted_key(items[i].first);
  }
  if (items.size() > kShown) text += fmt::format(", ... ({} keys)", items.size());
  return text + "]";
}

}  // namespace

std::string torch_key_string(const TorchValue::Key& key) {
  if (const auto* text = std::get_if<std::string>(&key)) return *text;
  return std::to_string(std::get<int64_t>(key));
}

TorchValue TorchValue::from_bool(bool value) {
  TorchValue out;
  out.kind_ = Kind::Bool;
  out.payload_ = value;
  return out;
}
TorchValue TorchValue::from_int(int64_t value) {
  TorchValue out;
  out.kind_ = Kind::Int;
  out.payload_ = value;
  return out;
}
TorchValue TorchValue::from_double(double value) {
  TorchValue out;
  out.kind_ = Kind::Float;
  out.payload_ = value;
  return out;
}
TorchValue TorchValue::from_string(std::string value) {
  TorchValue out;
  out.kind_ = Kind::String;
  out.payload_ = std::move(value);
  return out;
}
TorchValue TorchValue::from_bytes(std::string value) {
  TorchValue out;
  out.kind_ = Kind::Bytes;
  out.payload_ = std::move(value);
  return out;
}
TorchValue TorchValue::from_tensor(Tensor value) {
  TorchValue out;
  out.kind_ = Kind::Tensor;
  out.payload_ = std::move(value);
  return out;
}
TorchValue TorchValue::list(Elements elements) {
  TorchValue out;
  out.kind_ = Kind::List;
  out.payload_ = std::make_shared<const Elements>(std::move(elements));
  return out;
}
TorchValue TorchValue::tuple(Elements elements) {
  TorchValue out;
  out.kind_ = Kind::Tuple;
  out.payload_ = std::make_shared<const Elements>(std::move(elements));
  return out;
}
TorchValue TorchValue::dict(Items items) {
  std::set<Key> seen;
  for (const auto& [key, value] : items) {
    HG_CHECK(seen.insert(key).second, "TorchValue::dict: expected distinct keys, got {} twice",
             quoted_key(key));
  }
  TorchValue out;
  out.kind_ = Kind::Dict;
  out.payload_ = std::make_shared<const Items>(std::move(items));
  return out;
}

std::string_view TorchValue::kind_name() const { return kind_name_of(kind_); }

bool TorchValue::to_bool() const {
  HG_CHECK(kind_ == Kind::Bool, "TorchValue::to_bool: expected a bool, got {}", kind_name());
  return std::get<bool>(payload_);
}
int64_t TorchValue::to_int() const {
  HG_CHECK(kind_ == Kind::Int, "TorchValue::to_int: expected an int, got {}", kind_name());
  return std::get<int64_t>(payload_);
}
double TorchValue::to_double() const {
  if (kind_ == Kind::Int) return double(std::get<int64_t>(payload_));
  HG_CHECK(kind_ == Kind::Float, "TorchValue::to_double: expected a float or an int, got {}",
           kind_name());
  return std::get<double>(payload_);
}
const std::string& TorchValue::to_string() const {
  HG_CHECK(kind_ == Kind::String, "TorchValue::to_string: expected a str, got {}", kind_name());
  return std::get<std::string>(payload_);
}
const std::string& TorchValue::to_bytes() const {
  HG_CHECK(kind_ == Kind::Bytes, "TorchValue::to_bytes: expected bytes, got {}", kind_name());
  return std::get<std::string>(payload_);
}
const Tensor& TorchValue::to_tensor() const {
  HG_CHECK(kind_ == Kind::Tensor, "TorchValue::to_tensor: expected a Tensor, got {}", kind_name());
  return std::get<Tensor>(payload_);
}
const TorchValue::Elements& TorchValue::elements() const {
  HG_CHECK(kind_ == Kind::List || kind_ == Kind::Tuple,
           "TorchValue::elements: expected a list or a tuple, got {}", kind_name());
  return *std::get<std::shared_ptr<const Elements>>(payload_);
}
const TorchValue::Items& TorchValue::items() const {
  HG_CHECK(kind_ == Kind::Dict, "TorchValue::items: expected a dict, got {}", kind_name());
  return *std::get<std::shared_ptr<const Items>>(payload_);
}
size_t TorchValue::size() const {
  HG_CHECK(kind_ == Kind::List || kind_ == Kind::Tuple || kind_ == Kind::Dict,
           "TorchValue::size: expected a list, a tuple or a dict, got {}", kind_name());
  return kind_ == Kind::Dict ? items().size() : elements().size();
}

const TorchValue* TorchValue::find(std::string_view key) const {
  HG_CHECK(kind_ == Kind::Dict, "TorchValue::find(\"{}\"): expected a dict, got {}", key,
           kind_name());
  for (const auto& [item_key, value] : items()) {
    const auto* text = std::get_if<std::string>(&item_key);
    if (text != nullptr && *text == key) return &value;
  }
  return nullptr;
}
const TorchValue* TorchValue::find(int64_t key) const {
  HG_CHECK(kind_ == Kind::Dict, "TorchValue::find({}): expected a dict, got {}", key, kind_name());
  for (const auto& [item_key, value] : items()) {
    const auto* number = std::get_if<int64_t>(&item_key);
    if (number != nullptr && *number == key) return &value;
  }
  return nullptr;
}
const TorchValue& TorchValue::at(std::string_view key) const {
  const TorchValue* value = find(key);
  HG_CHECK(value != nullptr, "TorchValue::at: expected one of the keys {}, got \"{}\"",
           key_list(items()), key);
  return *value;
}
const TorchValue& TorchValue::at(int64_t key) const {
  const TorchValue* value = find(key);
  HG_CHECK(value != nullptr, "TorchValue::at: expected one of the keys {}, got {}",
           key_list(items()), key);
  return *value;
}

// ---- the restricted unpickler --------------------------------------------------------------

namespace {

// The pickle opcodes (CPython's Lib/pickle.py names them; pickletools documents each).
namespace op {
constexpr uint8_t MARK = '(';
constexpr uint8_t STOP = '.';
constexpr uint8_t POP = '0';
constexpr uint8_t POP_MARK = '1';
constexpr uint8_t DUP = '2';
constexpr uint8_t FLOAT = 'F';
constexpr uint8_t INT = 'I';
constexpr uint8_t BININT = 'J';
constexpr uint8_t BININT1 = 'K';
constexpr uint8_t LONG = 'L';
constexpr uint8_t BININT2 = 'M';
constexpr uint8_t NONE = 'N';
constexpr uint8_t PERSID = 'P';
constexpr uint8_t BINPERSID = 'Q';
constexpr uint8_t REDUCE = 'R';
constexpr uint8_t STRING = 'S';
constexpr uint8_t BINSTRING = 'T';
constexpr uint8_t SHORT_BINSTRING = 'U';
constexpr uint8_t UNICODE = 'V';
constexpr uint8_t BINUNICODE = 'X';
constexpr uint8_t APPEND = 'a';
constexpr uint8_t BUILD = 'b';
constexpr uint8_t GLOBAL = 'c';
constexpr uint8_t DICT = 'd';
constexpr uint8_t EMPTY_DICT = '}';
constexpr uint8_t APPENDS = 'e';
constexpr uint8_t GET = 'g';
constexpr uint8_t BINGET = 'h';
constexpr uint8_t INST = 'i';
constexpr uint8_t LONG_BINGET = 'j';
constexpr uint8_t LIST = 'l';
constexpr uint8_t EMPTY_LIST = ']';
constexpr uint8_t OBJ = 'o';
constexpr uint8_t PUT = 'p';
constexpr uint8_t BINPUT = 'q';
constexpr uint8_t LONG_BINPUT = 'r';
constexpr uint8_t SETITEM = 's';
constexpr uint8_t TUPLE = 't';
constexpr uint8_t EMPTY_TUPLE = ')';
constexpr uint8_t SETITEMS = 'u';
constexpr uint8_t BINFLOAT = 'G';
// protocol 2
constexpr uint8_t PROTO = 0x80;
constexpr uint8_t NEWOBJ = 0x81;
constexpr uint8_t EXT1 = 0x82;
constexpr uint8_t EXT2 = 0x83;
constexpr uint8_t EXT4 = 0x84;
constexpr uint8_t TUPLE1 = 0x85;
constexpr uint8_t TUPLE2 = 0x86;
constexpr uint8_t TUPLE3 = 0x87;
constexpr uint8_t NEWTRUE = 0x88;
constexpr uint8_t NEWFALSE = 0x89;
constexpr uint8_t LONG1 = 0x8a;
constexpr uint8_t LONG4 = 0x8b;
// protocol 3
constexpr uint8_t BINBYTES = 'B';
constexpr uint8_t SHORT_BINBYTES = 'C';
// protocol 4
constexpr uint8_t SHORT_BINUNICODE = 0x8c;
constexpr uint8_t BINUNICODE8 = 0x8d;
constexpr uint8_t BINBYTES8 = 0x8e;
constexpr uint8_t EMPTY_SET = 0x8f;
constexpr uint8_t ADDITEMS = 0x90;
constexpr uint8_t FROZENSET = 0x91;
constexpr uint8_t NEWOBJ_EX = 0x92;
constexpr uint8_t STACK_GLOBAL = 0x93;
constexpr uint8_t MEMOIZE = 0x94;
constexpr uint8_t FRAME = 0x95;
// protocol 5
constexpr uint8_t BYTEARRAY8 = 0x96;
constexpr uint8_t NEXT_BUFFER = 0x97;
constexpr uint8_t READONLY_BUFFER = 0x98;
}  // namespace op

constexpr int kHighestProtocol = 5;
// Tensors of more dims than this are refused.
constexpr size_t kMaxTensorRank = 64;

// What an accepted global stands for (NOTE [Restricted unpickler]).
enum class GlobalKind : uint8_t {
  OrderedDict,
  RebuildTensorV2,
  RebuildTensorV3,
  RebuildParameter,
  RebuildParameterWithState,
  TorchSize,
  CodecsEncode,
  TypedStorage,    // torch.FloatStorage, ...: `dtype` is its element type
  UntypedStorage,  // torch.UntypedStorage: bytes
  DTypeObject,     // torch.float32, ...: `dtype`
};

struct Global {
  GlobalKind kind;
  DType dtype = kFloat32;  // TypedStorage, DTypeObject
  std::string name;        // "module.name", for messages
};

struct NamedDType {
  std::string_view name;
  DType dtype;
};
// torch's typed storage classes and dtype names for the dtypes halfgrad has.
constexpr std::array<NamedDType, 10> kTypedStorages = {{{"FloatStorage", kFloat32},
                                                        {"HalfStorage", kFloat16},
                                                        {"BFloat16Storage", kBFloat16},
                                                        {"DoubleStorage", kFloat64},
                                                        {"LongStorage", kInt64},
                                                        {"IntStorage", kInt32},
                                                        {"BoolStorage", kBool},
                                                        {"ByteStorage", kUInt8},
                                                        {"CharStorage", kInt8},
                                                        {"ShortStorage", kInt16}}};
constexpr std::array<NamedDType, 12> kTorchDTypes = {{{"float32", kFloat32},
                                                      {"float16", kFloat16},
                                                      {"bfloat16", kBFloat16},
                                                      {"float64", kFloat64},
                                                      {"int64", kInt64},
                                                      {"int32", kInt32},
                                                      {"bool", kBool},
                                                      {"uint8", kUInt8},
                                                      {"int8", kInt8},
                                                      {"int16", kInt16},
                                                      {"float8_e4m3fn", kFloat8_e4m3fn},
                                                      {"float8_e5m2", kFloat8_e5m2}}};
// Storage classes and dtypes torch has and halfgrad does not: refused with a message that says
// so, instead of as an unknown global.
constexpr std::array<std::string_view, 9> kUnsupportedStorages = {
    "ComplexFloatStorage", "ComplexDoubleStorage", "QInt8Storage",
    "QUInt8Storage",       "QInt32Storage",        "QUInt4x2Storage",
    "QUInt2x4Storage",     "ComplexHalfStorage",   "UInt16Storage"};
constexpr std::array<std::string_view, 22> kUnsupportedDTypes = {"complex32",
                                                                 "complex64",
                                                                 "complex128",
                                                                 "uint16",
                                                                 "uint32",
                                                                 "uint64",
                                                                 "qint8",
                                                                 "quint8",
                                                                 "qint32",
                                                                 "quint4x2",
                                                                 "quint2x4",
                                                                 "float8_e4m3fnuz",
                                                                 "float8_e5m2fnuz",
                                                                 "float8_e8m0fnu",
                                                                 "float4_e2m1fn_x2",
                                                                 "bits8",
                                                                 "bits16",
                                                                 "bits1x8",
                                                                 "bits2x4",
                                                                 "bits4x2",
                                                                 "int4",
                                                                 "uint4"};

std::string supported_dtype_names() {
  std::string text;
  for (const NamedDType& entry : kTorchDTypes) {
    if (!text.empty()) text += ", ";
    text += entry.name;
  }
  return text;
}

// The node kinds of the unpickler's arena: the value kinds, and the two that exist only as
// arguments (a global and a storage).
enum class NodeKind : uint8_t {
  None,
  Bool,
  Int,
  Float,
  String,
  Bytes,
  Tensor,
  List,
  Tuple,
  Dict,
  Global,
  Storage
};

std::string_view node_kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::Global:
      return "global";
    case NodeKind::Storage:
      return "storage";
    default:
      return kind_name_of(static_cast<TorchValue::Kind>(kind));
  }
}

// Lists, tuples and dicts while they are being built.
struct Container {
  std::vector<size_t> elements;       // list, tuple: node ids; dict: values, in insertion order
  std::vector<TorchValue::Key> keys;  // dict
  std::map<TorchValue::Key, size_t> index;  // dict: key -> position
};

struct Node {
  NodeKind kind = NodeKind::None;
  int64_t integer = 0;  // Bool, Int; Global: index into globals_; Storage: into storages_
  double real = 0;
  std::string text;  // String, Bytes
  Tensor tensor;
  std::unique_ptr<Container> container;  // List, Tuple, Dict
};

// A persistent id ('storage', type, key, location, numel), resolved.
struct StorageRef {
  std::string key;
  std::optional<DType> dtype;  // nullopt: an untyped storage (numel counts bytes)
  int64_t numel = 0;
};

class Unpickler {
 public:
  Unpickler(std::span<const std::byte> bytes, const TorchStorageReader& read_storage,
            std::string_view source)
      : bytes_(bytes), read_storage_(read_storage), source_(source) {}

  TorchValue run();

 private:
  // -- errors --
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    HG_ERROR("{}: data.pkl, opcode at byte {}: {}", source_, op_start_,
             fmt::format(format, std::forward<Args>(args)...));
  }

  // -- reading bytes --
  size_t left() const { return bytes_.size() - pos_; }
  std::string_view take(uint64_t count, std::string_view what) {
    if (count > left()) {
      fail("{} needs {} bytes, but only {} are left (truncated or corrupted)", what, count, left());
    }
    const auto* begin = reinterpret_cast<const char*>(bytes_.data()) + pos_;
    pos_ += size_t(count);
    return {begin, size_t(count)};
  }
  uint64_t take_unsigned(size_t width, std::string_view what) {
    const std::string_view raw = take(width, what);
    uint64_t value = 0;
    for (size_t i = width; i-- > 0;) value = (value << 8) | uint8_t(raw[i]);
    return value;
  }
  // A line of a text opcode, without its '\n'.
  std::string_view take_line(std::string_view what) {
    const auto* begin = reinterpret_cast<const char*>(bytes_.data()) + pos_;
    const std::string_view rest(begin, left());
    const size_t end = rest.find('\n');
    if (end == std::string_view::npos) fail("{}: no end of line (truncated or corrupted)", what);
    pos_ += end + 1;
    return rest.substr(0, end);
  }

  // -- the arena, the stack, the marks, the memo --
  size_t add(Node node) {
    nodes_.push_back(std::move(node));
    return nodes_.size() - 1;
  }
  size_t add_node(NodeKind kind, int64_t integer = 0) {
    Node node;
    node.kind = kind;
    node.integer = integer;
    return add(std::move(node));
  }
  size_t add_int(int64_t value) { return add_node(NodeKind::Int, value); }
  size_t add_float(double value) {
    Node node;
    node.kind = NodeKind::Float;
    node.real = value;
    return add(std::move(node));
  }
  size_t add_text(NodeKind kind, std::string text) {
    Node node;
    node.kind = kind;
    node.text = std::move(text);
    return add(std::move(node));
  }
  size_t add_container(NodeKind kind, std::vector<size_t> elements = {}) {
    Node node;
    node.kind = kind;
    node.container = std::make_unique<Container>();
    node.container->elements = std::move(elements);
    return add(std::move(node));
  }
  void push(size_t id) { stack_.push_back(id); }
  size_t stack_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t pop(std::string_view what) {
    if (stack_.size() <= stack_floor()) {
      fail("{} needs a value on the stack, but {} (stack underflow)", what,
           marks_.empty() ? "the stack is empty" : "there is none above the last MARK");
    }
    const size_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  size_t top(std::string_view what) {
    const size_t id = pop(what);
    stack_.push_back(id);
    return id;
  }
  // The values pushed since the last MARK, which is removed.
  std::vector<size_t> pop_mark(std::string_view what) {
    if (marks_.empty()) fail("{} needs a MARK on the stack, but there is none", what);
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<size_t> items(stack_.begin() + std::ptrdiff_t(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  void memo_put(uint64_t index, std::string_view what) { memo_[index] = top(what); }
  void memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry {} is read before it is written", index);
    push(it->second);
  }

  const Node& node(size_t id) const { return nodes_[id]; }
  Node& expect(size_t id, NodeKind kind, std::string_view what) {
    if (nodes_[id].kind != kind) {
      fail("{}: expected {}, got {}", what, a_kind(node_kind_name(kind)),
           a_kind(node_kind_name(nodes_[id].kind)));
    }
    return nodes_[id];
  }
  int64_t expect_int(size_t id, std::string_view what) {
    return expect(id, NodeKind::Int, what).integer;
  }
  bool expect_bool(size_t id, std::string_view what) {
    return expect(id, NodeKind::Bool, what).integer != 0;
  }
  const std::string& expect_string(size_t id, std::string_view what) {
    return expect(id, NodeKind::String, what).text;
  }
  // A tuple of ints (a tensor's size or stride; torch.Size is a tuple here).
  std::vector<int64_t> expect_int_tuple(size_t id, std::string_view what) {
    const Node& tuple = expect(id, NodeKind::Tuple, what);
    std::vector<int64_t> values;
    for (size_t element : tuple.container->elements) values.push_back(expect_int(element, what));
    return values;
  }
  const Global& expect_global(size_t id, std::string_view what) {
    return globals_[size_t(expect(id, NodeKind::Global, what).integer)];
  }

  // -- opcodes --
  void dispatch(uint8_t code);
  void push_int_text(std::string_view text, std::string_view what);
  void push_long(std::string_view little_endian);
  TorchValue::Key dict_key(size_t id, std::string_view what);
  void set_item(Node& dict, size_t key_id, size_t value_id);
  void push_global(std::string_view module, std::string_view name);
  void reduce();
  void build();
  void persistent_load();

  // -- calls of accepted globals --
  size_t rebuild_tensor(const std::vector<size_t>& args, bool v3);
  size_t rebuild_parameter(const std::vector<size_t>& args, bool with_state);
  size_t codecs_encode(const std::vector<size_t>& args);
  const Storage& load_storage(const StorageRef& ref);

  // -- the result --
  TorchValue convert(size_t id, size_t depth);

  std::span<const std::byte> bytes_;
  const TorchStorageReader& read_storage_;
  std::string_view source_;
  size_t pos_ = 0;
  size_t op_start_ = 0;
  int protocol_ = 0;

  std::vector<Node> nodes_;
  std::vector<size_t> stack_;
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<uint64_t, size_t> memo_;
  std::vector<Global> globals_;
  std::vector<StorageRef> storages_;
  std::map<std::string, Storage> loaded_storages_;  // key -> bytes
  std::set<std::string> checked_bool_storages_;

  enum class Visit : uint8_t { New, InProgress, Done };
  std::vector<Visit> visits_;
  std::vector<TorchValue> converted_;
};

TorchValue Unpickler::run() {
  while (true) {
    op_start_ = pos_;
    if (left() == 0) fail("the pickle ends without a STOP opcode (truncated)");
    const auto code = uint8_t(bytes_[pos_++]);
    if (code == op::STOP) break;
    dispatch(code);
  }
  const size_t root = pop("STOP");
  visits_.assign(nodes_.size(), Visit::New);
  converted_.assign(nodes_.size(), TorchValue());
  return convert(root, 0);
}

void Unpickler::dispatch(uint8_t code) {
  switch (code) {
    // -- framing --
    case op::PROTO: {
      const auto version = int(take_unsigned(1, "PROTO"));
      if (version > kHighestProtocol) {
        fail("expected pickle protocol 0 to {}, got {}", kHighestProtocol, version);
      }
      protocol_ = version;
      return;
    }
    case op::FRAME: {
      // A frame is a length hint for buffered readers; its opcodes follow as usual.
      const uint64_t length = take_unsigned(8, "FRAME");
      if (length > left()) {
        fail("FRAME of {} bytes, but only {} are left (truncated or corrupted)", length, left());
      }
      return;
    }
    // -- the stack --
    case op::MARK:
      marks_.push_back(stack_.size());
      return;
    case op::POP:
      if (stack_.size() > stack_floor()) {
        stack_.pop_back();
      } else {
        (void)pop_mark("POP");  // CPython's POP of an empty frame pops the mark
      }
      return;
    case op::POP_MARK:
      (void)pop_mark("POP_MARK");
      return;
    case op::DUP:
      push(top("DUP"));
      return;
    // -- the memo --
    case op::PUT: {
      const std::string_view line = take_line("PUT");
      uint64_t index = 0;
      const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), index);
      if (error != std::errc() || end != line.data() + line.size()) {
        fail("PUT: expected a memo index, got \"{}\"", line.substr(0, 40));
      }
      memo_put(index, "PUT");
      return;
    }
    case op::BINPUT:
      memo_put(take_unsigned(1, "BINPUT"), "BINPUT");
      return;
    case op::LONG_BINPUT:
      memo_put(take_unsigned(4, "LONG_BINPUT"), "LONG_BINPUT");
      return;
    case op::MEMOIZE:
      memo_put(memo_.size(), "MEMOIZE");
      return;
    case op::GET: {
      const std::string_view line = take_line("GET");
      uint64_t index = 0;
      const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), index);
      if (error != std::errc() || end != line.data() + line.size()) {
        fail("GET: expected a memo index, got \"{}\"", line.substr(0, 40));
      }
      memo_get(index);
      return;
    }
    case op::BINGET:
      memo_get(take_unsigned(1, "BINGET"));
      return;
    case op::LONG_BINGET:
      memo_get(take_unsigned(4, "LONG_BINGET"));
      return;
    // -- scalars --
    case op::NONE:
      push(add_node(NodeKind::None));
      return;
    case op::NEWTRUE:
      push(add_node(NodeKind::Bool, 1));
      return;
    case op::NEWFALSE:
      push(add_node(NodeKind::Bool, 0));
      return;
    case op::BININT1:
      push(add_int(int64_t(take_unsigned(1, "BININT1"))));
      return;
    case op::BININT2:
      push(add_int(int64_t(take_unsigned(2, "BININT2"))));
      return;
    case op::BININT: {
      const auto raw = uint32_t(take_unsigned(4, "BININT"));
      push(add_int(int64_t(std::bit_cast<int32_t>(raw))));
      return;
    }
    case op::LONG1:
      push_long(take(take_unsigned(1, "LONG1"), "LONG1"));
      return;
    case op::LONG4: {
      const auto length = std::bit_cast<int32_t>(uint32_t(take_unsigned(4, "LONG4")));
      if (length < 0) fail("LONG4: expected a byte count, got {}", length);
      push_long(take(uint64_t(length), "LONG4"));
      return;
    }
    case op::INT:
      push_int_text(take_line("INT"), "INT");
      return;
    case op::LONG: {
      std::string_view line = take_line("LONG");
      if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
      push_int_text(line, "LONG");
      return;
    }
    case op::BINFLOAT: {
      // Big-endian IEEE 754 double.
      const std::string_view raw = take(8, "BINFLOAT");
      uint64_t bits = 0;
      for (char c : raw) bits = (bits << 8) | uint8_t(c);
      push(add_float(std::bit_cast<double>(bits)));
      return;
    }
    case op::FLOAT: {
      const std::string_view line = take_line("FLOAT");
      double value = 0;
      const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), value);
      if (error != std::errc() || end != line.data() + line.size()) {
        fail("FLOAT: expected a decimal number, got \"{}\"", line.substr(0, 40));
      }
      push(add_float(value));
      return;
    }
    // -- strings and bytes (Python 2 strings, BINSTRING, are read as str) --
    case op::BINUNICODE:
    case op::SHORT_BINUNICODE:
    case op::BINUNICODE8:
    case op::BINSTRING:
    case op::SHORT_BINSTRING:
    case op::BINBYTES:
    case op::SHORT_BINBYTES:
    case op::BINBYTES8:
    case op::BYTEARRAY8: {
      const bool is_text = code == op::BINUNICODE || code == op::SHORT_BINUNICODE ||
                           code == op::BINUNICODE8 || code == op::BINSTRING ||
                           code == op::SHORT_BINSTRING;
      const size_t width =
          (code == op::SHORT_BINUNICODE || code == op::SHORT_BINSTRING ||
           code == op::SHORT_BINBYTES)
              ? 1
          : (code == op::BINUNICODE8 || code == op::BINBYTES8 || code == op::BYTEARRAY8) ? 8
                                                                                         : 4;
      const std::string_view what = is_text ? "a string" : "a bytes object";
      const std::string_view data = take(take_unsigned(width, what), what);
      push(add_text(is_text ? NodeKind::String : NodeKind::Bytes, std::string(data)));
      return;
    }
    // -- containers --
    case op::EMPTY_LIST:
      push(add_container(NodeKind::List));
      return;
    case op::EMPTY_DICT:
      push(add_container(NodeKind::Dict));
      return;
    case op::EMPTY_TUPLE:
      push(add_container(NodeKind::Tuple));
      return;
    case op::TUPLE:
      push(add_container(NodeKind::Tuple, pop_mark("TUPLE")));
      return;
    case op::TUPLE1:
    case op::TUPLE2:
    case op::TUPLE3: {
      std::vector<size_t> elements(size_t(code - op::TUPLE1 + 1));
      for (size_t i = elements.size(); i-- > 0;) elements[i] = pop("TUPLE1/2/3");
      push(add_container(NodeKind::Tuple, std::move(elements)));
      return;
    }
    case op::LIST:
      push(add_container(NodeKind::List, pop_mark("LIST")));
      return;
    case op::DICT: {
      const std::vector<size_t> items = pop_mark("DICT");
      if (items.size() % 2 != 0)
        fail("DICT: expected key, value pairs, got {} values", items.size());
      const size_t dict = add_container(NodeKind::Dict);
      for (size_t i = 0; i < items.size(); i += 2) set_item(nodes_[dict], items[i], items[i + 1]);
      push(dict);
      return;
    }
    case op::APPEND: {
      const size_t value = pop("APPEND");
      Node& list = expect(top("APPEND"), NodeKind::List, "APPEND");
      list.container->elements.push_back(value);
      return;
    }
    case op::APPENDS: {
      const std::vector<size_t> values = pop_mark("APPENDS");
      Node& list = expect(top("APPENDS"), NodeKind::List, "APPENDS");
      list.container->elements.insert(list.container->elements.end(), values.begin(), values.end());
      return;
    }
    case op::SETITEM: {
      const size_t value = pop("SETITEM");
      const size_t key = pop("SETITEM");
      set_item(expect(top("SETITEM"), NodeKind::Dict, "SETITEM"), key, value);
      return;
    }
    case op::SETITEMS: {
      const std::vector<size_t> items = pop_mark("SETITEMS");
      if (items.size() % 2 != 0) {
        fail("SETITEMS: expected key, value pairs, got {} values", items.size());
      }
      const size_t dict = top("SETITEMS");
      expect(dict, NodeKind::Dict, "SETITEMS");
      for (size_t i = 0; i < items.size(); i += 2) set_item(nodes_[dict], items[i], items[i + 1]);
      return;
    }
    // -- globals and calls --
    case op::GLOBAL: {
      const std::string module(take_line("GLOBAL"));
      const std::string name(take_line("GLOBAL"));
      push_global(module, name);
      return;
    }
    case op::STACK_GLOBAL: {
      const size_t name = pop("STACK_GLOBAL");
      const size_t module = pop("STACK_GLOBAL");
      const std::string module_text = expect_string(module, "STACK_GLOBAL's module");
      const std::string name_text = expect_string(name, "STACK_GLOBAL's name");
      push_global(module_text, name_text);
      return;
    }
    case op::REDUCE:
      reduce();
      return;
    case op::BUILD:
      build();
      return;
    case op::BINPERSID:
      persistent_load();
      return;
    // -- refused (NOTE [Restricted unpickler]) --
    case op::INST: {
      const std::string module(take_line("INST"));
      const std::string name(take_line("INST"));
      fail(
          "refused: INST would create an instance of {}.{}; halfgrad loads plain data and "
          "tensors only (NOTE [Restricted unpickler])",
          module, name);
    }
    case op::OBJ:
    case op::NEWOBJ:
    case op::NEWOBJ_EX: {
      const std::string_view opcode = code == op::OBJ      ? "OBJ"
                                      : code == op::NEWOBJ ? "NEWOBJ"
                                                           : "NEWOBJ_EX";
      fail(
          "refused: {} creates an object of a class; halfgrad loads plain data and tensors only "
          "(NOTE [Restricted unpickler])",
          opcode);
    }
    case op::EXT1:
    case op::EXT2:
    case op::EXT4:
      fail(
          "refused: EXT1/EXT2/EXT4 name a global through Python's extension registry; halfgrad "
          "accepts only the globals torch.save writes for tensors and plain data");
    case op::EMPTY_SET:
    case op::ADDITEMS:
    case op::FROZENSET:
      fail("sets are not supported (expected dicts, lists, tuples, scalars, strings and tensors)");
    case op::NEXT_BUFFER:
    case op::READONLY_BUFFER:
      fail("out-of-band buffers (pickle protocol 5's NEXT_BUFFER) are not supported");
    case op::PERSID:
    case op::STRING:
    case op::UNICODE:
      fail("the protocol 0 opcode '{}' is not supported (torch.save writes protocol 2)",
           char(code));
    default:
      fail("unknown pickle opcode 0x{:02x} (corrupted?)", code);
  }
}

void Unpickler::push_int_text(std::string_view text, std::string_view what) {
  // Protocol 0 spells True and False as INT "01" and "00".
  if (what == "INT" && (text == "01" || text == "00")) {
    push(add_node(NodeKind::Bool, text == "01" ? 1 : 0));
    return;
  }
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    fail("{}: the integer {} does not fit in 64 bits", what, text.substr(0, 40));
  }
  if (error != std::errc() || end != text.data() + text.size()) {
    fail("{}: expected a decimal integer, got \"{}\"", what, text.substr(0, 40));
  }
  push(add_int(value));
}

// A two's complement little-endian integer of any length (LONG1, LONG4).
void Unpickler::push_long(std::string_view little_endian) {
  if (little_endian.empty()) {
    push(add_int(0));
    return;
  }
  // Bytes past the eighth must only extend the sign.
  const bool negative = (uint8_t(little_endian.back()) & 0x80) != 0;
  const uint8_t extension = negative ? 0xff : 0x00;
  for (size_t i = 8; i < little_endian.size(); ++i) {
    if (uint8_t(little_endian[i]) != extension) {
      fail("an integer of {} bytes does not fit in 64 bits", little_endian.size());
    }
  }
  uint64_t bits = negative ? ~uint64_t(0) : 0;
  const size_t used = std::min<size_t>(little_endian.size(), 8);
  for (size_t i = 0; i < used; ++i) {
    bits &= ~(uint64_t(0xff) << (8 * i));
    bits |= uint64_t(uint8_t(little_endian[i])) << (8 * i);
  }
  const auto value = std::bit_cast<int64_t>(bits);
  if (little_endian.size() > 8 && (value < 0) != negative) {
    fail("an integer of {} bytes does not fit in 64 bits", little_endian.size());
  }
  push(add_int(value));
}

TorchValue::Key Unpickler::dict_key(size_t id, std::string_view what) {
  const Node& key_node = node(id);
  if (key_node.kind == NodeKind::String) return key_node.text;
  if (key_node.kind == NodeKind::Int) return key_node.integer;
  fail("{}: expected a str or int dict key, got {}", what, a_kind(node_kind_name(key_node.kind)));
}

void Unpickler::set_item(Node& dict, size_t key_id, size_t value_id) {
  TorchValue::Key key = dict_key(key_id, "a dict's key");
  Container& container = *dict.container;
  const auto [it, inserted] = container.index.emplace(key, container.keys.size());
  if (inserted) {
    container.keys.push_back(std::move(key));
    container.elements.push_back(value_id);
  } else {
    container.elements[it->second] = value_id;  // a key set twice keeps its last value
  }
}

void Unpickler::push_global(std::string_view module, std::string_view name) {
  const std::string full = fmt::format("{}.{}", module, name);
  const auto accept = [&](GlobalKind kind, DType dtype = kFloat32) {
    globals_.push_back(Global{.kind = kind, .dtype = dtype, .name = full});
    push(add_node(NodeKind::Global, int64_t(globals_.size() - 1)));
  };
  if (module == "collections" && name == "OrderedDict") return accept(GlobalKind::OrderedDict);
  if (module == "torch._utils") {
    if (name == "_rebuild_tensor_v2") return accept(GlobalKind::RebuildTensorV2);
    if (name == "_rebuild_tensor_v3") return accept(GlobalKind::RebuildTensorV3);
    if (name == "_rebuild_parameter") return accept(GlobalKind::RebuildParameter);
    if (name == "_rebuild_parameter_with_state") {
      return accept(GlobalKind::RebuildParameterWithState);
    }
    if (name == "_rebuild_qtensor") fail("refused {}: quantized tensors are not supported", full);
    if (name == "_rebuild_sparse_tensor" || name == "_rebuild_sparse_csr_tensor") {
      fail("refused {}: sparse tensors are not supported", full);
    }
  }
  if (module == "torch" || module == "torch.storage") {
    if (name == "UntypedStorage") return accept(GlobalKind::UntypedStorage);
  }
  if (module == "torch") {
    if (name == "Size") return accept(GlobalKind::TorchSize);
    for (const NamedDType& entry : kTypedStorages) {
      if (name == entry.name) return accept(GlobalKind::TypedStorage, entry.dtype);
    }
    for (const NamedDType& entry : kTorchDTypes) {
      if (name == entry.name) return accept(GlobalKind::DTypeObject, entry.dtype);
    }
    if (std::find(kUnsupportedStorages.begin(), kUnsupportedStorages.end(), name) !=
            kUnsupportedStorages.end() ||
        std::find(kUnsupportedDTypes.begin(), kUnsupportedDTypes.end(), name) !=
            kUnsupportedDTypes.end()) {
      fail("the file holds a tensor of {}, a dtype halfgrad does not have (it reads {})", full,
           supported_dtype_names());
    }
  }
  if (module == "_codecs" && name == "encode") return accept(GlobalKind::CodecsEncode);
  fail(
      "refused the global {}: halfgrad loads only tensors and plain data (dict, list, tuple, "
      "str, bytes, int, float, bool, None), as torch.load(weights_only=True); it runs nothing "
      "from the file (NOTE [Restricted unpickler]). Save the state_dict() instead of objects",
      full);
}

void Unpickler::reduce() {
  const size_t args_id = pop("REDUCE");
  const size_t callable_id = pop("REDUCE");
  const Global& callable = expect_global(callable_id, "REDUCE's callable");
  const std::vector<size_t> args =
      expect(args_id, NodeKind::Tuple, "REDUCE's arguments").container->elements;
  const auto expect_arg_count = [&](size_t low, size_t high) {
    if (args.size() < low || args.size() > high) {
      if (low == high) fail("{} takes {} arguments, got {}", callable.name, low, args.size());
      fail("{} takes {} to {} arguments, got {}", callable.name, low, high, args.size());
    }
  };
  switch (callable.kind) {
    case GlobalKind::OrderedDict:
      // torch.save writes OrderedDict() and then its items with SETITEMS.
      expect_arg_count(0, 0);
      push(add_container(NodeKind::Dict));
      return;
    case GlobalKind::RebuildTensorV2:
      push(rebuild_tensor(args, /*v3=*/false));
      return;
    case GlobalKind::RebuildTensorV3:
      push(rebuild_tensor(args, /*v3=*/true));
      return;
    case GlobalKind::RebuildParameter:
      push(rebuild_parameter(args, false));
      return;
    case GlobalKind::RebuildParameterWithState:
      push(rebuild_parameter(args, true));
      return;
    case GlobalKind::TorchSize: {
      expect_arg_count(1, 1);
      const std::vector<int64_t> sizes = expect_int_tuple(args[0], "torch.Size's argument");
      (void)sizes;
      push(add_container(NodeKind::Tuple, node(args[0]).container->elements));
      return;
    }
    case GlobalKind::CodecsEncode:
      push(codecs_encode(args));
      return;
    case GlobalKind::TypedStorage:
    case GlobalKind::UntypedStorage:
    case GlobalKind::DTypeObject:
      fail("refused to call {}: it is accepted only as an argument of a tensor's rebuild",
           callable.name);
  }
}

void Unpickler::build() {
  const size_t state = pop("BUILD");
  const size_t target = top("BUILD");
  // torch.save gives an OrderedDict state dict its _metadata (module versions) as BUILD's
  // state; halfgrad has no use for it.
  if (node(target).kind == NodeKind::Dict &&
      (node(state).kind == NodeKind::Dict || node(state).kind == NodeKind::None)) {
    return;
  }
  fail("BUILD: expected to set a dict's attributes from a dict, got {} and {}",
       a_kind(node_kind_name(node(target).kind)), a_kind(node_kind_name(node(state).kind)));
}

void Unpickler::persistent_load() {
  const size_t pid_id = pop("BINPERSID");
  const Node& pid = expect(pid_id, NodeKind::Tuple, "BINPERSID's id");
  const std::vector<size_t>& fields = pid.container->elements;
  if (fields.size() != 5 || node(fields[0]).kind != NodeKind::String ||
      node(fields[0]).text != "storage") {
    fail(
        "expected a persistent id ('storage', storage type, key, location, numel), got a "
        "tuple of {} values",
        fields.size());
  }
  const Global& type = expect_global(fields[1], "the persistent id's storage type");
  StorageRef ref;
  if (type.kind == GlobalKind::TypedStorage) {
    ref.dtype = type.dtype;
  } else if (type.kind != GlobalKind::UntypedStorage) {
    fail("the persistent id's storage type: expected a storage class, got {}", type.name);
  }
  ref.key = expect_string(fields[2], "the persistent id's key");
  (void)expect_string(fields[3], "the persistent id's location");  // loaded to the CPU
  ref.numel = expect_int(fields[4], "the persistent id's numel");
  if (ref.numel < 0) fail("a storage of {} elements", ref.numel);
  storages_.push_back(std::move(ref));
  // Read now, as torch does: a missing or short record is an error here.
  (void)load_storage(storages_.back());
  push(add_node(NodeKind::Storage, int64_t(storages_.size() - 1)));
}

const Storage& Unpickler::load_storage(const StorageRef& ref) {
  const size_t element_bytes = ref.dtype ? element_size(*ref.dtype) : 1;
  if (uint64_t(ref.numel) > uint64_t(std::numeric_limits<int64_t>::max()) / element_bytes) {
    fail("storage \"{}\": {} elements of {} bytes overflow", ref.key, ref.numel, element_bytes);
  }
  const uint64_t nbytes = uint64_t(ref.numel) * element_bytes;
  const auto it = loaded_storages_.find(ref.key);
  if (it != loaded_storages_.end()) {
    if (it->second->nbytes() != nbytes) {
      fail("storage \"{}\" is named as {} bytes and earlier as {} bytes", ref.key, nbytes,
           it->second->nbytes());
    }
    return it->second;
  }
  const std::vector<std::byte> bytes = read_storage_(ref.key);
  if (bytes.size() != nbytes) {
    fail("storage \"{}\": expected {} bytes ({} elements of {} bytes), its record holds {}",
         ref.key, nbytes, ref.numel, element_bytes, bytes.size());
  }
  Storage storage = make_storage(bytes.size(), kCPU);
  if (!bytes.empty()) std::memcpy(storage->data(), bytes.data(), bytes.size());
  return loaded_storages_.emplace(ref.key, std::move(storage)).first->second;
}

size_t Unpickler::rebuild_tensor(const std::vector<size_t>& args, bool v3) {
  // v2: (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  // v3: (storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
  const std::string_view name = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
  const size_t base = v3 ? 7 : 6;
  if (args.size() != base && args.size() != base + 1) {
    fail("{} takes {} or {} arguments, got {}", name, base, base + 1, args.size());
  }
  const StorageRef ref =
      storages_[size_t(expect(args[0], NodeKind::Storage, "a tensor's storage").integer)];
  const int64_t offset = expect_int(args[1], "a tensor's storage offset");
  const std::vector<int64_t> sizes = expect_int_tuple(args[2], "a tensor's size");
  const std::vector<int64_t> strides = expect_int_tuple(args[3], "a tensor's stride");
  (void)expect_bool(args[4], "a tensor's requires_grad");  // halfgrad loads plain tensors
  (void)expect(args[5], NodeKind::Dict, "a tensor's backward hooks");
  DType dtype = kFloat32;
  if (v3) {
    const Global& dtype_global = expect_global(args[6], "_rebuild_tensor_v3's dtype");
    if (dtype_global.kind != GlobalKind::DTypeObject) {
      fail("_rebuild_tensor_v3's dtype: expected a torch dtype, got {}", dtype_global.name);
    }
    if (ref.dtype) fail("_rebuild_tensor_v3: expected an untyped storage, got a typed one");
    dtype = dtype_global.dtype;
  } else {
    if (!ref.dtype) fail("_rebuild_tensor_v2: expected a typed storage, got an untyped one");
    dtype = *ref.dtype;
  }
  if (args.size() == base + 1) {
    // Tensor metadata: the conj and neg bits, as {name: bool}; a set bit is not supported.
    const Node& metadata = node(args[base]);
    if (metadata.kind == NodeKind::Dict) {
      for (size_t i = 0; i < metadata.container->keys.size(); ++i) {
        const size_t value = metadata.container->elements[i];
        if (node(value).kind != NodeKind::Bool || node(value).integer != 0) {
          fail("a tensor with the metadata {} set (a conj or neg bit) is not supported",
               quoted_key(metadata.container->keys[i]));
        }
      }
    } else if (metadata.kind != NodeKind::None) {
      fail("a tensor's metadata: expected a dict or None, got {}",
           a_kind(node_kind_name(metadata.kind)));
    }
  }

  // The tensor's extent, checked against the storage before any view is made.
  if (sizes.size() != strides.size()) {
    fail("a tensor with {} sizes and {} strides", sizes.size(), strides.size());
  }
  if (sizes.size() > kMaxTensorRank) {
    fail("a tensor of {} dims (at most {} are supported)", sizes.size(), kMaxTensorRank);
  }
  if (offset < 0) fail("a tensor's storage offset: expected >= 0, got {}", offset);
  const Storage& storage = load_storage(ref);
  const uint64_t capacity = storage->nbytes() / element_size(dtype);
  bool empty = false;
  uint64_t last = uint64_t(offset);  // the largest element index the tensor reaches
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0) fail("a tensor's size: expected sizes >= 0, got {}", fmt::join(sizes, ", "));
    if (strides[d] < 0) {
      fail("a tensor's stride: expected strides >= 0, got {}", fmt::join(strides, ", "));
    }
    if (sizes[d] == 0) empty = true;
  }
  if (!empty) {
    for (size_t d = 0; d < sizes.size(); ++d) {
      const uint64_t span = uint64_t(sizes[d] - 1);
      const uint64_t stride = uint64_t(strides[d]);
      if (stride != 0 && span > (std::numeric_limits<uint64_t>::max() - last) / stride) {
        fail("a tensor of size ({}) and stride ({}) reaches past any storage",
             fmt::join(sizes, ", "), fmt::join(strides, ", "));
      }
      last += span * stride;
    }
  }
  const bool fits = empty ? uint64_t(offset) <= capacity : last < capacity;
  if (!fits) {
    fail(
        "a tensor of size ({}), stride ({}) and offset {} needs more than the {} {} elements "
        "of its storage \"{}\"",
        fmt::join(sizes, ", "), fmt::join(strides, ", "), offset, capacity, dtype_name(dtype),
        ref.key);
  }
  if (!empty) {
    int64_t numel = 1;  // sizes are each <= capacity, so the product of non-empty ones fits
    for (int64_t size : sizes) {
      if (size > 0 && numel > std::numeric_limits<int64_t>::max() / size) {
        fail("a tensor of size ({}) has too many elements", fmt::join(sizes, ", "));
      }
      numel *= size;
    }
  }
  if (dtype == kBool && checked_bool_storages_.insert(ref.key).second) {
    // Read as bytes before any is used as a bool: a bool holding 2 is undefined behaviour.
    const auto* data = static_cast<const unsigned char*>(storage->data());
    for (size_t i = 0; i < storage->nbytes(); ++i) {
      if (data[i] > 1) {
        fail("storage \"{}\" of bools: expected bytes 0 or 1, got {} at byte {}", ref.key,
             int(data[i]), i);
      }
    }
  }
  Tensor tensor(std::make_shared<TensorImpl>(storage, dtype, Shape(std::span<const int64_t>(sizes)),
                                             Shape(std::span<const int64_t>(strides)), offset));
  Node node;
  node.kind = NodeKind::Tensor;
  node.tensor = std::move(tensor);
  return add(std::move(node));
}

size_t Unpickler::rebuild_parameter(const std::vector<size_t>& args, bool with_state) {
  // (data, requires_grad, backward_hooks[, state]): the parameter's tensor.
  const size_t count = with_state ? 4 : 3;
  if (args.size() != count) {
    fail("{} takes {} arguments, got {}",
         with_state ? "_rebuild_parameter_with_state" : "_rebuild_parameter", count, args.size());
  }
  (void)expect(args[0], NodeKind::Tensor, "a parameter's data");
  (void)expect_bool(args[1], "a parameter's requires_grad");
  (void)expect(args[2], NodeKind::Dict, "a parameter's backward hooks");
  return args[0];
}

// _codecs.encode(text, "latin1"): protocol 2's spelling of a bytes object, each code point of
// the text (at most U+00FF) one byte.
size_t Unpickler::codecs_encode(const std::vector<size_t>& args) {
  if (args.size() != 2) fail("_codecs.encode takes 2 arguments, got {}", args.size());
  const std::string& text = expect_string(args[0], "_codecs.encode's text");
  const std::string& encoding = expect_string(args[1], "_codecs.encode's encoding");
  if (encoding != "latin1" && encoding != "latin-1") {
    fail("_codecs.encode: expected the encoding \"latin1\", got \"{}\"", encoding.substr(0, 40));
  }
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto lead = uint8_t(text[i]);
    if (lead < 0x80) {
      out += char(lead);
      i += 1;
    } else if ((lead & 0xe0) == 0xc0 && i + 1 < text.size() &&
               (uint8_t(text[i + 1]) & 0xc0) == 0x80) {
      const unsigned code_point = ((lead & 0x1fu) << 6) | (uint8_t(text[i + 1]) & 0x3fu);
      if (code_point > 0xff) {
        fail("_codecs.encode: the code point U+{:04X} is not latin1", code_point);
      }
      out += char(code_point);
      i += 2;
    } else {
      fail(
          "_codecs.encode: expected latin1 text (UTF-8 of code points up to U+00FF), got byte "
          "0x{:02x} at {}",
          lead, i);
    }
  }
  return add_text(NodeKind::Bytes, std::move(out));
}

TorchValue Unpickler::convert(size_t id, size_t depth) {
  if (visits_[id] == Visit::Done) return converted_[id];
  if (visits_[id] == Visit::InProgress) {
    fail("a {} contains itself (recursive data is not supported)", node_kind_name(node(id).kind));
  }
  if (depth > kMaxTorchValueDepth) {
    fail("the data nests deeper than {} lists, tuples and dicts", kMaxTorchValueDepth);
  }
  const Node& n = node(id);
  TorchValue value;
  switch (n.kind) {
    case NodeKind::None:
      break;
    case NodeKind::Bool:
      value = TorchValue::from_bool(n.integer != 0);
      break;
    case NodeKind::Int:
      value = TorchValue::from_int(n.integer);
      break;
    case NodeKind::Float:
      value = TorchValue::from_double(n.real);
      break;
    case NodeKind::String:
      value = TorchValue::from_string(n.text);
      break;
    case NodeKind::Bytes:
      value = TorchValue::from_bytes(n.text);
      break;
    case NodeKind::Tensor:
      value = TorchValue::from_tensor(n.tensor);
      break;
    case NodeKind::List:
    case NodeKind::Tuple:
    case NodeKind::Dict: {
      visits_[id] = Visit::InProgress;
      TorchValue::Elements elements;
      elements.reserve(n.container->elements.size());
      for (size_t element : n.container->elements) elements.push_back(convert(element, depth + 1));
      if (n.kind == NodeKind::Dict) {
        TorchValue::Items items;
        items.reserve(elements.size());
        for (size_t i = 0; i < elements.size(); ++i) {
          items.emplace_back(n.container->keys[i], std::move(elements[i]));
        }
        value = TorchValue::dict(std::move(items));
      } else {
        value = n.kind == NodeKind::List ? TorchValue::list(std::move(elements))
                                         : TorchValue::tuple(std::move(elements));
      }
      break;
    }
    case NodeKind::Global:
      fail("the global {} is left as a value (expected data and tensors only)",
           globals_[size_t(n.integer)].name);
    case NodeKind::Storage:
      fail("a storage outside a tensor is not supported (save tensors, not their storages)");
  }
  visits_[id] = Visit::Done;
  converted_[id] = value;
  return value;
}

// ---- the archive ---------------------------------------------------------------------------

// Refuses a file that is not a torch.save zip archive, saying what it looks like.
void check_file_kind(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  HG_CHECK(file.good(), "load_torch_file: cannot open \"{}\"", path);
  std::array<char, 512> head{};
  file.read(head.data(), std::streamsize(head.size()));
  const auto count = size_t(file.gcount());
  const std::string_view start(head.data(), count);
  if (start.substr(0, 2) == "PK") return;  // a zip archive: the ZipReader checks the rest
  HG_CHECK(count > 0, "load_torch_file: \"{}\" is empty (expected a torch.save zip archive)", path);
  constexpr std::string_view kResave =
      "halfgrad reads the zip format of torch.save since PyTorch 1.6; load it in PyTorch and "
      "save it again with torch.save(obj, path)";
  HG_CHECK(uint8_t(start[0]) != 0x80,
           "load_torch_file: \"{}\" is in the legacy torch.save format (a bare pickle, as "
           "PyTorch before 1.6 or _use_new_zipfile_serialization=False write), which is not "
           "supported: {}",
           path, kResave);
  HG_CHECK(!(count >= 262 && start.substr(257, 5) == "ustar"),
           "load_torch_file: \"{}\" is in the tar format of PyTorch before 0.4, which is not "
           "supported: {}",
           path, kResave);
  std::string shown;
  for (size_t i = 0; i < std::min<size_t>(count, 8); ++i) {
    shown += fmt::format("{:02x}", uint8_t(start[i]));
  }
  HG_ERROR(
      "load_torch_file: \"{}\" is not a torch.save file (expected a zip archive, starting "
      "with the bytes 504b, got {})",
      path, shown);
}

}  // namespace

TorchValue unpickle_torch(std::span<const std::byte> pickle, const TorchStorageReader& read_storage,
                          std::string_view source) {
  return Unpickler(pickle, read_storage, source).run();
}

TorchValue load_torch_file(const std::string& path) {
  check_file_kind(path);
  const ZipReader archive(path);
  const std::vector<ZipEntry>& entries = archive.entries();
  HG_CHECK(!entries.empty(),
           "load_torch_file: \"{}\" is an empty zip archive (expected a "
           "torch.save file)",
           path);
  // Every record lies in one folder, named after the file torch.save wrote first.
  const std::string& first = entries.front().name;
  const size_t slash = first.find('/');
  HG_CHECK(slash != std::string::npos && slash > 0,
           "load_torch_file: \"{}\": expected the archive's entries in one folder "
           "(<archive>/data.pkl), got the entry \"{}\"",
           path, first);
  const std::string prefix = first.substr(0, slash + 1);
  const bool torchscript = archive.contains(prefix + "constants.pkl") ||
                           std::any_of(entries.begin(), entries.end(), [&](const ZipEntry& entry) {
                             return entry.name.starts_with(prefix + "code/");
                           });
  HG_CHECK(!torchscript,
           "load_torch_file: \"{}\" is a TorchScript archive (torch.jit.save), which is not "
           "supported: save the model's state_dict() with torch.save and load that",
           path);
  HG_CHECK(archive.contains(prefix + "data.pkl"),
           "load_torch_file: \"{}\": expected a torch.save archive with the entry \"{}data.pkl\", "
           "got none",
           path, prefix);
  if (archive.contains(prefix + "byteorder")) {
    const std::vector<std::byte> order = archive.read(prefix + "byteorder");
    const std::string text(reinterpret_cast<const char*>(order.data()), order.size());
    HG_CHECK(text == "little",
             "load_torch_file: \"{}\": expected the byte order \"little\", got \"{}\" (a file "
             "saved on a big-endian machine is not supported)",
             path, text.substr(0, 40));
  }
  const std::vector<std::byte> pickle = archive.read(prefix + "data.pkl");
  const TorchStorageReader read_storage = [&](const std::string& key) {
    const std::string name = prefix + "data/" + key;
    HG_CHECK(archive.contains(name),
             "load_torch_file: \"{}\": the pickle names the storage \"{}\", but the archive has "
             "no entry \"{}\" (truncated or corrupted)",
             path, key.substr(0, 60), name.substr(0, 80));
    return archive.read(name);
  };
  return unpickle_torch(pickle, read_storage, fmt::format("load_torch_file: \"{}\"", path));
}

// ---- state dicts ---------------------------------------------------------------------------

namespace {

void flatten_state_dict(const TorchValue& dict, const std::string& prefix, std::string_view source,
                        nn::StateDict& out) {
  for (const auto& [key, value] : dict.items()) {
    const std::string name = prefix + torch_key_string(key);
    if (value.is_tensor()) {
      HG_CHECK(out.emplace(name, value.to_tensor()).second,
               "{}: the state dict holds the key \"{}\" twice (once nested)", source, name);
    } else if (value.is_dict()) {
      flatten_state_dict(value, name + ".", source, out);
    } else {
      HG_ERROR("{}: expected a state dict (tensors, or dicts of tensors), got {} at key \"{}\"",
               source, a_kind(value.kind_name()), name);
    }
  }
}

// The top-level entries that hold a dict, for a message: where a state dict may be.
std::string dict_entries(const TorchValue& root) {
  std::string text;
  for (const auto& [key, value] : root.items()) {
    if (!value.is_dict()) continue;
    if (!text.empty()) text += ", ";
    text += quoted_key(key);
  }
  return text;
}

}  // namespace

nn::StateDict torch_state_dict(const TorchValue& value, std::string_view entry,
                               std::string_view source) {
  HG_CHECK(value.is_dict(), "{}: expected a dict (a state dict or a checkpoint), got {}", source,
           a_kind(value.kind_name()));
  const TorchValue* state = &value;
  if (!entry.empty()) {
    state = value.find(entry);
    HG_CHECK(state != nullptr,
             "{}: expected an entry \"{}\" in the top-level dict, got the keys {}", source, entry,
             key_list(value.items()));
    HG_CHECK(state->is_dict(), "{}: entry \"{}\": expected a dict (a state dict), got {}", source,
             entry, a_kind(state->kind_name()));
  }
  nn::StateDict out;
  try {
    flatten_state_dict(*state, "", source, out);
  } catch (const Error& error) {
    const std::string candidates = entry.empty() ? dict_entries(value) : "";
    if (candidates.empty()) throw;
    HG_ERROR("{}; if the state dict is one entry of a checkpoint, name it (entry = one of {})",
             error.what(), candidates);
  }
  return out;
}

nn::StateDict load_torch_state_dict(const std::string& path, std::string_view entry) {
  return torch_state_dict(load_torch_file(path), entry, fmt::format("\"{}\"", path));
}

}  // namespace hg::io
