// io::load_torch_file / load_torch_state_dict against files torch.save wrote
// (tests/io/fixtures/make_torch_fixtures.py, which also printed the values to compare with into
// torch_expected.txt; make_torch113_fixtures.py, with torch 1.13, into torch113_expected.txt),
// files torch writes that halfgrad refuses, a pickle that would run a
// command, and pickles built here opcode by opcode that break each rule of the restricted
// unpickler (NOTE [Restricted unpickler]).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "halfgrad/io/torch_file.h"
#include "halfgrad/io/zip.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using namespace std::string_literals;
using Catch::Matchers::Contains;

namespace {

const std::filesystem::path kFixtures = std::filesystem::path(HG_TESTS_SOURCE_DIR) / "io/fixtures";

std::string fixture(const std::string& name) { return (kFixtures / name).string(); }

// One line of torch_expected.txt: a tensor as torch printed it.
struct Expected {
  std::string dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  std::vector<std::string> values;  // as printed: integers, or float64 repr
};

// file -> key -> tensor, from both files of printed values.
std::map<std::string, std::map<std::string, Expected>> read_expected() {
  std::map<std::string, std::map<std::string, Expected>> out;
  std::istringstream lines(read_file(kFixtures / "torch_expected.txt") +
                           read_file(kFixtures / "torch113_expected.txt"));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("#")) continue;  // the torch version that printed them
    std::istringstream fields(line);
    std::string file, key;
    Expected expected;
    size_t rank = 0, numel = 0;
    fields >> file >> key >> expected.dtype >> rank;
    expected.sizes.resize(rank);
    expected.strides.resize(rank);
    for (int64_t& size : expected.sizes) fields >> size;
    for (int64_t& stride : expected.strides) fields >> stride;
    fields >> expected.storage_offset >> numel;
    expected.values.resize(numel);
    for (std::string& value : expected.values) fields >> value;
    REQUIRE(fields);
    out[file][key] = expected;
  }
  return out;
}

const std::map<std::string, std::map<std::string, Expected>>& expected_tensors() {
  static const auto expected = read_expected();
  return expected;
}

const Expected& expected_tensor(const std::string& file, const std::string& key) {
  const auto& by_file = expected_tensors();
  REQUIRE(by_file.count(file) == 1);
  REQUIRE(by_file.at(file).count(key) == 1);
  return by_file.at(file).at(key);
}

// The tensor has torch's dtype, shape and values, element for element.
void check_tensor(const Tensor& tensor, const Expected& expected, bool check_layout = true) {
  INFO("dtype " << dtype_name(tensor.dtype()) << ", shape " << tensor.sizes());
  CHECK(tensor.is_cpu());
  REQUIRE(dtype_name(tensor.dtype()) == expected.dtype);
  REQUIRE(std::vector<int64_t>(tensor.sizes().begin(), tensor.sizes().end()) == expected.sizes);
  if (check_layout) {
    CHECK(std::vector<int64_t>(tensor.strides().begin(), tensor.strides().end()) ==
          expected.strides);
    CHECK(tensor.storage_offset() == expected.storage_offset);
  }
  if (is_floating_point(tensor.dtype())) {
    const std::vector<double> values = tensor.to_vector<double>();
    REQUIRE(values.size() == expected.values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const double want = std::stod(expected.values[i]);
      INFO("element " << i << ": " << values[i] << " vs torch's " << expected.values[i]);
      CHECK(values[i] == want);
      CHECK(std::signbit(values[i]) == std::signbit(want));
    }
  } else {
    const std::vector<int64_t> values = tensor.to_vector<int64_t>();
    REQUIRE(values.size() == expected.values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      INFO("element " << i);
      CHECK(values[i] == std::stoll(expected.values[i]));
    }
  }
}

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::LayerNorm(4), nn::Linear(4, 2));
}

