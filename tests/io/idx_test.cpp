// io::read_idx against IDX files written from the format's definition
// (tests/io/fixtures/make_idx_fixtures.py): every type, gzipped or not, and malformed files.
#include <string>
#include <vector>

#include <zlib.h>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "halfgrad/io/idx.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;

namespace {

const std::string kFixtures = std::string(HG_TESTS_SOURCE_DIR) + "/io/fixtures/idx/";

// make_idx_fixtures.py's value().
double value(const std::string& type, int64_t i) {
  if (type == "u8") return double((7 * i + 3) % 256);
  if (type == "i8") return double((7 * i) % 200 - 100);
  if (type == "i16") return double(301 * i - 5000);
  if (type == "i32") return double(100003 * i - 1000000);
  return double(i - 5) * 0.375;
}

DType idx_dtype(const std::string& type) {
  if (type == "u8") return kUInt8;
  if (type == "i8") return kInt8;
  if (type == "i16") return kInt16;
  if (type == "i32") return kInt32;
  if (type == "f32") return kFloat32;
  return kFloat64;
}

Tensor expected(const std::string& type, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = value(type, i);
  return tensor(values, shape, idx_dtype(type));
}

std::string gzip_of(const std::string& bytes) {
  uLongf size = compressBound(uLong(bytes.size())) + 64;
  std::string out(size_t(size), '\0');
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
                       Z_DEFAULT_STRATEGY) == Z_OK);  // 15 + 16: a gzip wrapper
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = uInt(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = uInt(out.size());
  REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

}  // namespace

TEST_CASE("read_idx reads every IDX type big-endian", "[io][idx]") {
  for (const std::string type : {"u8", "i8", "i16", "i32", "f32", "f64"}) {
    INFO(type);
    const Tensor loaded = io::read_idx(kFixtures + type + ".idx");
    CHECK(loaded.dtype() == idx_dtype(type));
    CHECK(bit_identical(loaded, expected(type, {2, 3, 4})));
  }
  CHECK(bit_identical(io::read_idx(kFixtures + "f64_1d.idx"), expected("f64", {5})));
  const Tensor empty = io::read_idx(kFixtures + "u8_empty.idx");
  CHECK(empty.sizes() == Shape{0, 4});
  CHECK(empty.dtype() == kUInt8);
}

TEST_CASE("read_idx inflates a gzipped file", "[io][idx]") {
  CHECK(bit_identical(io::read_idx(kFixtures + "u8.idx.gz"), expected("u8", {2, 3, 4})));
}

TEST_CASE("read_idx explains what is wrong with a malformed file", "[io][idx]") {
  TempFolder folder;
  const std::string good = read_file(kFixtures + "i16.idx");
  auto error_for = [&](const std::string& bytes) {
    const std::string path = folder.file("bad.idx");
    write_file(path, bytes);
    return error_message([&] { io::read_idx(path); });
  };
  std::string magic = good;
  magic[0] = 1;
  CHECK_THAT(error_for(magic), Catch::Contains("bad.idx") &&
                                   Catch::Contains("magic 00 00 <type> <dims>), got 01 00 0b 03"));
  std::string type = good;
  type[2] = 0x0A;
  CHECK_THAT(error_for(type), Catch::Contains("got 0x0A"));
  CHECK_THAT(error_for(good.substr(0, 10)), Catch::Contains("truncated"));
  CHECK_THAT(
      error_for(good.substr(0, good.size() - 1)),
      Catch::Contains("need 48 bytes of int16 data after the 16-byte header, the file has 47"));
  CHECK_THAT(error_for(good + "x"), Catch::Contains("the file has 49"));
  CHECK_THAT(error_for(gzip_of(good + "x")), Catch::Contains("got more"));
  // Dimensions that ask for far more than the file holds allocate nothing.
  std::string huge = good;
  huge[4] = char(0xFF);
  CHECK_THAT(error_for(huge), Catch::Contains("need 102676561968 bytes"));
  CHECK_THAT(error_for(gzip_of(huge)), Catch::Contains("more than the gzipped file"));
  CHECK_THAT(error_message([&] { io::read_idx(folder.file("absent.idx")); }),
             Catch::Contains("cannot open") && Catch::Contains("absent.idx"));

  // A gzip stream cut short, or with a flipped byte in its data or checksum.
  const std::string gz = gzip_of(read_file(kFixtures + "f64.idx"));
  CHECK_THAT(error_for(gz.substr(0, gz.size() - 12)), Catch::Contains("bad.idx"));
  for (const size_t at : {gz.size() / 2, gz.size() - 6}) {
    std::string flipped = gz;
    flipped[at] = char(flipped[at] ^ 0x20);
    INFO("flipped byte " << at);
    CHECK_THAT(error_for(flipped), Catch::Contains("bad.idx"));
  }
}

TEST_CASE("read_idx refuses every truncation of a plain or gzipped file", "[io][idx]") {
  TempFolder folder;
  const std::string path = folder.file("cut.idx");
  for (const std::string& bytes :
       {read_file(kFixtures + "f32.idx"), read_file(kFixtures + "u8.idx.gz")}) {
    write_file(path, bytes);
    for (size_t length = bytes.size(); length-- > 0;) {
      std::filesystem::resize_file(path, length);
      INFO("cut to " << length);
      CHECK_THROWS_AS(io::read_idx(path), Error);
    }
  }
}
