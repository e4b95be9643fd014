// hg::save / hg::load against the safetensors format: fixtures written in Python from the
// format's definition (tests/io/fixtures/make_fixtures.py), round trips of every dtype, files
// broken in each way the loader must refuse, and the checksums that catch a flipped bit.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <xxhash.h>
#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Matchers::Contains;

namespace {

const std::filesystem::path kFixtures = std::filesystem::path(HG_TESTS_SOURCE_DIR) / "io/fixtures";

// A file built by hand: the 8-byte little-endian length, the header text, the data.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i, length >>= 8) out[size_t(i)] = char(length & 0xff);
  return out + header + data;
}

// The tensors of all_dtypes.safetensors, made here from the same literals.
TensorMap all_dtypes_tensors() {
  return {
      {"f32", tensor({1.5, -2.25, 3.0, 0.1, 1e-8, -0.0}, {2, 3}, kFloat32)},
      {"f16", tensor({0.5, 65504.0, -0.0001, 3.140625}, kFloat16)},
      {"bf16", tensor({1.0, -3.0e38, 0.0078125, 7.0}, {2, 2}, kBFloat16)},
      {"f64", tensor({0.1, -1.0e300}, kFloat64)},
      {"i64", tensor(std::vector<int64_t>{-(int64_t(1) << 62), 7, int64_t(1) << 40})},
      {"i32", tensor(std::vector<int32_t>{-5, 2147483647}, {2, 1})},
      {"bool", tensor(std::vector<bool>{true, false, true})},
      {"empty", zeros({0, 3})},
      {"scalar", scalar_tensor(2.5)},
  };
}

// A header for one F32 tensor "w" of the given shape and offsets, over `data`.
std::string one_tensor_file(const std::string& shape, const std::string& offsets,
                            const std::string& data, const std::string& dtype = "F32") {
  return file_bytes(fmt::format(R"({{"w":{{"dtype":"{}","shape":{},"data_offsets":{}}}}})", dtype,
                                shape, offsets),
                    data);
}

void check_refused(const std::string& bytes, const std::string& expected) {
  CHECK_THROWS_WITH(io::from_safetensors_bytes(bytes, "case.safetensors"),
                    Contains("case.safetensors") && Contains(expected));
}

// Where a file's data begins: after the 8-byte length and the header text.
size_t data_start(const std::string& bytes) {
  REQUIRE(bytes.size() >= 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | uint8_t(bytes[size_t(i)]);
  return size_t(8 + length);
}

// The value of a metadata string in a header halfgrad wrote ("key":"value", no escapes).
std::string metadata_value(const std::string& bytes, std::string_view key) {
  const std::string pattern = fmt::format("\"{}\":\"", key);
  const size_t at = bytes.find(pattern);
  REQUIRE(at != std::string::npos);
  const size_t begin = at + pattern.size();
  return bytes.substr(begin, bytes.find('"', begin) - begin);
}

// The bytes with `from` replaced by `to`, of the same length: a file edited in place.
std::string edited(std::string bytes, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  const size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  return bytes.replace(at, from.size(), to);
}

// halfgrad's bytes with the two checksum entries taken out of the header (which is padded
// again): what the Python writer gives for the same tensors and a non-empty metadata.
std::string without_checksums(const std::string& bytes) {
  const size_t start = data_start(bytes);
  std::string header = bytes.substr(8, start - 8);
  const std::string entries = fmt::format(
      R"("{}":"{}","{}":"{}",)", io::kDataChecksumKey, metadata_value(bytes, io::kDataChecksumKey),
      io::kHeaderChecksumKey, metadata_value(bytes, io::kHeaderChecksumKey));
  const size_t at = header.find(entries);
  REQUIRE(at != std::string::npos);
  header.erase(at, entries.size());
  header.erase(header.find_last_not_of(' ') + 1);
  header.append((8 - header.size() % 8) % 8, ' ');
  return file_bytes(header, bytes.substr(start));
}

}  // namespace

