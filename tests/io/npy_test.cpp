// io::load_npy / save_npy / load_npz / save_npz against files NumPy wrote
// (tests/io/fixtures/make_npy_fixtures.py): every dtype, both byte orders, Fortran order, 0-d
// and empty arrays, format versions 2.0 and 3.0, refused dtypes, byte-identical output, and
// malformed files.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/cuda/cuda.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/io/npy.h"
#include "halfgrad/io/zip.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;

namespace {

const std::string kFixtures = std::string(HG_TESTS_SOURCE_DIR) + "/io/fixtures/npy/";

const std::vector<std::string> kCodes = {"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "b1"};

DType dtype_of_code(const std::string& code) {
  if (code == "f2") return kFloat16;
  if (code == "f4") return kFloat32;
  if (code == "f8") return kFloat64;
  if (code == "i1") return kInt8;
  if (code == "i2") return kInt16;
  if (code == "i4") return kInt32;
  if (code == "i8") return kInt64;
  if (code == "u1") return kUInt8;
  return kBool;
}

// The fixtures' value at row-major flat index i (make_npy_fixtures.py's value()).
double value(const std::string& code, int64_t i) {
  if (code[0] == 'f') return double(i - 5) * 0.375;
  if (code == "i1") return double((7 * i) % 200 - 100);
  if (code == "i2") return double(301 * i - 5000);
  if (code == "i4") return double(100003 * i - 1000000);
  if (code == "i8") return double(i * 1'000'000'000'000 - 7);  // below 2^53: exact
  if (code == "u1") return double((7 * i + 3) % 256);
  return i % 3 == 0 ? 1.0 : 0.0;
}

Tensor expected(const std::string& code, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = value(code, i);
  return tensor(values, shape, dtype_of_code(code));
}

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

std::string text_of(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A version 1.0 file around a header text (padded as numpy pads) and data bytes.
std::string npy_file(std::string header, const std::string& data) {
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header + data;
}

std::string load_error(const std::string& file_bytes) {
  return error_message([&] { io::npy_from_bytes(bytes_of(file_bytes), "test.npy"); });
}

}  // namespace

TEST_CASE("load_npy reads every dtype NumPy writes in either byte order", "[io][npy]") {
  for (const std::string& code : kCodes) {
    INFO(code);
    const Tensor loaded = io::load_npy(kFixtures + "le_" + code + ".npy");
    CHECK(loaded.dtype() == dtype_of_code(code));
    CHECK(bit_identical(loaded, expected(code, {2, 3, 4})));
  }
  for (const std::string code : {"f2", "f4", "f8", "i2", "i4", "i8"}) {
    INFO("big-endian " << code);
    CHECK(
        bit_identical(io::load_npy(kFixtures + "be_" + code + ".npy"), expected(code, {2, 3, 4})));
  }
  CHECK(bit_identical(io::load_npy(kFixtures + "native_i4.npy"), expected("i4", {2, 3, 4})));
}

TEST_CASE("load_npy returns a Fortran-ordered array as the same values in row-major order",
          "[io][npy]") {
  const Tensor f4 = io::load_npy(kFixtures + "fortran_f4.npy");
  CHECK(f4.is_contiguous());
  CHECK(bit_identical(f4, expected("f4", {2, 3, 4})));
  // Element [1][2][3] is value(23) wherever the file kept it.
  CHECK(f4.contiguous().data_ptr<float>()[23] == float(value("f4", 23)));
  const Tensor i8 = io::load_npy(kFixtures + "fortran_be_i8.npy");
  CHECK(i8.is_contiguous());
  CHECK(bit_identical(i8, expected("i8", {3, 5})));
}

TEST_CASE("load_npy reads 0-d and empty arrays and format versions 2.0 and 3.0", "[io][npy]") {
  const Tensor scalar = io::load_npy(kFixtures + "scalar_f8.npy");
  CHECK(scalar.dim() == 0);
  CHECK(scalar.item<double>() == value("f8", 0));
  const Tensor empty_f4 = io::load_npy(kFixtures + "empty_f4.npy");
  CHECK(empty_f4.sizes() == Shape{0, 3});
  CHECK(empty_f4.dtype() == kFloat32);
  const Tensor empty_i8 = io::load_npy(kFixtures + "empty_i8.npy");
  CHECK(empty_i8.sizes() == Shape{0});
  CHECK(empty_i8.dtype() == kInt64);
  for (const std::string version : {"v2", "v3"}) {
    INFO(version);
    CHECK(bit_identical(io::load_npy(kFixtures + version + "_f4.npy"), expected("f4", {4})));
  }
}

TEST_CASE("load_npy names the dtypes it refuses", "[io][npy]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"complex64.npy", "'<c8' (complex numbers)"},
      {"unicode.npy", "'<U3' (a Unicode string)"},
      {"object.npy", "'|O' (Python objects (pickled))"},
      {"uint16.npy", "'<u2' (an unsigned integer wider than a byte)"},
      {"structured.npy", "a list (a structured dtype)"}};
  for (const auto& [name, reason] : cases) {
    const std::string file = name;  // clang 14 lambdas cannot capture a structured binding
    INFO(file);
    const std::string message = error_message([&] { io::load_npy(kFixtures + file); });
    CHECK_THAT(message, Catch::Contains(file) && Catch::Contains(reason));
  }
}

TEST_CASE("save_npy writes the bytes numpy.save writes", "[io][npy]") {
  TempFolder folder;
  for (const std::string& code : kCodes) {
    INFO(code);
    const std::string path = folder.file(code + ".npy");
    io::save_npy(path, expected(code, {2, 3, 4}));
    CHECK(read_file(path) == read_file(kFixtures + "le_" + code + ".npy"));
    CHECK(text_of(io::npy_to_bytes(expected(code, {2, 3, 4}))) == read_file(path));
  }
  const std::vector<std::pair<std::string, Tensor>> others = {
      {"scalar_f8.npy", expected("f8", {})},
      {"empty_f4.npy", expected("f4", {0, 3})},
      {"empty_i8.npy", expected("i8", {0})}};
  for (const auto& [file, tensor] : others) {
    INFO(file);
    CHECK(text_of(io::npy_to_bytes(tensor)) == read_file(kFixtures + file));
  }
  // A non-contiguous view saves its values.
  const Tensor values = expected("f4", {2, 3, 4});
  const Tensor strided = values.permute({2, 1, 0}).contiguous().permute({2, 1, 0});
  REQUIRE_FALSE(strided.is_contiguous());
  CHECK(text_of(io::npy_to_bytes(strided)) == read_file(kFixtures + "le_f4.npy"));
  if (cuda::is_available()) {
    CHECK(text_of(io::npy_to_bytes(values.to(Device(kCUDA)))) ==
          read_file(kFixtures + "le_f4.npy"));
  }
}

TEST_CASE("save_npy refuses dtypes numpy lacks and leaves no file", "[io][npy]") {
  TempFolder folder;
  const std::string path = folder.file("x.npy");
  for (const DType dtype : {kBFloat16, kFloat8_e4m3fn}) {
    const std::string message = error_message([&] { io::save_npy(path, zeros({2}, dtype)); });
    CHECK_THAT(message,
               Catch::Contains(std::string(dtype_name(dtype))) && Catch::Contains(".to(kFloat32)"));
  }
  CHECK(folder.entries() == 0);
}

TEST_CASE("npy_to_bytes and npy_from_bytes round trip every dtype", "[io][npy]") {
  for (const std::string& code : kCodes) {
    INFO(code);
    for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 0, 2}, Shape{2, 5, 3, 2}}) {
      const Tensor original = expected(code, shape);
      CHECK(bit_identical(io::npy_from_bytes(io::npy_to_bytes(original), "round trip"), original));
    }
  }
}