// The output torch printed for the model on this input (as `file`'s "mlp(x)").
void check_mlp_output(nn::Sequential& model, const std::string& file = "output") {
  const Tensor x = tensor({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {2, 3});
  const std::vector<double> output = model.forward(x).to_vector<double>();
  const Expected& expected = expected_tensor(file, "mlp(x)");
  REQUIRE(output.size() == expected.values.size());
  for (size_t i = 0; i < output.size(); ++i) {
    CHECK(output[i] == Approx(std::stod(expected.values[i])).epsilon(1e-6).margin(1e-6));
  }
}

std::vector<std::byte> as_bytes(const std::string& text) {
  std::vector<std::byte> out(text.size());
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  return out;
}

// The entries of an archive, by name, in order.
std::vector<std::pair<std::string, std::string>> archive_entries(const std::string& path) {
  const io::ZipReader reader(path);
  std::vector<std::pair<std::string, std::string>> out;
  for (const io::ZipEntry& entry : reader.entries()) {
    const std::vector<std::byte> bytes = reader.read(entry.name);
    out.emplace_back(entry.name,
                     std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  return out;
}

void write_archive(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& entries) {
  io::ZipWriter writer(path, /*compress=*/false);
  for (const auto& [name, bytes] : entries) writer.add(name, std::as_bytes(std::span(bytes)));
  writer.close();
}

// ---- pickles built by hand --------------------------------------------------------------

std::string le(uint64_t value, size_t width) {
  std::string out;
  for (size_t i = 0; i < width; ++i, value >>= 8) out += char(value & 0xff);
  return out;
}
// BINUNICODE
std::string str(const std::string& text) {
  std::string out = "X";
  out += le(text.size(), 4);
  out += text;
  return out;
}
// GLOBAL
std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
// BININT1 / BININT
std::string int_op(int64_t value) {
  std::string out = value >= 0 && value < 256 ? "K" : "J";
  out += le(uint64_t(value), value >= 0 && value < 256 ? 1 : 4);
  return out;
}
std::string int_tuple(const std::vector<int64_t>& values) {
  std::string out = "(";
  for (int64_t value : values) out += int_op(value);
  return out + "t";
}
const std::string kProto2 = "\x80\x02";

// A call of _rebuild_tensor_v2 over the storage "0" of `numel` elements of `storage_type`.
std::string tensor_ops(const std::string& storage_type, int64_t numel, int64_t offset,
                       const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                       const std::string& key = "0") {
  return global("torch._utils", "_rebuild_tensor_v2") + "((" + str("storage") +
         global("torch", storage_type) + str(key) + str("cpu") + int_op(numel) + "tQ" +
         int_op(offset) + int_tuple(sizes) + int_tuple(strides) + "\x89" +
         global("collections", "OrderedDict") + ")RtR";
}

// Storage records held in memory: key -> bytes.
struct Records {
  std::map<std::string, std::string> bytes;
  io::TorchStorageReader reader() const {
    return [this](const std::string& key) {
      const auto it = bytes.find(key);
      HG_CHECK(it != bytes.end(), "no record \"{}\"", key);
      return as_bytes(it->second);
    };
  }
};

io::TorchValue unpickle(const std::string& pickle, const Records& records = {}) {
  const std::vector<std::byte> bytes = as_bytes(pickle);
  return io::unpickle_torch(bytes, records.reader(), "case.pkl");
}

void check_refused(const std::string& pickle, const std::string& expected,
                   const Records& records = {}) {
  INFO("pickle: " << pickle);
  CHECK_THROWS_WITH(unpickle(pickle, records), Contains("case.pkl") && Contains(expected));
}

// Four float32 values, 1..4.
Records four_floats() {
  Records records;
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  records.bytes["0"].resize(16);
  std::memcpy(records.bytes["0"].data(), values.data(), 16);
  return records;
}

}  // namespace

// ---- files torch wrote ---------------------------------------------------------------------

TEST_CASE("every dtype halfgrad has loads with torch's values", "[io][torch_file]") {
  const io::TorchValue file = io::load_torch_file(fixture("torch_dtypes.pt"));
  REQUIRE(file.is_dict());
  const auto& expected = expected_tensors().at("torch_dtypes.pt");
  CHECK(file.size() == expected.size());
  CHECK(expected.size() == 14);
  for (const auto& [key, tensor] : expected) {
    INFO("key " << key);
    check_tensor(file.at(key).to_tensor(), tensor);
  }
  // The dict keeps torch's insertion order.
  CHECK(std::get<std::string>(file.items().front().first) == "float32");
  CHECK(std::get<std::string>(file.items().back().first) == "empty");
}

TEST_CASE("views keep their strides and offsets and share one storage", "[io][torch_file]") {
  const io::TorchValue file = io::load_torch_file(fixture("torch_views.pt"));
  const Tensor grid = file.at("grid").to_tensor();
  for (const auto& [key, expected] : expected_tensors().at("torch_views.pt")) {
    INFO("key " << key);
    const Tensor view = file.at(key).to_tensor();
    check_tensor(view, expected);
    CHECK(view.shares_storage(grid));
  }
  CHECK_FALSE(file.at("transposed").to_tensor().is_contiguous());
  CHECK_FALSE(file.at("strided").to_tensor().is_contiguous());
  // One storage, as in torch: a write through one view shows in the others.
  Tensor row = file.at("row").to_tensor();
  row.fill_(-1.0);
  CHECK(file.at("grid").to_tensor().to_vector<float>()[5] == -1.0f);
  CHECK(file.at("transposed").to_tensor().to_vector<float>()[4] == -1.0f);
}

TEST_CASE("a torch Sequential state dict loads into the same halfgrad model", "[io][torch_file]") {
  const nn::StateDict state = io::load_torch_state_dict(fixture("torch_mlp.pt"));
  const auto& expected = expected_tensors().at("torch_mlp.pt");
  REQUIRE(state.size() == expected.size());
  for (const auto& [key, tensor] : expected) {
    INFO("key " << key);
    REQUIRE(state.count(key) == 1);
    check_tensor(state.at(key), tensor);
  }
  auto model = make_mlp();
  model->load_state_dict(state);
  check_mlp_output(*model);
}

TEST_CASE("a file saved with pickle protocol 4 loads the same", "[io][torch_file]") {
  // Protocol 4 brings FRAME, SHORT_BINUNICODE, MEMOIZE and STACK_GLOBAL.
  const nn::StateDict state = io::load_torch_state_dict(fixture("torch_mlp_protocol4.pt"));
  for (const auto& [key, tensor] : expected_tensors().at("torch_mlp.pt")) {
    INFO("key " << key);
    REQUIRE(state.count(key) == 1);
    check_tensor(state.at(key), tensor);
  }
  auto model = make_mlp();
  model->load_state_dict(state);
  check_mlp_output(*model);
}

TEST_CASE("a training checkpoint loads with its optimizer state and plain values",
          "[io][torch_file]") {
  const std::string path = fixture("torch_checkpoint.pt");
  const io::TorchValue checkpoint = io::load_torch_file(path);
  CHECK(checkpoint.at("epoch").to_int() == 3);
  CHECK(checkpoint.at("loss").to_double() == 0.25);
  CHECK(checkpoint.at("name").to_string() == "x");
  CHECK(checkpoint.at("blob").to_bytes() == std::string("\x00\xff"
                                                        "ab",
                                                        4));
  CHECK(checkpoint.at("done").is_none());
  CHECK(checkpoint.at("big").to_int() == -(int64_t(1) << 40));
  const io::TorchValue& shape = checkpoint.at("shape");
  REQUIRE(shape.is_tuple());
  REQUIRE(shape.size() == 2);
  CHECK(shape.elements()[0].to_int() == 2);
  CHECK(shape.elements()[1].to_int() == 3);

  // optimizer.state_dict(): state keyed by parameter index, one param group.
  const io::TorchValue& optimizer = checkpoint.at("optimizer");
  const io::TorchValue& state = optimizer.at("state");
  CHECK(state.size() == 6);
  for (const auto& [key, expected] : expected_tensors().at("torch_checkpoint.pt")) {
    if (!key.starts_with("optimizer.state.")) continue;
    INFO("key " << key);
    const std::string rest = key.substr(std::string("optimizer.state.").size());
    const int64_t index = std::stoll(rest.substr(0, rest.find('.')));
    check_tensor(state.at(index).at(rest.substr(rest.find('.') + 1)).to_tensor(), expected);
  }
  const io::TorchValue& groups = optimizer.at("param_groups");
  REQUIRE(groups.is_list());
  REQUIRE(groups.size() == 1);
  const io::TorchValue& group = groups.elements()[0];
  CHECK(group.at("lr").to_double() == 0.01);
  CHECK(group.at("eps").to_double() == 1e-8);
  CHECK(group.at("weight_decay").to_int() == 0);
  CHECK(group.at("amsgrad").to_bool() == false);
  CHECK(group.at("foreach").is_none());
  CHECK(group.at("betas").elements()[0].to_double() == 0.9);
  CHECK(group.at("betas").elements()[1].to_double() == 0.999);
  const io::TorchValue& params = group.at("params");
  REQUIRE(params.size() == 6);
  for (int64_t i = 0; i < 6; ++i) CHECK(params.elements()[size_t(i)].to_int() == i);

  // The "model" entry is the state dict.
  const nn::StateDict model_state = io::load_torch_state_dict(path, "model");
  CHECK(model_state.size() == 6);
  for (const auto& [key, expected] : expected_tensors().at("torch_checkpoint.pt")) {
    if (!key.starts_with("model.")) continue;
    INFO("key " << key);
    check_tensor(model_state.at(key.substr(6)), expected);
  }
  auto model = make_mlp();
  model->load_state_dict(model_state);

  // Nested dicts flatten with "." as module names do.
  const nn::StateDict optimizer_tensors = io::torch_state_dict(optimizer.at("state"));
  CHECK(optimizer_tensors.size() == 18);
  CHECK(optimizer_tensors.count("0.exp_avg") == 1);
  CHECK(optimizer_tensors.count("5.step") == 1);

  // The whole checkpoint is not a state dict: the error names the entries that may be one.
  CHECK_THROWS_WITH(io::load_torch_state_dict(path), Contains("torch_checkpoint.pt") &&
                                                         Contains("\"optimizer.param_groups\"") &&
                                                         Contains("\"model\""));
  CHECK_THROWS_WITH(io::load_torch_state_dict(path, "models"),
                    Contains("\"models\"") && Contains("\"model\""));
  CHECK_THROWS_WITH(io::load_torch_state_dict(path, "epoch"),
                    Contains("entry \"epoch\"") && Contains("got an int"));
}

TEST_CASE("a checkpoint torch 1.13 saved loads with the values it printed", "[io][torch_file]") {
  // torch 1.13's archive: no byteorder record, typed storages under _rebuild_tensor_v2.
  const std::string path = fixture("torch113_checkpoint.pt");
  const io::ZipReader archive(path);
  CHECK_FALSE(archive.contains("torch113_checkpoint/byteorder"));
  REQUIRE(archive.contains("torch113_checkpoint/data.pkl"));

  const io::TorchValue checkpoint = io::load_torch_file(path);
  CHECK(checkpoint.at("epoch").to_int() == 3);
  const auto& expected = expected_tensors().at("torch113_checkpoint.pt");
  CHECK(expected.size() == 31);  // 6 model tensors, 18 of Adam's state, 6 plain, the output
  const io::TorchValue& state = checkpoint.at("optimizer").at("state");
  for (const auto& [key, tensor] : expected) {
    INFO("key " << key);
    if (key.starts_with("optimizer.state.")) {
      const std::string rest = key.substr(std::string("optimizer.state.").size());
      const int64_t index = std::stoll(rest.substr(0, rest.find('.')));
      check_tensor(state.at(index).at(rest.substr(rest.find('.') + 1)).to_tensor(), tensor);
    } else if (!key.starts_with("model.") && key != "mlp(x)") {
      check_tensor(checkpoint.at(key).to_tensor(), tensor);
    }
  }
  // The views share the grid's one storage, as torch saved them.
  CHECK(checkpoint.at("transposed").to_tensor().shares_storage(checkpoint.at("tail").to_tensor()));

  const nn::StateDict model_state = io::load_torch_state_dict(path, "model");
  CHECK(model_state.size() == 6);
  for (const auto& [key, tensor] : expected) {
    if (key.starts_with("model.")) check_tensor(model_state.at(key.substr(6)), tensor);
  }
  auto model = make_mlp();
  model->load_state_dict(model_state);
  check_mlp_output(*model, "torch113_checkpoint.pt");
}

TEST_CASE("parameters and tensors that require grad load as plain tensors", "[io][torch_file]") {
  const io::TorchValue file = io::load_torch_file(fixture("torch_parameter.pt"));
  check_tensor(file.at("parameter").to_tensor(),
               expected_tensor("torch_parameter.pt", "parameter"));
  CHECK_FALSE(file.at("parameter").to_tensor().requires_grad());
  CHECK(file.at("leaf").to_tensor().to_vector<float>() == std::vector<float>{3.0f});
}

TEST_CASE("a state dict of nested dicts flattens and a key may not repeat", "[io][torch_file]") {
  const Tensor a = ones({2});
  const Tensor b = zeros({3});
  const io::TorchValue nested = io::TorchValue::dict(
      {{"encoder",
        io::TorchValue::dict(
            {{"weight", io::TorchValue::from_tensor(a)},
             {int64_t(0), io::TorchValue::dict({{"bias", io::TorchValue::from_tensor(b)}})}})},
       {"head.weight", io::TorchValue::from_tensor(a)}});
  const nn::StateDict state = io::torch_state_dict(nested);
  REQUIRE(state.size() == 3);
  CHECK(state.at("encoder.weight").is_same(a));
  CHECK(state.at("encoder.0.bias").is_same(b));
  CHECK(state.at("head.weight").is_same(a));

  const io::TorchValue twice = io::TorchValue::dict(
      {{"head", io::TorchValue::dict({{"weight", io::TorchValue::from_tensor(a)}})},
       {"head.weight", io::TorchValue::from_tensor(a)}});
  CHECK_THROWS_WITH(io::torch_state_dict(twice), Contains("\"head.weight\" twice"));
  CHECK_THROWS_WITH(io::torch_state_dict(io::TorchValue::list({})), Contains("got a list"));
  CHECK_THROWS_WITH(io::TorchValue::dict({{"k", {}}, {"k", {}}}), Contains("\"k\" twice"));
}

// ---- files halfgrad refuses ----------------------------------------------------------------

TEST_CASE("a pickle that would run a command is refused and runs nothing", "[io][torch_file]") {
  const std::filesystem::path marker = "/tmp/halfgrad_torch_file_pwned";
  std::filesystem::remove(marker);
  CHECK_THROWS_WITH(io::load_torch_file(fixture("torch_malicious.pt")),
                    Contains("torch_malicious.pt") && Contains("refused the global posix.system"));
  CHECK_THROWS_WITH(io::load_torch_state_dict(fixture("torch_malicious.pt")),
                    Contains("posix.system"));
  CHECK_FALSE(std::filesystem::exists(marker));

  // The same by hand, each way a pickle names a callable.
  const std::string command = str("touch /tmp/halfgrad_torch_file_pwned");
  check_refused(kProto2 + global("os", "system") + "(" + command + "tR.",
                "refused the global os.system");
  check_refused(kProto2 + global("builtins", "eval") + "(" + str("1") + "tR.",
                "refused the global builtins.eval");
  check_refused("\x80\x04" + str("builtins") + str("exec") + "\x93(" + str("1") + "tR.",
                "refused the global builtins.exec");
  check_refused(kProto2 + "(" + command + "ios\nsystem\n.",
                "INST would create an instance of os.system");
  check_refused(kProto2 + global("torch.nn.modules.linear", "Linear") + ")\x81.",
                "refused the global torch.nn.modules.linear.Linear");
  check_refused(kProto2 + global("collections", "OrderedDict") + ")\x81.", "NEWOBJ");
  check_refused(kProto2 + "(" + global("collections", "OrderedDict") + "o.", "OBJ");
  check_refused(kProto2 + "\x82\x01.", "EXT1/EXT2/EXT4");
  check_refused(kProto2 + global("torch", "FloatStorage") + ")R.",
                "refused to call torch.FloatStorage");
  check_refused(kProto2 + global("torch._utils", "_rebuild_qtensor") + ".", "quantized");
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("formats halfgrad does not read are refused with what they are", "[io][torch_file]") {
  CHECK_THROWS_WITH(io::load_torch_file(fixture("torch_legacy.pt")),
                    Contains("legacy torch.save format") && Contains("save it again"));
  CHECK_THROWS_WITH(io::load_torch_file(fixture("torch_script.pt")),
                    Contains("TorchScript archive") && Contains("state_dict()"));
  CHECK_THROWS_WITH(io::load_torch_file(fixture("torch_complex.pt")),
                    Contains("torch.ComplexFloatStorage") && Contains("does not have"));
  check_refused(kProto2 + global("torch", "uint16") + ".", "torch.uint16, a dtype halfgrad");
  CHECK_THROWS_WITH(io::load_torch_file(fixture("sequential_mlp.safetensors")),
                    Contains("not a torch.save file"));
  CHECK_THROWS_WITH(io::load_torch_file(fixture("no_such_file.pt")), Contains("cannot open"));

  TempFolder folder;
  write_file(folder.file("empty.pt"), "");
  CHECK_THROWS_WITH(io::load_torch_file(folder.file("empty.pt")), Contains("is empty"));
  // A zip archive that is not torch.save's.
  write_archive(folder.file("other.zip"), {{"a.txt", "hello"}});
  CHECK_THROWS_WITH(io::load_torch_file(folder.file("other.zip")),
                    Contains("in one folder") && Contains("a.txt"));
  write_archive(folder.file("nopickle.zip"), {{"a/version", "3\n"}});
  CHECK_THROWS_WITH(io::load_torch_file(folder.file("nopickle.zip")), Contains("a/data.pkl"));
}

TEST_CASE("archive records torch may omit or that are wrong", "[io][torch_file]") {
  const auto entries = archive_entries(fixture("torch_mlp.pt"));
  TempFolder folder;
  // Files of torch before 2.x have no byteorder record (and are little-endian).
  std::vector<std::pair<std::string, std::string>> without_byteorder;
  for (const auto& entry : entries) {
    if (!entry.first.ends_with("/byteorder") && !entry.first.ends_with("/.format_version") &&
        !entry.first.ends_with("/.storage_alignment")) {
      without_byteorder.push_back(entry);
    }
  }
  write_archive(folder.file("old.pt"), without_byteorder);
  auto model = make_mlp();
  model->load_state_dict(io::load_torch_state_dict(folder.file("old.pt")));
  check_mlp_output(*model);

  auto big = entries;
  for (auto& entry : big) {
    if (entry.first.ends_with("/byteorder")) entry.second = "big";
  }
  write_archive(folder.file("big.pt"), big);
  CHECK_THROWS_WITH(io::load_torch_file(folder.file("big.pt")), Contains("big-endian"));

  // A storage record missing, or of the wrong length.
  std::vector<std::pair<std::string, std::string>> missing, short_record;
  for (const auto& entry : entries) {
    if (!entry.first.ends_with("/data/0")) missing.push_back(entry);
    short_record.push_back(entry);
    if (entry.first.ends_with("/data/0")) short_record.back().second.pop_back();
  }
  write_archive(folder.file("missing.pt"), missing);
  CHECK_THROWS_WITH(io::load_torch_file(folder.file("missing.pt")),
                    Contains("no entry \"torch_mlp/data/0\""));
  write_archive(folder.file("short.pt"), short_record);
  CHECK_THROWS_WITH(io::load_torch_file(folder.file("short.pt")),
                    Contains("expected 48 bytes") && Contains("holds 47"));
}

TEST_CASE("truncated and corrupted files are errors, never crashes", "[io][torch_file]") {
  const std::string bytes = read_file(kFixtures / "torch_mlp.pt");
  TempFolder folder;
  const std::string path = folder.file("cut.pt");
  // Every truncation of the archive (its central directory is at the end).
  for (size_t length = 0; length < bytes.size(); length += 7) {
    INFO("first " << length << " bytes");
    write_file(path, bytes.substr(0, length));
    CHECK_THROWS_AS(io::load_torch_file(path), Error);
  }

  // Every truncation of the pickle itself, and single bytes changed: each an hg::Error or a
  // value, never another exception, a crash or a sanitizer report.
  const auto entries = archive_entries(fixture("torch_checkpoint.pt"));
  Records records;
  std::string pickle;
  for (const auto& [name, data] : entries) {
    if (name.ends_with("/data.pkl")) pickle = data;
    const size_t at = name.find("/data/");
    if (at != std::string::npos) records.bytes[name.substr(at + 6)] = data;
  }
  REQUIRE(!pickle.empty());
  CHECK(unpickle(pickle, records).at("epoch").to_int() == 3);
  for (size_t length = 0; length < pickle.size(); ++length) {
    INFO("first " << length << " bytes of data.pkl");
    CHECK_THROWS_AS(unpickle(pickle.substr(0, length), records), Error);
  }
  std::mt19937 random(7);
  int loaded = 0, refused = 0;
  for (size_t at = 0; at < pickle.size(); ++at) {
    for (int trial = 0; trial < 3; ++trial) {
      std::string changed = pickle;
      changed[at] = char(trial == 0 ? 0xff : trial == 1 ? 0x00 : int(random() % 256));
      try {
        (void)unpickle(changed, records);
        ++loaded;
      } catch (const Error&) {
        ++refused;
      }
    }
  }
  CHECK(loaded > 0);
  CHECK(refused > 0);
}

// ---- the unpickler's rules, opcode by opcode ------------------------------------------------

TEST_CASE("the unpickler builds each kind of value", "[io][torch_file]") {
  // A dict of every scalar kind, by the opcodes of protocols 2 to 5.
  const std::string pickle =
      "\x80\x05\x95" + le(0, 8) + "}(" + str("none") + "N" + str("true") + "\x88" + str("false") +
      "\x89" + str("k") + "K\xff" + str("m") + "M\x01\x02" + str("j") + "J\xfe\xff\xff\xff" +
      str("long1") + "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xff"s + str("long0") + "\x8a\x00"s +
      str("long4") + "\x8b\x02\x00\x00\x00\x00\x80"s + str("float") + "G\x3f\xf8" + le(0, 6) +
      "\x8c\x05short" + "\x8c\x02hi" + "\x8d" + le(4, 8) + "u8u8" + "C\x02\x01\x02" + str("b") +
      "B" + le(0, 4) + str("b8") + "\x8e" + le(0, 8) + str("array") + "\x96" + le(3, 8) + "xyz" +
      str("list") +
      "](K\x01K\x02"
      "e" +
      str("tuple") + "K\x01K\x02K\x03\x87" + str("int text") + "I-12\n" + str("long text") +
      "L99L\n" + str("float text") + "F-0.5\n" + str("bool text") + "I01\n" + str("dup") + "K\x04" +
      "2\x86" + "u.";
  const io::TorchValue value = unpickle(pickle);
  CHECK(value.at("none").is_none());
  CHECK(value.at("true").to_bool());
  CHECK_FALSE(value.at("false").to_bool());
  CHECK(value.at("k").to_int() == 255);
  CHECK(value.at("m").to_int() == 0x0201);
  CHECK(value.at("j").to_int() == -2);
  CHECK(value.at("long1").to_int() == std::numeric_limits<int64_t>::min());
  CHECK(value.at("long0").to_int() == 0);
  CHECK(value.at("long4").to_int() == -32768);
  CHECK(value.at("float").to_double() == 1.5);
  CHECK(value.at("short").to_string() == "hi");
  CHECK(value.at("u8u8").to_bytes() == std::string("\x01\x02", 2));
  CHECK(value.at("b").to_bytes().empty());
  CHECK(value.at("b8").to_bytes().empty());
  CHECK(value.at("array").to_bytes() == "xyz");
  CHECK(value.at("list").size() == 2);
  CHECK(value.at("tuple").elements()[2].to_int() == 3);
  CHECK(value.at("int text").to_int() == -12);
  CHECK(value.at("long text").to_int() == 99);
  CHECK(value.at("float text").to_double() == -0.5);
  CHECK(value.at("bool text").to_bool());
  CHECK(value.at("dup").elements()[0].to_int() == 4);
  CHECK(value.at("dup").elements()[1].to_int() == 4);
  CHECK_THROWS_WITH(value.at("missing"), Contains("\"missing\"") && Contains("\"none\""));
  CHECK_THROWS_WITH(value.at("k").to_string(), Contains("expected a str, got int"));

  // Memo: a list stored, changed, and read back is the same list.
  const io::TorchValue shared = unpickle(kProto2 +
                                         "(]q\x00h\x00K\x07"s
                                         "a"
                                         "h\x00t."s);
  REQUIRE(shared.size() == 3);
  for (const io::TorchValue& list : shared.elements()) {
    REQUIRE(list.size() == 1);
    CHECK(list.elements()[0].to_int() == 7);
  }
  // A key set twice keeps its first place and its last value, as a Python dict.
  const io::TorchValue dict =
      unpickle(kProto2 + "}(" + str("a") + "K\x01" + str("b") + "K\x02" + str("a") + "K\x03u.");
  REQUIRE(dict.size() == 2);
  CHECK(std::get<std::string>(dict.items()[0].first) == "a");
  CHECK(dict.at("a").to_int() == 3);
  // An int-keyed dict (DICT opcode) and protocol 2 bytes (_codecs.encode).
  const io::TorchValue ints = unpickle(kProto2 + "(K\x05" + str("five") + "d.");
  CHECK(ints.at(int64_t(5)).to_string() == "five");
  const io::TorchValue latin = unpickle(kProto2 + global("_codecs", "encode") + "(" +
                                        str("a\xc3\xbf") + str("latin1") + "tR.");
  CHECK(latin.to_bytes() == "a\xff");
}

TEST_CASE("the unpickler builds tensors over storages and checks their extent",
          "[io][torch_file]") {
  const Records records = four_floats();
  const Tensor t =
      unpickle(kProto2 + tensor_ops("FloatStorage", 4, 1, {2}, {2}) + ".", records).to_tensor();
  CHECK(t.to_vector<float>() == std::vector<float>{2.0f, 4.0f});
  // Expanded (stride 0) and empty tensors; a scalar.
  CHECK(unpickle(kProto2 + tensor_ops("FloatStorage", 4, 3, {3}, {0}) + ".", records)
            .to_tensor()
            .to_vector<float>() == std::vector<float>{4.0f, 4.0f, 4.0f});
  CHECK(unpickle(kProto2 + tensor_ops("FloatStorage", 4, 4, {0, 5}, {5, 1}) + ".", records)
            .to_tensor()
            .numel() == 0);
  CHECK(unpickle(kProto2 + tensor_ops("FloatStorage", 4, 2, {}, {}) + ".", records)
            .to_tensor()
            .item<float>() == 3.0f);
  // The same bytes as int16 (a typed storage of 8 elements).
  CHECK(unpickle(kProto2 + tensor_ops("ShortStorage", 8, 1, {1}, {1}) + ".", records)
            .to_tensor()
            .item<int16_t>() == 0x3f80);
  // Two tensors over one key share one storage.
  const io::TorchValue pair = unpickle(kProto2 + "(" + tensor_ops("FloatStorage", 4, 0, {2}, {1}) +
                                           tensor_ops("FloatStorage", 4, 2, {2}, {1}) + "t.",
                                       records);
  CHECK(pair.elements()[0].to_tensor().shares_storage(pair.elements()[1].to_tensor()));

  check_refused(kProto2 + tensor_ops("FloatStorage", 4, 1, {2}, {3}) + ".",
                "needs more than the 4 float32 elements", records);
  check_refused(kProto2 + tensor_ops("FloatStorage", 4, 5, {0}, {1}) + ".",
                "needs more than the 4 float32 elements", records);
  check_refused(kProto2 + tensor_ops("FloatStorage", 4, 0, {2, 2}, {1}) + ".",
                "2 sizes and 1 strides", records);
  check_refused(kProto2 + tensor_ops("FloatStorage", 4, 0, {2}, {-1}) + ".", "strides >= 0",
                records);
  check_refused(kProto2 +
                    tensor_ops("FloatStorage", 4, 0, {2, 1 << 30, 1 << 30}, {1, 1 << 30, 1 << 30}) +
                    ".",
                "needs more than", records);
  check_refused(kProto2 + tensor_ops("FloatStorage", 4, -1, {1}, {1}) + ".",
                "offset: expected >= 0", records);
  check_refused(kProto2 + tensor_ops("FloatStorage", 5, 0, {1}, {1}) + ".",
                "expected 20 bytes (5 elements of 4 bytes), its record holds 16", records);
  check_refused(kProto2 + tensor_ops("DoubleStorage", 4, 0, {1}, {1}) + ".", "expected 32 bytes",
                records);
  CHECK_THROWS_WITH(
      unpickle(kProto2 + tensor_ops("FloatStorage", 4, 0, {1}, {1}, "9") + ".", records),
      Contains("no record \"9\""));
  check_refused(kProto2 + "(" + tensor_ops("FloatStorage", 4, 0, {1}, {1}) +
                    tensor_ops("FloatStorage", 2, 0, {1}, {1}) + "t.",
                "named as 8 bytes and earlier as 16 bytes", records);
  // Bool storages hold 0 or 1.
  Records bools;
  bools.bytes["0"] = std::string("\x01\x00\x02", 3);
  check_refused(kProto2 + tensor_ops("BoolStorage", 3, 0, {3}, {1}) + ".",
                "expected bytes 0 or 1, got 2 at byte 2", bools);
  bools.bytes["0"] = std::string("\x01\x00\x01", 3);
  CHECK(unpickle(kProto2 + tensor_ops("BoolStorage", 3, 0, {3}, {1}) + ".", bools)
            .to_tensor()
            .to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  // A storage alone, or a global left as a value.
  check_refused(kProto2 + "(" + str("storage") + global("torch", "FloatStorage") + str("0") +
                    str("cpu") + "K\x04tQ.",
                "a storage outside a tensor", records);
  check_refused(kProto2 + global("torch", "float32") + ".", "the global torch.float32 is left");
  check_refused(kProto2 + "(" + str("weights") + "tQ.", "expected a persistent id");
}

TEST_CASE("the unpickler refuses malformed pickles", "[io][torch_file]") {
  check_refused("", "ends without a STOP");
  check_refused(kProto2 + "N", "ends without a STOP");
  check_refused(kProto2 + ".", "stack underflow");
  check_refused(kProto2 + "Na.", "stack underflow");
  check_refused(kProto2 + "(N" + "a.", "APPEND needs a value on the stack");
  check_refused(kProto2 +
                    "N(K\x01"
                    "a.",
                "none above the last MARK");
  check_refused(kProto2 + "Nt.", "needs a MARK");
  check_refused(kProto2 + "h\x05.", "memo entry 5 is read before it is written");
  check_refused(kProto2 + "q\x00."s, "needs a value on the stack");
  check_refused(kProto2 + "\x80\x06N.", "expected pickle protocol 0 to 5, got 6");
  check_refused(kProto2 + "X\xff\xff\xff\xff" + "abc.", "needs 4294967295 bytes");
  check_refused(kProto2 + "\x8d" + le(~uint64_t(0), 8) + ".", "bytes, but only");
  check_refused(kProto2 + "\x95" + le(1000, 8) + "N.", "FRAME of 1000 bytes");
  check_refused(kProto2 + "\x8a\x09" + le(0, 8) + "\x01.", "does not fit in 64 bits");
  CHECK(unpickle(kProto2 + "\x8a\x08" + le(0, 7) + "\x80.").to_int() ==
        std::numeric_limits<int64_t>::min());
  check_refused(kProto2 + "\x8b\xff\xff\xff\xff.", "LONG4: expected a byte count");
  check_refused(kProto2 + "I99999999999999999999\n.", "does not fit in 64 bits");
  check_refused(kProto2 + "Iabc\n.", "expected a decimal integer");
  check_refused(kProto2 + "I12", "no end of line");
  check_refused(kProto2 +
                    ")N"
                    "a.",
                "APPEND: expected a list, got a tuple");
  check_refused(kProto2 +
                    "]NN"
                    "s.",
                "SETITEM: expected a dict, got a list");
  check_refused(kProto2 + "}G" + le(0, 8) + "Ns.", "expected a str or int dict key, got a float");
  check_refused(kProto2 + "(Nd.", "DICT: expected key, value pairs, got 1 values");
  check_refused(kProto2 + "NNR.", "REDUCE's callable: expected a global, got None");
  check_refused(kProto2 + global("collections", "OrderedDict") + "NR.",
                "REDUCE's arguments: expected a tuple, got None");
  check_refused(kProto2 + global("collections", "OrderedDict") + "(NtR.",
                "takes 0 arguments, got 1");
  check_refused(kProto2 + "]Nb.", "BUILD: expected to set a dict's attributes");
  check_refused(kProto2 + "\x8f.", "sets are not supported");
  check_refused("\x80\x05\x97.", "out-of-band buffers");
  check_refused("S'abc'\n.", "protocol 0 opcode 'S'");
  check_refused(kProto2 + "\xff.", "unknown pickle opcode 0xff");
  check_refused(kProto2 + "K\x01K\x02\x93.", "STACK_GLOBAL's module: expected a str, got an int");
  // A list that contains itself, and nesting past the limit.
  check_refused(kProto2 +
                    "]q\x00h\x00"s
                    "a.",
                "a list contains itself");
  check_refused(kProto2 + "}q\x00"s + str("self") + "h\x00s."s, "a dict contains itself");
  std::string deep = kProto2;
  for (size_t i = 0; i <= io::kMaxTorchValueDepth + 1; ++i) deep += "]";
  for (size_t i = 0; i <= io::kMaxTorchValueDepth; ++i) deep += "a";
  check_refused(deep + ".", "nests deeper than");
  // Deeply nested but shared values convert once, not once per path.
  std::string shared = kProto2 + "]";
  for (int i = 0; i < 60; ++i) shared += "2\x86";  // t = (t, t), 60 times: 2^60 paths
  CHECK(unpickle(shared + ".").is_tuple());
}