TEST_CASE("load reads a fixture written in Python with every dtype", "[io][safetensors]") {
  const io::SafetensorsContents contents =
      io::load_safetensors((kFixtures / "all_dtypes.safetensors").string());
  const TensorMap expected = all_dtypes_tensors();
  REQUIRE(contents.tensors.size() == expected.size());
  for (const auto& [name, tensor] : expected) {
    INFO("key " << name);
    REQUIRE(contents.tensors.count(name) == 1);
    CHECK(bit_identical(contents.tensors.at(name), tensor));
  }
  CHECK(contents.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(load((kFixtures / "all_dtypes.safetensors").string()).size() == expected.size());
}

TEST_CASE("save writes the Python writer's bytes plus the two checksum entries",
          "[io][safetensors]") {
  const std::string python = read_file(kFixtures / "all_dtypes.safetensors");
  const std::string bytes = io::to_safetensors_bytes(all_dtypes_tensors(), {{"format", "pt"}});
  CHECK(without_checksums(bytes) == python);
  TempFolder folder;
  save(folder.file("out.safetensors"), all_dtypes_tensors(), {{"format", "pt"}});
  CHECK(read_file(folder.file("out.safetensors")) == bytes);
  CHECK(folder.entries() == 1);  // no temporary file left behind
}

TEST_CASE("a PyTorch Sequential state dict loads into the same halfgrad model",
          "[io][safetensors]") {
  auto model = std::make_shared<nn::Sequential>(nn::Linear(3, 2), nn::ReLU(), nn::Linear(2, 1));
  model->load_state_dict(load((kFixtures / "sequential_mlp.safetensors").string()));
  const Tensor x = tensor({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {2, 3});
  const std::vector<double> output = model->forward(x).to_vector<double>();
  std::istringstream torch_output(read_file(kFixtures / "sequential_mlp_output.txt"));
  for (double value : output) {
    double expected = 0;
    torch_output >> expected;
    CHECK(value == Approx(expected).epsilon(1e-6).margin(1e-7));
  }
}

TEST_CASE("save and load round trip every dtype and layout", "[io][safetensors]") {
  manual_seed(3);
  TensorMap tensors = {
      {"weight", randn({5, 7})},
      {"transposed", randn({4, 6}).t()},  // not contiguous: written row-major
      {"half", randn({3, 3}, kFloat16)},
      {"bf", randn({2, 9}, kBFloat16)},
      {"double", randn({4}, kFloat64)},
      {"mask", gt(randn({6}), 0.0)},
      {"ids", arange(10)},
      {"n", full({2}, 3, kInt32)},
      {"grad.param", randn({3}).requires_grad_()},
      {"unicode \xc3\xa9t\xc3\xa9", ones({1})},
  };
  TempFolder folder;
  const std::map<std::string, std::string> metadata = {{"step", "12"}, {"note", "a \"quote\""}};
  save(folder.file("t.safetensors"), tensors, metadata);
  const io::SafetensorsContents back = io::load_safetensors(folder.file("t.safetensors"));
  REQUIRE(back.tensors.size() == tensors.size());
  for (const auto& [name, tensor] : tensors) {
    INFO("key " << name);
    CHECK(bit_identical(back.tensors.at(name), tensor));
    CHECK(back.tensors.at(name).is_contiguous());
    CHECK_FALSE(back.tensors.at(name).requires_grad());
  }
  CHECK(back.metadata == metadata);
  CHECK(back.verified);
  // The in-memory form is the file.
  CHECK(io::to_safetensors_bytes(tensors, metadata) == read_file(folder.file("t.safetensors")));
}

TEST_CASE("save refuses what the format cannot hold", "[io][safetensors][errors]") {
  TempFolder folder;
  CHECK_THROWS_WITH(save(folder.file("a.safetensors"), {{"__metadata__", ones({1})}}),
                    Contains("__metadata__"));
  CHECK_THROWS_WITH(save(folder.file("a.safetensors"), {{"w", Tensor()}}),
                    Contains("key \"w\"") && Contains("undefined"));
  CHECK_THROWS_WITH(save(folder.file("missing/a.safetensors"), {{"w", ones({1})}}),
                    Contains("missing/a.safetensors") && Contains("No such file"));
  // The header is JSON: names, metadata keys and values must be UTF-8 text.
  const std::string not_utf8("a\0\xff", 3);
  CHECK_THROWS_WITH(save(folder.file("a.safetensors"), {{"w", ones({1})}}, {{"step", not_utf8}}),
                    Contains("metadata key \"step\"") && Contains("expected UTF-8 text"));
  CHECK_THROWS_WITH(save(folder.file("a.safetensors"), {{"w", ones({1})}}, {{not_utf8, "1"}}),
                    Contains("a metadata key") && Contains("expected UTF-8 text"));
  CHECK_THROWS_WITH(save(folder.file("a.safetensors"), {{not_utf8, ones({1})}}),
                    Contains("a tensor name") && Contains("expected UTF-8 text"));
  CHECK_THROWS_WITH(io::to_safetensors_bytes({{"w", ones({1})}}, {{"note", "\xc3"}}),
                    Contains("expected UTF-8 text"));
  CHECK(folder.entries() == 0);
}

TEST_CASE("load refuses truncated files", "[io][safetensors][errors]") {
  const std::string good = read_file(kFixtures / "all_dtypes.safetensors");
  const uint64_t header_length = uint8_t(good[0]) | uint64_t(uint8_t(good[1])) << 8;
  for (size_t size : {size_t(0), size_t(5), size_t(8), size_t(8 + header_length / 2),
                      size_t(8 + header_length), good.size() - 1}) {
    INFO("cut at " << size << " of " << good.size() << " bytes");
    CHECK_THROWS_AS(io::from_safetensors_bytes(good.substr(0, size)), Error);
  }
  check_refused(good.substr(0, 5), "expected at least the 8-byte header length");
  check_refused(good.substr(0, 8 + header_length / 2), "runs past the end");
  check_refused(good.substr(0, good.size() - 1), "a truncated file?");
  // The same on a file.
  TempFolder folder;
  write_file(folder.file("cut.safetensors"), good.substr(0, good.size() - 3));
  CHECK_THROWS_WITH(load(folder.file("cut.safetensors")), Contains("cut.safetensors") &&
                                                              Contains("key \"bool\"") &&
                                                              Contains("truncated"));
  CHECK_THROWS_WITH(load(folder.file("absent.safetensors")), Contains("cannot open"));
}

TEST_CASE("load refuses an oversized or malformed header", "[io][safetensors][errors]") {
  std::string huge(16, ' ');
  const uint64_t length = 200'000'000;
  for (int i = 0; i < 8; ++i) huge[size_t(i)] = char((length >> (8 * i)) & 0xff);
  check_refused(huge, "over the 100000000 bytes");
  check_refused(file_bytes("[1, 2]", ""), "starting with '{'");
  check_refused(file_bytes("{\"w\": ", ""), "not valid JSON");
  check_refused(file_bytes("{\"w\": \"\xff\xfe\"}", ""), "not valid JSON");
  check_refused(file_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           std::string(8, '\0')),
                "the key \"w\" twice");
  check_refused(file_bytes(R"({"__metadata__":{"format":3}})", ""),
                "__metadata__ key \"format\": expected a string");
  check_refused(file_bytes(R"({"w":[1,2]})", ""), "key \"w\": expected an object");
  check_refused(file_bytes(R"({"w":{"dtype":"F32","shape":[1]}})", ""),
                "key \"w\": expected the fields dtype, shape and data_offsets");
}

TEST_CASE("load refuses wrong dtypes shapes and offsets naming the key",
          "[io][safetensors][errors]") {
  const std::string eight(8, '\0');
  CHECK_NOTHROW(io::from_safetensors_bytes(one_tensor_file("[2]", "[0,8]", eight)));
  check_refused(one_tensor_file("[2]", "[0,8]", eight, "F8_E8M0"),
                "key \"w\": expected a dtype halfgrad reads");
  check_refused(one_tensor_file("[2]", "[0,8]", eight, "U16"), "got \"U16\"");
  check_refused(one_tensor_file("[3]", "[0,8]", eight), "key \"w\": shape [3] of float32");
  check_refused(one_tensor_file("[1]", "[0,8]", eight), "takes 4 bytes");
  check_refused(one_tensor_file("[-2]", "[0,8]", eight), "non-negative integers");
  check_refused(one_tensor_file("[2.0]", "[0,8]", eight), "non-negative integers");
  check_refused(one_tensor_file("[2]", "[0]", eight), "expected data_offsets [begin, end]");
  check_refused(one_tensor_file("[2]", "[8,0]", eight), "begin <= end");
  check_refused(one_tensor_file("[2]", "[0,16]", eight), "end past the 8 bytes of data");
  check_refused(one_tensor_file("[1099511627776,1099511627776]", "[0,8]", eight),
                "needs more bytes");
  check_refused(one_tensor_file("[18446744073709551615]", "[0,8]", eight), "too large");
  // The tensors must tile the data exactly.
  check_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(12, '\0')),
                "key \"b\": data_offsets [4, 12] overlap a");
  check_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           std::string(12, '\0')),
                "key \"b\": data_offsets [8, 12] leave a gap after a");
  check_refused(one_tensor_file("[1]", "[4,8]", eight), "leave a gap after the start");
  check_refused(one_tensor_file("[1]", "[0,4]", eight), "cover 4 bytes");
}