TEST_CASE("load_npy explains what is wrong with a malformed file", "[io][npy]") {
  const std::string ok_header = "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }";
  const std::string two_int16 = std::string("\x01\x00\x02\x00", 4);
  REQUIRE(bit_identical(io::npy_from_bytes(bytes_of(npy_file(ok_header, two_int16)), "ok"),
                        tensor(std::vector<int16_t>{1, 2})));

  CHECK_THAT(load_error(std::string("\x93NUMPX\x01\x00\x00\x00", 10)),
             Catch::Contains("test.npy") && Catch::Contains("magic"));
  std::string version4 = npy_file(ok_header, two_int16);
  version4[6] = '\x04';
  CHECK_THAT(load_error(version4), Catch::Contains("1.0, 2.0 or 3.0, got 4.0"));
  CHECK_THAT(load_error(npy_file(ok_header, two_int16 + "x")),
             Catch::Contains("expected 4 bytes of data") && Catch::Contains("got 5"));
  CHECK_THAT(load_error(npy_file(ok_header, two_int16.substr(0, 3))), Catch::Contains("got 3"));

  const std::vector<std::pair<std::string, std::string>> headers = {
      {"{'descr': '<i2', 'shape': (2,), }", "without 'fortran_order'"},
      {"{'descr': '<i2', 'fortran_order': False, 'shape': (2,), 'x': 1}", "the key 'x'"},
      {"{'descr': '<i2', 'descr': '<i2', 'fortran_order': False, 'shape': (2,)}", "twice"},
      {"{'descr': '<i2', 'fortran_order': Maybe, 'shape': (2,)}", "True or False"},
      {"{'descr': '<i2', 'fortran_order': False, 'shape': (-2,)}", "non-negative integer"},
      {"{'descr': '<i2', 'fortran_order': False, 'shape': (99999999999999999999,)}", "below 2^63"},
      {"{'descr': '<i2', 'fortran_order': False, 'shape': (2,)} x", "only spaces"},
      {"{'descr': '|i2', 'fortran_order': False, 'shape': (2,)}", "'|' (not applicable)"},
      {"{'descr': 'i2', 'fortran_order': False, 'shape': (2,)}", "got none"},
      {"{'descr': '<f16', 'fortran_order': False, 'shape': (2,)}", "'<f16'"},
      {"{'descr': '<i2', 'fortran_order': False, 'shape': (2,)", "end of the header"}};
  for (const auto& [header, reason] : headers) {
    INFO(header);
    CHECK_THAT(load_error(npy_file(header, two_int16)),
               Catch::Contains("test.npy") && Catch::Contains(reason));
  }
  // A shape whose byte count overflows, or that asks for more than the file holds, allocates
  // nothing.
  CHECK_THAT(
      load_error(npy_file(
          "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904, 8)}", "")),
      Catch::Contains("more elements than 2^64"));
  CHECK_THAT(
      load_error(npy_file(
          "{'descr': '<i8', 'fortran_order': False, 'shape': (2305843009213693952, 2)}", "")),
      Catch::Contains("8-byte elements has more than 2^64 bytes"));
  CHECK_THAT(load_error(npy_file(
                 "{'descr': '<i8', 'fortran_order': False, 'shape': (1000000000000,)}", "")),
             Catch::Contains("expected 8000000000000 bytes of data"));
  CHECK_THAT(load_error(npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}",
                                 std::string("\x01\x00\x02", 3))),
             Catch::Contains("0 or 1, got 2 at element 2"));
}

