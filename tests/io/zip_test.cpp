// io::ZipReader and io::ZipWriter: archives written by Python's zipfile (stored, deflated,
// ZIP64; tests/io/fixtures/make_zip_fixtures.py), round trips, and corrupted or truncated
// files. CRC-32s are checked against a bitwise implementation of the format's definition
// (reflected polynomial 0xEDB88320), independent of zlib.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/io/zip.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;

namespace {

const std::string kFixtures = std::string(HG_TESTS_SOURCE_DIR) + "/io/fixtures/";

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

// The entries every fixture holds (make_zip_fixtures.py).
struct Expected {
  std::string name;
  std::vector<std::byte> data;
};
std::vector<Expected> fixture_entries() {
  std::string ramp(1000, '\0');
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = char((7 * i + 3) % 256);
  return {{"hello.txt", bytes_of("Hello, halfgrad!\n")},
          {"empty.bin", {}},
          {"folder/ramp.bin", bytes_of(ramp)}};
}

uint32_t reference_crc32(std::span<const std::byte> data) {
  uint32_t crc = 0xFFFFFFFF;
  for (std::byte b : data) {
    crc ^= uint32_t(b);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// Deterministic bytes: a compressible half (a short repeating pattern) and a noisy half.
std::vector<std::byte> test_bytes(size_t n, uint32_t seed) {
  std::vector<std::byte> out(n);
  uint32_t state = seed;
  for (size_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    out[i] = i < n / 2 ? std::byte(i % 13) : std::byte(state >> 24);
  }
  return out;
}

// Reads every entry; returns normally or throws hg::Error, whatever the bytes of the file.
void read_everything(const std::string& path) {
  io::ZipReader archive(path);
  for (const io::ZipEntry& entry : archive.entries()) {
    try {
      (void)archive.read(entry.name);
    } catch (const Error&) {
    }
  }
}

size_t find(const std::string& haystack, const std::string& needle, size_t from = 0) {
  const size_t at = haystack.find(needle, from);
  REQUIRE(at != std::string::npos);
  return at;
}

}  // namespace

TEST_CASE("ZipReader reads the archives Python's zipfile writes", "[io][zip]") {
  const auto [file, method, zip64_end] =
      GENERATE(table<std::string, uint16_t, bool>({{"stored.zip", 0, false},
                                                   {"deflated.zip", 8, false},
                                                   {"zip64_forced.zip", 8, false},
                                                   {"zip64_small_limits.zip", 0, true}}));
  INFO(file);
  const io::ZipReader archive(kFixtures + file);
  std::vector<Expected> expected = fixture_entries();
  // zip64_small_limits.zip holds them in reverse order.
  if (zip64_end) std::reverse(expected.begin(), expected.end());
  REQUIRE(archive.entries().size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const io::ZipEntry& entry = archive.entries()[i];
    INFO(expected[i].name);
    CHECK(entry.name == expected[i].name);
    CHECK(entry.method == method);
    CHECK(entry.size == expected[i].data.size());
    CHECK(entry.crc32 == reference_crc32(expected[i].data));
    if (method == 0) CHECK(entry.compressed_size == entry.size);
    CHECK(archive.contains(expected[i].name));
    CHECK(archive.read(expected[i].name) == expected[i].data);
  }
  CHECK_FALSE(archive.contains("hello"));
  CHECK_FALSE(archive.contains("folder/"));
  // zip64_small_limits.zip defers ramp.bin's sizes and hello.txt's offset (1104, as zipfile
  // reports it) to ZIP64 extra fields.
  if (zip64_end) CHECK(archive.entries()[2].local_header_offset == 1104);
}

TEST_CASE("ZipReader names the file the entry and the reason of what it cannot read", "[io][zip]") {
  const io::ZipReader archive(kFixtures + "bzip2.zip");
  REQUIRE(archive.entries().size() == 3);
  CHECK(archive.entries()[0].method == 12);
  const std::string unsupported = error_message([&] { archive.read("hello.txt"); });
  CHECK_THAT(unsupported, Catch::Contains("bzip2.zip") && Catch::Contains("\"hello.txt\"") &&
                              Catch::Contains("stored (0) or deflate (8), got method 12"));

  const io::ZipReader deflated(kFixtures + "deflated.zip");
  const std::string missing = error_message([&] { deflated.read("nope.txt"); });
  CHECK_THAT(missing, Catch::Contains("deflated.zip") && Catch::Contains("\"nope.txt\"") &&
                          Catch::Contains("\"hello.txt\", \"empty.bin\", \"folder/ramp.bin\""));

  TempFolder folder;
  const std::string text_path = folder.file("notes.txt");
  write_file(text_path, "not an archive, just a line of text long enough to search\n");
  CHECK_THAT(error_message([&] { io::ZipReader{text_path}; }),
             Catch::Contains("notes.txt") && Catch::Contains("expected a ZIP archive"));
  CHECK_THAT(error_message([&] { io::ZipReader{folder.file("absent.zip")}; }),
             Catch::Contains("cannot open") && Catch::Contains("absent.zip"));
}

TEST_CASE("ZipReader refuses an encrypted entry", "[io][zip]") {
  TempFolder folder;
  std::string bytes = read_file(kFixtures + "stored.zip");
  // The general purpose flags of the first central record (hello.txt) are at offset 8.
  const size_t record = find(bytes, "PK\x01\x02");
  bytes[record + 8] = char(bytes[record + 8] | 1);
  const std::string path = folder.file("encrypted.zip");
  write_file(path, bytes);
  const io::ZipReader archive(path);
  CHECK_THAT(error_message([&] { archive.read("hello.txt"); }),
             Catch::Contains("encrypted.zip") && Catch::Contains("\"hello.txt\" is encrypted"));
  CHECK(archive.read("empty.bin").empty());
}

TEST_CASE("ZipReader catches a flipped data byte by CRC-32 or by deflate", "[io][zip]") {
  TempFolder folder;
  for (const std::string file : {"stored.zip", "deflated.zip"}) {
    INFO(file);
    std::string bytes = read_file(kFixtures + file);
    // ramp.bin's data starts after its local header (30 bytes) and name (15 bytes, no extra).
    const size_t header = find(bytes, "PK\x03\x04" + std::string(), find(bytes, "empty.bin"));
    REQUIRE(bytes.substr(header + 30, 15) == "folder/ramp.bin");
    bytes[header + 30 + 15 + 100] ^= 0x10;
    const std::string path = folder.file("flipped-" + file);
    write_file(path, bytes);
    const io::ZipReader archive(path);
    CHECK(archive.read("hello.txt") == fixture_entries()[0].data);
    const std::string message = error_message([&] { archive.read("folder/ramp.bin"); });
    CHECK_THAT(message, Catch::Contains("flipped-" + file) &&
                            Catch::Contains("\"folder/ramp.bin\"") && Catch::Contains("corrupted"));
    if (file == "stored.zip") {
      CHECK_THAT(message, Catch::Contains(fmt::format("expected CRC-32 0x{:08x}",
                                                      reference_crc32(fixture_entries()[2].data))));
    }
  }
}

TEST_CASE("ZipReader refuses every truncation of an archive", "[io][zip]") {
  TempFolder folder;
  for (const std::string file : {"stored.zip", "zip64_small_limits.zip"}) {
    const std::string bytes = read_file(kFixtures + file);
    const std::string path = folder.file("truncated.zip");
    write_file(path, bytes);
    // Shortened one byte at a time, from the end.
    for (size_t length = bytes.size(); length-- > 0;) {
      std::filesystem::resize_file(path, length);
      INFO(file << " cut to " << length << " bytes");
      CHECK_THROWS_AS(io::ZipReader(path), Error);
    }
  }
  // Cut inside the entries' data but with the end records kept, the offsets point past the
  // file: the central directory no longer fits before the end record.
  const std::string bytes = read_file(kFixtures + "stored.zip");
  const size_t directory = find(bytes, "PK\x01\x02");
  const std::string path = folder.file("hole.zip");
  write_file(path, bytes.substr(0, 40) + bytes.substr(directory));
  CHECK_THAT(error_message([&] { io::ZipReader{path}; }),
             Catch::Contains("hole.zip") && Catch::Contains("corrupted"));
}

TEST_CASE("ZipReader survives any single corrupted byte with a value or an hg::Error",
          "[io][zip]") {
  TempFolder folder;
  const std::string path = folder.file("corrupted.zip");
  for (const std::string file : {"stored.zip", "deflated.zip", "zip64_small_limits.zip"}) {
    const std::string bytes = read_file(kFixtures + file);
    write_file(path, bytes);
    // One byte changed in place and restored after each read (rewriting the file each time
    // is slow on some file systems).
    std::fstream stream(path, std::ios::binary | std::ios::in | std::ios::out);
    auto put = [&](size_t at, char value) {
      stream.seekp(std::streamoff(at));
      stream.put(value);
      stream.flush();
      REQUIRE(stream.good());
    };
    for (size_t at = 0; at < bytes.size(); ++at) {
      for (const uint8_t mask : {uint8_t(0xFF), uint8_t(0x80)}) {
        put(at, char(uint8_t(bytes[at]) ^ mask));
        INFO(file << " byte " << at << " xor " << int(mask));
        try {
          read_everything(path);
        } catch (const Error&) {
        }
      }
      put(at, bytes[at]);
    }
  }
}

TEST_CASE("ZipWriter round trips entries through ZipReader", "[io][zip]") {
  const bool compress = GENERATE(false, true);
  const bool force_zip64 = GENERATE(false, true);
  INFO("compress " << compress << " force_zip64 " << force_zip64);
  TempFolder folder;
  const std::string path = folder.file("out.zip");
  const std::vector<std::pair<std::string, std::vector<std::byte>>> entries = {
      {"a.npy", test_bytes(100'000, 1)},
      {"empty", {}},
      {"dir/b \xc3\xa9.bin", test_bytes(3, 2)},  // a UTF-8 name
      {"c", test_bytes(1 << 20, 3)}};
  {
    io::ZipWriter writer(path, compress, force_zip64);
    for (const auto& [name, data] : entries) writer.add(name, data);
    CHECK_FALSE(std::filesystem::exists(path));  // atomic: nothing before close()
    writer.close();
  }
  const io::ZipReader archive(path);
  REQUIRE(archive.entries().size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [name, data] = entries[i];
    const io::ZipEntry& entry = archive.entries()[i];
    INFO(name);
    CHECK(entry.name == name);
    CHECK(entry.size == data.size());
    CHECK(entry.crc32 == reference_crc32(data));
    CHECK(entry.method == (compress ? 8 : 0));
    if (!compress) CHECK(entry.compressed_size == data.size());
    CHECK(archive.read(name) == data);
  }
  // Half of "c" repeats a 13-byte pattern: deflate must shrink it well below its size.
  if (compress) CHECK(archive.entries()[3].compressed_size < (1u << 20) * 3 / 4);
  const std::string bytes = read_file(path);
  const bool has_zip64_end = bytes.find("PK\x06\x06") != std::string::npos &&
                             bytes.find("PK\x06\x07") != std::string::npos;
  CHECK(has_zip64_end == force_zip64);
  // The UTF-8 name sets general purpose bit 11.
  CHECK((archive.entries()[2].flags & (1 << 11)) != 0);
  CHECK(archive.entries()[0].flags == 0);
}

TEST_CASE("ZipWriter rejects bad names and commits only on close or a normal scope exit",
          "[io][zip]") {
  TempFolder folder;
  const std::string path = folder.file("w.zip");
  const std::vector<std::byte> data = bytes_of("payload");
  {
    io::ZipWriter writer(path, true);
    writer.add("x", data);
    CHECK_THAT(error_message([&] { writer.add("x", data); }),
               Catch::Contains("w.zip") && Catch::Contains("\"x\" twice"));
    CHECK_THAT(error_message([&] { writer.add("", data); }),
               Catch::Contains("1 to 65535 bytes, got 0"));
    CHECK_THAT(error_message([&] { writer.add(std::string(70000, 'n'), data); }),
               Catch::Contains("got 70000 bytes"));
  }  // the destructor closes it
  {
    const io::ZipReader archive(path);
    REQUIRE(archive.entries().size() == 1);
    CHECK(archive.read("x") == data);
  }
  // An exception unwinding through a writer leaves the previous file in place.
  try {
    io::ZipWriter writer(path, false);
    writer.add("y", data);
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  {
    const io::ZipReader archive(path);
    CHECK(archive.contains("x"));
    CHECK_FALSE(archive.contains("y"));
    CHECK(folder.entries() == 1);  // no temporary left
  }
  io::ZipWriter writer(path, false);
  writer.close();
  CHECK_THAT(error_message([&] { writer.add("z", data); }), Catch::Contains("after close()"));
  CHECK(io::ZipReader(path).entries().empty());
}