TEST_CASE("load refuses BOOL bytes other than 0 and 1", "[io][safetensors][errors]") {
  const std::string ok = one_tensor_file("[3]", "[0,3]", std::string("\x01\x00\x01", 3), "BOOL");
  CHECK(io::from_safetensors_bytes(ok).tensors.at("w").to_vector<bool>() ==
        std::vector<bool>{true, false, true});
  check_refused(one_tensor_file("[3]", "[0,3]", std::string("\x01\x02\x00", 3), "BOOL"),
                "key \"w\": expected BOOL bytes to be 0 or 1, got 2 at element 1");
}

TEST_CASE("a failing write leaves the previous file intact", "[io][safetensors][atomic]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  const TensorMap first = {{"w", full({64}, 1.0)}};
  save(path, first);
  const std::string before = read_file(path);
  const TensorMap second = {{"w", full({64}, 2.0)}, {"b", full({8}, 3.0)}};
  const size_t full_size = io::to_safetensors_bytes(second).size();
  // Fail before the first byte, inside the header, inside the data, at the last byte.
  for (uint64_t fail_after : {uint64_t(0), uint64_t(20), uint64_t(150), uint64_t(full_size - 1)}) {
    INFO("the disk fills after " << fail_after << " bytes");
    {
      io::testing::WriteFaultGuard fault(fail_after);
      CHECK_THROWS_WITH(save(path, second),
                        Contains("ckpt.safetensors") && Contains("No space left on device"));
    }
    CHECK(read_file(path) == before);
    CHECK(folder.entries() == 1);  // the temporary file is gone
  }
  save(path, second);  // without a fault the new file replaces the old one
  CHECK(bit_identical(load(path).at("b"), full({8}, 3.0)));
}