TEST_CASE("load_npy refuses every truncation and survives any corrupted byte", "[io][npy]") {
  for (const std::string file : {"le_f4.npy", "fortran_be_i8.npy", "v2_f4.npy", "le_b1.npy"}) {
    const std::string bytes = read_file(kFixtures + file);
    for (size_t length = 0; length < bytes.size(); ++length) {
      INFO(file << " cut to " << length);
      CHECK_THROWS_AS(io::npy_from_bytes(bytes_of(bytes.substr(0, length)), file), Error);
    }
    for (size_t at = 0; at < bytes.size(); ++at) {
      std::string corrupted = bytes;
      corrupted[at] = char(corrupted[at] ^ 0x41);
      try {
        (void)io::npy_from_bytes(bytes_of(corrupted), file);
      } catch (const Error&) {
      }
    }
  }
}

TEST_CASE("load_npz reads numpy.savez and numpy.savez_compressed", "[io][npy]") {
  for (const std::string file : {"arrays.npz", "arrays_compressed.npz"}) {
    INFO(file);
    const std::map<std::string, Tensor> arrays = io::load_npz(kFixtures + file);
    REQUIRE(arrays.size() == 5);
    CHECK(bit_identical(arrays.at("a"), expected("f4", {2, 3, 4})));
    CHECK(bit_identical(arrays.at("b"), expected("i8", {5})));
    CHECK(bit_identical(arrays.at("s"), expected("f8", {})));
    CHECK(bit_identical(arrays.at("e"), expected("f4", {0, 3})));
    CHECK(bit_identical(arrays.at("m"), expected("b1", {2, 3, 4})));
  }
  CHECK(io::ZipReader(kFixtures + "arrays_compressed.npz").entries()[0].method == 8);
}

TEST_CASE("save_npz round trips and names its entries key.npy", "[io][npy]") {
  const bool compressed = GENERATE(false, true);
  TempFolder folder;
  const std::string path = folder.file("out.npz");
  const std::map<std::string, Tensor> arrays = {{"weight", expected("f2", {3, 4})},
                                                {"step", expected("i8", {})},
                                                {"mask", expected("b1", {0, 2})},
                                                {"layer.0/bias", expected("f8", {6})}};
  io::save_npz(path, arrays, compressed);
  const io::ZipReader archive(path);
  REQUIRE(archive.entries().size() == 4);
  for (const io::ZipEntry& entry : archive.entries()) {
    CHECK(entry.method == (compressed ? 8 : 0));
    const std::string key = entry.name.substr(0, entry.name.size() - 4);
    INFO(entry.name);
    REQUIRE(arrays.count(key) == 1);
    CHECK(archive.read(entry.name) == io::npy_to_bytes(arrays.at(key)));
  }
  const std::map<std::string, Tensor> loaded = io::load_npz(path);
  REQUIRE(loaded.size() == arrays.size());
  for (const auto& [key, tensor] : arrays) CHECK(bit_identical(loaded.at(key), tensor));

  // Refused before the destination is touched.
  CHECK_THAT(error_message([&] {
               io::save_npz(path, {{"bad", zeros({1}, kBFloat16)}});
             }),
             Catch::Contains("bfloat16"));
  CHECK(io::load_npz(path).size() == 4);

  const std::string other = folder.file("other.zip");
  {
    io::ZipWriter writer(other, false);
    writer.add("readme.txt", bytes_of("hi"));
  }
  CHECK_THAT(error_message([&] { io::load_npz(other); }),
             Catch::Contains("other.zip") && Catch::Contains("\"<key>.npy\", got \"readme.txt\""));
}
