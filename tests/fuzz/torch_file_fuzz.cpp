// The restricted unpickler of torch files (io::unpickle_torch, NOTE [Restricted unpickler])
// under libFuzzer: any data.pkl and storage records either load, or raise hg::Error; nothing
// else (no crash, no sanitizer report, no other exception, no leak). What loads is walked
// completely, every tensor's elements read.
//
// An input is a torch.save archive's contents without the zip around them (the zip reader has
// its own checks, and CRC-32s would stop most mutations before they reach the pickle):
//   u32 little-endian n, n bytes of data.pkl, then records until the input ends, each
//   u8 key length k, k bytes of key, u32 little-endian m, m bytes of the record data/<key>.
// A record cut short by the end of the input is dropped. The seeds in
// tests/fuzz/corpus/torch_file are the fixtures of tests/io/fixtures in this form
// (make_torch_fixtures.py writes both).
//
// Built with clang's -fsanitize=fuzzer when HALFGRAD_FUZZ is on (hg-fuzz-torch_file, run by
// ctest for a bounded time over tests/fuzz/corpus/torch_file); otherwise linked with
// replay_main.cpp, which runs every corpus file once (test_fuzz_torch_file_replay).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/core/error.h"
#include "halfgrad/io/torch_file.h"

namespace {

struct Input {
  std::string_view bytes;
  size_t pos = 0;
  bool take(size_t count, std::string_view& out) {
    if (count > bytes.size() - pos) return false;
    out = bytes.substr(pos, count);
    pos += count;
    return true;
  }
  bool take_u32(uint32_t& out) {
    std::string_view raw;
    if (!take(4, raw)) return false;
    out = 0;
    for (size_t i = 4; i-- > 0;) out = (out << 8) | uint8_t(raw[i]);
    return true;
  }
};

// Reads every value, as a user would: all tensor elements, every dict entry.
double walk(const hg::io::TorchValue& value) {
  using Kind = hg::io::TorchValue::Kind;
  switch (value.kind()) {
    case Kind::Tensor: {
      // A view may be legitimately huge over a small storage (stride 0): read those in part.
      const hg::Tensor& tensor = value.to_tensor();
      constexpr int64_t kMaxRead = 1 << 16;
      const hg::Tensor read =
          tensor.numel() <= kMaxRead ? tensor : tensor.flatten().narrow(0, 0, 1);
      double sum = 0;
      for (double element : read.to_vector<double>()) sum += element;
      return sum;
    }
    case Kind::List:
    case Kind::Tuple: {
      double sum = 0;
      for (const hg::io::TorchValue& element : value.elements()) sum += walk(element);
      return sum;
    }
    case Kind::Dict: {
      double sum = 0;
      for (const auto& [key, element] : value.items()) sum += walk(element);
      return sum;
    }
    default:
      return 0;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input input{std::string_view(reinterpret_cast<const char*>(data), size)};
  uint32_t pickle_size = 0;
  std::string_view pickle;
  if (!input.take_u32(pickle_size) || !input.take(pickle_size, pickle)) return 0;
  std::map<std::string, std::string> records;
  while (true) {
    std::string_view key_length, key, record;
    uint32_t record_size = 0;
    if (!input.take(1, key_length) || !input.take(uint8_t(key_length[0]), key) ||
        !input.take_u32(record_size) || !input.take(record_size, record)) {
      break;
    }
    records[std::string(key)] = std::string(record);
  }
  const hg::io::TorchStorageReader read_storage = [&](const std::string& key) {
    const auto it = records.find(key);
    HG_CHECK(it != records.end(), "no record \"{}\"", key);
    std::vector<std::byte> bytes(it->second.size());
    if (!bytes.empty()) std::memcpy(bytes.data(), it->second.data(), bytes.size());
    return bytes;
  };
  try {
    const hg::io::TorchValue value = hg::io::unpickle_torch(
        std::as_bytes(std::span(pickle.data(), pickle.size())), read_storage, "fuzz input");
    (void)walk(value);
  } catch (const hg::Error&) {
    return 0;  // refused with a message: what the loader must do with bad bytes
  }
  return 0;
}