// ---- checksums (NOTE [Safetensors checksums]) ----------------------------------------------

TEST_CASE("the checksums are XXH64 of the data and of the header's canonical text",
          "[io][safetensors][checksum]") {
  // The NOTE's example, and a file with two tensors and two metadata entries.
  const std::string example = io::to_safetensors_bytes({{"w", zeros({2, 3})}}, {{"format", "pt"}});
  const std::string example_text = "tensor 1:w F32 2 2 3 0 24\nmetadata 6:format 2:pt\n";
  CHECK(metadata_value(example, io::kHeaderChecksumKey) ==
        fmt::format("{:016x}", XXH64(example_text.data(), example_text.size(), 0)));

  const std::string bytes =
      io::to_safetensors_bytes({{"w", zeros({2, 3})}, {"n", arange(2)}, {"s", scalar_tensor(1.0)}},
                               {{"note", "a b"}, {"format", "pt"}});
  // Tensors by name with their offsets (the data holds n, s, w: I64 first), then metadata by
  // key.
  const std::string text =
      "tensor 1:n I64 1 2 0 16\ntensor 1:s F32 0 16 20\ntensor 1:w F32 2 2 3 20 44\n"
      "metadata 6:format 2:pt\nmetadata 4:note 3:a b\n";
  CHECK(metadata_value(bytes, io::kHeaderChecksumKey) ==
        fmt::format("{:016x}", XXH64(text.data(), text.size(), 0)));
  const std::string data = bytes.substr(data_start(bytes));
  CHECK(data.size() == 44);
  CHECK(metadata_value(bytes, io::kDataChecksumKey) ==
        fmt::format("{:016x}", XXH64(data.data(), data.size(), 0)));
  const io::SafetensorsContents back = io::from_safetensors_bytes(bytes);
  CHECK(back.verified);
  CHECK(back.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"note", "a b"}});
}

