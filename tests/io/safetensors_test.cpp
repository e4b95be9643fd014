// hg::save / hg::load against the safetensors format: fixtures written in Python from the
// format's definition (tests/io/fixtures/make_fixtures.py), round trips of every dtype, and
// files broken in each way the loader must refuse.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Matchers::Contains;
using hg::testing::bit_identical;
using hg::testing::TempFolder;

namespace {

const std::filesystem::path kFixtures = std::filesystem::path(HG_TESTS_SOURCE_DIR) / "io/fixtures";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

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

TEST_CASE("save writes the same bytes as the Python writer", "[io][safetensors]") {
  const std::string python = read_file(kFixtures / "all_dtypes.safetensors");
  CHECK(io::to_safetensors_bytes(all_dtypes_tensors(), {{"format", "pt"}}) == python);
  TempFolder folder;
  save(folder.file("out.safetensors"), all_dtypes_tensors(), {{"format", "pt"}});
  CHECK(read_file(folder.file("out.safetensors")) == python);
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
  check_refused(one_tensor_file("[2]", "[0,8]", eight, "F8_E4M3"),
                "key \"w\": expected a dtype halfgrad reads");
  check_refused(one_tensor_file("[2]", "[0,8]", eight, "U8"), "got \"U8\"");
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