TEST_CASE("every single-bit flip in a saved file is refused or changes nothing loaded",
          "[io][safetensors][checksum]") {
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "4"}};
  const std::string good = io::to_safetensors_bytes(all_dtypes_tensors(), metadata);
  const io::SafetensorsContents original = io::from_safetensors_bytes(good);
  REQUIRE(original.verified);
  auto same_as_original = [&](const io::SafetensorsContents& contents) {
    if (contents.metadata != original.metadata) return false;
    if (contents.tensors.size() != original.tensors.size()) return false;
    for (const auto& [name, tensor] : original.tensors) {
      const auto found = contents.tensors.find(name);
      if (found == contents.tensors.end() || !bit_identical(found->second, tensor)) return false;
    }
    return true;
  };
  const size_t start = data_start(good);
  // A flip that loads may only touch what means nothing: the header's padding spaces.
  std::vector<std::string> loaded_changed, misreported;
  for (size_t bit = 0; bit < good.size() * 8; ++bit) {
    std::string bad = good;
    bad[bit / 8] = char(bad[bit / 8] ^ (1 << (bit % 8)));
    const std::string where = fmt::format("byte {} bit {}", bit / 8, bit % 8);
    try {
      if (!same_as_original(io::from_safetensors_bytes(bad, "flip.safetensors"))) {
        loaded_changed.push_back(where);
      }
    } catch (const Error& e) {
      const std::string message = e.what();
      const bool named = message.find("flip.safetensors") != std::string::npos;
      const bool data_named =
          message.find("the data does not match its checksum") != std::string::npos;
      if (!named || (bit / 8 >= start && !data_named)) {
        misreported.push_back(where + ": " + message);
      }
    }
  }
  INFO("data begins at byte " << start << " of " << good.size());
  CHECK(loaded_changed == std::vector<std::string>{});
  CHECK(misreported == std::vector<std::string>{});
}

TEST_CASE("a flipped data bit or an edited metadata digit in a file is an error naming it",
          "[io][safetensors][checksum]") {
  TempFolder folder;
  const std::string path = folder.file("w.safetensors");
  manual_seed(7);
  save(path, {{"weight", randn({64})}, {"mask", gt(randn({8}), 0.0)}}, {{"step", "4"}});
  const std::string good = read_file(path);
  REQUIRE(io::load_safetensors(path).verified);

  std::string flipped = good;
  const size_t middle = (data_start(good) + good.size()) / 2;
  flipped[middle] = char(flipped[middle] ^ 0x10);
  write_file(path, flipped);
  CHECK_THROWS_WITH(load(path), Contains(path) && Contains("the data does not match its checksum"));

  write_file(path, edited(good, R"("step":"4")", R"("step":"5")"));
  CHECK_THROWS_WITH(io::load_safetensors(path),
                    Contains(path) && Contains("the header does not match its checksum"));
  // A tensor's name, which no other check could catch.
  write_file(path, edited(good, R"("weight":{)", R"("weighs":{)"));
  CHECK_THROWS_WITH(load(path), Contains(path) && Contains("the header does not match"));
  write_file(path, good);
  CHECK(load(path, {.require_checksum = true}).size() == 2);
}

TEST_CASE("a file without checksums loads unverified unless they are required",
          "[io][safetensors][checksum]") {
  const std::string fixture = (kFixtures / "all_dtypes.safetensors").string();
  const io::SafetensorsContents contents = io::load_safetensors(fixture);
  CHECK_FALSE(contents.verified);
  CHECK(contents.tensors.size() == all_dtypes_tensors().size());
  CHECK_THROWS_WITH(io::load_safetensors(fixture, {.require_checksum = true}),
                    Contains("all_dtypes.safetensors") && Contains("require_checksum") &&
                        Contains("got one without"));
  CHECK_THROWS_WITH(load(fixture, {.require_checksum = true}), Contains("all_dtypes.safetensors"));
  CHECK_FALSE(io::load_safetensors((kFixtures / "sequential_mlp.safetensors").string()).verified);

  TempFolder folder;
  save(folder.file("ours.safetensors"), all_dtypes_tensors());
  const io::SafetensorsContents ours =
      io::load_safetensors(folder.file("ours.safetensors"), {.require_checksum = true});
  CHECK(ours.verified);
  CHECK(ours.metadata.empty());  // the checksums are not the caller's metadata
}

TEST_CASE("the checksum keys are reserved and checked", "[io][safetensors][checksum][errors]") {
  TempFolder folder;
  const std::string path = folder.file("a.safetensors");
  for (const std::string key : {"halfgrad.checksum.data", "halfgrad.checksum.mine"}) {
    CHECK_THROWS_WITH(save(path, {{"w", ones({1})}}, {{key, "0123456789abcdef"}}),
                      Contains(key) && Contains("reserved"));
    CHECK_THROWS_WITH(io::to_safetensors_bytes({{"w", ones({1})}}, {{key, "x"}}),
                      Contains("reserved"));
  }
  CHECK(folder.entries() == 0);

  const std::string good = io::to_safetensors_bytes({{"w", ones({2})}}, {{"format", "pt"}});
  const std::string digest = metadata_value(good, io::kDataChecksumKey);
  std::string upper = digest;
  upper[0] = upper[0] >= 'a' ? char(upper[0] - 'a' + 'A') : 'G';
  check_refused(edited(good, digest, upper), "expected 16 lower-case hex digits");
  // A flipped bit in a checksum's name.
  check_refused(edited(good, "halfgrad.checksum.data", "halfgrad.checksum.dat`"),
                "\"halfgrad.checksum.dat`\": expected \"halfgrad.checksum.data\" or");
  const std::string w = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  check_refused(
      file_bytes(R"({"__metadata__":{"halfgrad.checksum.data":"0123456789abcdef"},)" + w + "}",
                 std::string(4, '\0')),
      "expected both checksums");
  check_refused(file_bytes(R"({"__metadata__":{"halfgrad.checksum.data":"012345"},)" + w + "}",
                           std::string(4, '\0')),
                "expected 16 lower-case hex digits");
}

TEST_CASE("float8 tensors save as F8_E4M3 and F8_E5M2 and load back bit for bit",
          "[io][safetensors][float8]") {
  const TensorMap tensors = {
      {"e4m3", tensor({0.5, -448.0, 3.0, 1e-3, 1e6}, {5}).to(kFloat8_e4m3fn)},
      {"e5m2", tensor({57344.0, -0.0, 1e9, 2.5, 0.25, 6.0}, {2, 3}).to(kFloat8_e5m2)},
  };
  TempFolder folder;
  save(folder.file("f8.safetensors"), tensors);
  const std::string bytes = read_file(folder.file("f8.safetensors"));
  CHECK_THAT(bytes, Contains(R"("dtype":"F8_E4M3")") && Contains(R"("dtype":"F8_E5M2")"));
  const TensorMap back = load(folder.file("f8.safetensors"));
  for (const auto& [name, t] : tensors) {
    INFO("key " << name);
    CHECK(bit_identical(back.at(name), t));
  }
}

TEST_CASE("load decodes F8_E5M2 and F8_E4M3 bytes written by hand", "[io][safetensors][float8]") {
  // e5m2 0x3C: exponent 15 - bias 15 = 2^0; 0xC2: -(1 + 2/4) * 2^1. e4m3fn 0x38: 2^0; 0x7E:
  // (1 + 6/8) * 2^8.
  for (const auto& [dtype, data, first, second] :
       {std::tuple{"F8_E5M2", std::string("\x3C\xC2", 2), 1.0f, -3.0f},
        std::tuple{"F8_E4M3", std::string("\x38\x7E", 2), 1.0f, 448.0f}}) {
    const io::SafetensorsContents contents = io::from_safetensors_bytes(
        one_tensor_file("[2]", "[0,2]", data, dtype), "hand.safetensors");
    const Tensor w = contents.tensors.at("w");
    CHECK(w.dtype() == (std::string(dtype) == "F8_E5M2" ? kFloat8_e5m2 : kFloat8_e4m3fn));
    CHECK(w.to(kFloat32).to_vector<float>() == std::vector<float>{first, second});
  }
}
