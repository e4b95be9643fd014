// The safetensors format (safetensors.h): the JSON header, dtype names, the checksums, and
// reading and writing tensors from files and memory.
#include "halfgrad/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/io/atomic_file.h"

namespace hg {

// NOTE [Little-endian hosts] safetensors stores little-endian bytes, which is the memory
// layout of every host halfgrad builds for (x86-64, AArch64 Linux), so tensors are read and
// written as raw bytes. A big-endian host would need a byte swap per element.
static_assert(std::endian::native == std::endian::little,
              "halfgrad's safetensors reader and writer assume a little-endian host");

namespace io {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// The Python reader's cap on the header (safetensors' MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
// In the order the Python writer lays tensors out (largest alignment first, as it sorts by
// its dtype enum, descending); to_safetensors_bytes() follows it, so its files and the Python
// writer's agree byte for byte.
constexpr std::array<DTypeName, 12> kDTypeNames = {{{kInt64, "I64"},
                                                    {kFloat64, "F64"},
                                                    {kFloat32, "F32"},
                                                    {kInt32, "I32"},
                                                    {kBFloat16, "BF16"},
                                                    {kFloat16, "F16"},
                                                    {kInt16, "I16"},
                                                    {kFloat8_e4m3fn, "F8_E4M3"},
                                                    {kFloat8_e5m2, "F8_E5M2"},
                                                    {kInt8, "I8"},
                                                    {kUInt8, "U8"},
                                                    {kBool, "BOOL"}}};

size_t layout_rank(DType dtype) {
  for (size_t i = 0; i < kDTypeNames.size(); ++i) {
    if (kDTypeNames[i].dtype == dtype) return i;
  }
  return kDTypeNames.size();
}

// One tensor of a header, checked.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

struct Header {
  std::vector<Entry> entries;  // sorted by offset
  std::map<std::string, std::string> metadata;
};

// ---- checksums (NOTE [Safetensors checksums]) ----------------------------------------------

constexpr size_t kDigestHexDigits = 16;

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string hex_digest(uint64_t digest) { return fmt::format("{:016x}", digest); }

// XXH64 of bytes that arrive in pieces: the data region, tensor by tensor.
class DataHasher {
 public:
  DataHasher() : state_(XXH64_createState()) {
    HG_CHECK(state_ != nullptr, "safetensors: cannot allocate the checksum's state");
    XXH64_reset(state_.get(), 0);
  }
  void update(const void* data, size_t size) {
    if (size > 0) XXH64_update(state_.get(), data, size);
  }
  uint64_t digest() const { return XXH64_digest(state_.get()); }

 private:
  struct FreeState {
    void operator()(XXH64_state_t* state) const { XXH64_freeState(state); }
  };
  std::unique_ptr<XXH64_state_t, FreeState> state_;
};

void append_counted(std::string& out, std::string_view text) {
  out += std::to_string(text.size());
  out += ':';
  out += text;
}

// XXH64 of the header's canonical text: its tensors by name, then the metadata other than the
// checksums (`metadata` holds none) by key.
uint64_t header_digest(const std::vector<Entry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const Entry*> by_name;
  by_name.reserve(entries.size());
  for (const Entry& entry : entries) by_name.push_back(&entry);
  std::sort(by_name.begin(), by_name.end(),
            [](const Entry* a, const Entry* b) { return a->name < b->name; });
  std::string text;
  for (const Entry* entry : by_name) {
    text += "tensor ";
    append_counted(text, entry->name);
    text += fmt::format(" {} {}", safetensors_dtype_name(entry->dtype), entry->shape.size());
    for (int64_t size : entry->shape) text += fmt::format(" {}", size);
    text += fmt::format(" {} {}\n", entry->begin, entry->end);
  }
  for (const auto& [key, value] : metadata) {
    text += "metadata ";
    append_counted(text, key);
    text += ' ';
    append_counted(text, value);
    text += '\n';
  }
  return XXH64(text.data(), text.size(), 0);
}

// The checksums a file's metadata holds, taken out of it; none when it has no key with the
// reserved prefix.
struct StoredChecksums {
  uint64_t data;
  uint64_t header;
};

uint64_t parse_digest(const std::string& key, const std::string& value, std::string_view source) {
  const bool well_formed =
      value.size() == kDigestHexDigits && std::all_of(value.begin(), value.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      });
  HG_CHECK(well_formed,
           "load: \"{}\": __metadata__ key \"{}\": expected {} lower-case hex digits (an XXH64 "
           "checksum), got \"{}\"",
           source, key, kDigestHexDigits, value.size() > 40 ? value.substr(0, 37) + "..." : value);
  return std::stoull(value, nullptr, 16);
}

std::optional<StoredChecksums> take_checksums(std::map<std::string, std::string>& metadata,
                                              std::string_view source) {
  std::optional<uint64_t> data, header;
  auto it = metadata.lower_bound(std::string(kChecksumKeyPrefix));
  while (it != metadata.end() && starts_with(it->first, kChecksumKeyPrefix)) {
    if (it->first == kDataChecksumKey) {
      data = parse_digest(it->first, it->second, source);
    } else if (it->first == kHeaderChecksumKey) {
      header = parse_digest(it->first, it->second, source);
    } else {
      HG_ERROR(
          "load: \"{}\": __metadata__ key \"{}\": expected \"{}\" or \"{}\" (the prefix "
          "\"{}\" is reserved for halfgrad's checksums)",
          source, it->first, kDataChecksumKey, kHeaderChecksumKey, kChecksumKeyPrefix);
    }
    it = metadata.erase(it);
  }
  if (!data && !header) return std::nullopt;
  HG_CHECK(data && header,
           "load: \"{}\": expected both checksums \"{}\" and \"{}\" in __metadata__, got only "
           "\"{}\"",
           source, kDataChecksumKey, kHeaderChecksumKey,
           data ? kDataChecksumKey : kHeaderChecksumKey);
  return StoredChecksums{.data = *data, .header = *header};
}

// ---- parsing -------------------------------------------------------------------------------

// A JSON value's kind, for messages.
std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return fmt::format("{} {}", value.type_name(), text);
}

uint64_t unsigned_field(const json& value, std::string_view source, std::string_view key,
                        std::string_view field) {
  HG_CHECK(value.is_number_unsigned(),
           "load: \"{}\": key \"{}\": expected {} to hold non-negative integers, got {}", source,
           key, field, describe(value));
  return value.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const json& value, uint64_t data_bytes,
                  std::string_view source) {
  HG_CHECK(value.is_object(),
           "load: \"{}\": key \"{}\": expected an object with dtype, shape and data_offsets, "
           "got {}",
           source, name, describe(value));
  const auto dtype_field = value.find("dtype");
  const auto shape_field = value.find("shape");
  const auto offsets_field = value.find("data_offsets");
  HG_CHECK(dtype_field != value.end() && shape_field != value.end() && offsets_field != value.end(),
           "load: \"{}\": key \"{}\": expected the fields dtype, shape and data_offsets, got {}",
           source, name, describe(value));
  HG_CHECK(dtype_field->is_string(), "load: \"{}\": key \"{}\": expected a dtype name, got {}",
           source, name, describe(*dtype_field));
  Entry entry{.name = name, .dtype = kFloat32, .shape = {}, .begin = 0, .end = 0};
  try {
    entry.dtype = dtype_from_safetensors_name(dtype_field->get<std::string>());
  } catch (const Error& e) {
    HG_ERROR("load: \"{}\": key \"{}\": {}", source, name, e.what());
  }

  HG_CHECK(shape_field->is_array(), "load: \"{}\": key \"{}\": expected a shape array, got {}",
           source, name, describe(*shape_field));
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& dim : *shape_field) {
    const uint64_t size = unsigned_field(dim, source, name, "shape");
    HG_CHECK(size <= uint64_t(std::numeric_limits<int64_t>::max()),
             "load: \"{}\": key \"{}\": a dimension of {} is too large", source, name, size);
    overflow = overflow || __builtin_mul_overflow(numel, size, &numel);
    entry.shape.push_back(int64_t(size));
  }
  uint64_t nbytes = 0;
  overflow =
      overflow || __builtin_mul_overflow(numel, uint64_t(element_size(entry.dtype)), &nbytes);
  HG_CHECK(!overflow && nbytes <= data_bytes,
           "load: \"{}\": key \"{}\": shape {} of {} needs more bytes than the file's {} bytes "
           "of data",
           source, name, entry.shape, dtype_name(entry.dtype), data_bytes);

  HG_CHECK(offsets_field->is_array() && offsets_field->size() == 2,
           "load: \"{}\": key \"{}\": expected data_offsets [begin, end], got {}", source, name,
           describe(*offsets_field));
  entry.begin = unsigned_field((*offsets_field)[0], source, name, "data_offsets");
  entry.end = unsigned_field((*offsets_field)[1], source, name, "data_offsets");
  HG_CHECK(entry.begin <= entry.end,
           "load: \"{}\": key \"{}\": expected data_offsets [begin, end] with begin <= end, "
           "got [{}, {}]",
           source, name, entry.begin, entry.end);
  HG_CHECK(entry.end <= data_bytes,
           "load: \"{}\": key \"{}\": data_offsets [{}, {}] end past the {} bytes of data "
           "after the header (a truncated file?)",
           source, name, entry.begin, entry.end, data_bytes);
  HG_CHECK(entry.end - entry.begin == nbytes,
           "load: \"{}\": key \"{}\": shape {} of {} takes {} bytes, but data_offsets [{}, {}] "
           "hold {}",
           source, name, entry.shape, dtype_name(entry.dtype), nbytes, entry.begin, entry.end,
           entry.end - entry.begin);
  return entry;
}

// Parses and checks the header text (NOTE [Safetensors validation]).
Header parse_header(std::string_view text, uint64_t data_bytes, std::string_view source) {
  HG_CHECK(!text.empty() && text.front() == '{',
           "load: \"{}\": expected the header to be a JSON object starting with '{{', got {}",
           source,
           text.empty() ? std::string("an empty header")
                        : fmt::format("byte {:#04x}", uint8_t(text[0])));
  // nlohmann keeps the last of two equal keys; a header with one twice is refused instead.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto watch_keys = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  const json header = json::parse(text.begin(), text.end(), watch_keys, /*allow_exceptions=*/false);
  HG_CHECK(!header.is_discarded(),
           "load: \"{}\": the {}-byte header is not valid JSON (or not valid UTF-8)", source,
           text.size());
  HG_CHECK(duplicate.empty(), "load: \"{}\": the header holds the key \"{}\" twice", source,
           duplicate);
  HG_CHECK(header.is_object(), "load: \"{}\": expected the header to be a JSON object, got {}",
           source, describe(header));

  Header result;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      HG_CHECK(value.is_object(),
               "load: \"{}\": expected __metadata__ to map strings to strings, got {}", source,
               describe(value));
      for (const auto& [key, item] : value.items()) {
        HG_CHECK(item.is_string(),
                 "load: \"{}\": __metadata__ key \"{}\": expected a string, got {}", source, key,
                 describe(item));
        result.metadata.emplace(key, item.get<std::string>());
      }
      continue;
    }
    result.entries.push_back(parse_entry(name, value, data_bytes, source));
  }

  // The tensors must tile the data: sorted by offset, each starts where the previous ended.
  std::sort(result.entries.begin(), result.entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expected_begin = 0;
  std::string_view previous = "the start of the data";
  for (const Entry& entry : result.entries) {
    HG_CHECK(entry.begin == expected_begin,
             "load: \"{}\": key \"{}\": data_offsets [{}, {}] {} {} (expected it to begin at "
             "byte {})",
             source, entry.name, entry.begin, entry.end,
             entry.begin < expected_begin ? "overlap" : "leave a gap after", previous,
             expected_begin);
    expected_begin = entry.end;
    previous = entry.name;
  }
  HG_CHECK(expected_begin == data_bytes,
           "load: \"{}\": the tensors cover {} bytes of data, but the file holds {} after the "
           "header (expected them to match)",
           source, expected_begin, data_bytes);
  return result;
}

// Where the bytes come from: memory or a file descriptor.
struct ByteSource {
  std::string_view memory;  // used when fd < 0
  int fd = -1;
  std::string_view name;

  void read(uint64_t offset, void* destination, uint64_t size) const {
    if (fd < 0) {
      std::memcpy(destination, memory.data() + offset, size);
      return;
    }
    char* out = static_cast<char*>(destination);
    while (size > 0) {
      const size_t chunk = size_t(std::min<uint64_t>(size, uint64_t(1) << 30));
      const ssize_t got = ::pread(fd, out, chunk, off_t(offset));
      if (got < 0 && errno == EINTR) continue;
      HG_CHECK(got > 0, "load: \"{}\": reading {} bytes at offset {} failed: {}", name, size,
               offset, got < 0 ? std::strerror(errno) : "the file ended early");
      out += got;
      offset += uint64_t(got);
      size -= uint64_t(got);
    }
  }
};

// Reads the header at the start of a source of `total` bytes, then every tensor, verifying
// the checksums when the file has them (NOTE [Safetensors checksums]).
SafetensorsContents read_contents(const ByteSource& source, uint64_t total,
                                  const LoadOptions& options) {
  HG_CHECK(total >= 8,
           "load: \"{}\": expected at least the 8-byte header length, got a file of {} bytes",
           source.name, total);
  unsigned char length_bytes[8];
  source.read(0, length_bytes, 8);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  HG_CHECK(header_bytes <= kMaxHeaderBytes,
           "load: \"{}\": the header length {} is over the {} bytes a safetensors header may take",
           source.name, header_bytes, kMaxHeaderBytes);
  HG_CHECK(header_bytes <= total - 8,
           "load: \"{}\": the header length {} runs past the end of the {}-byte file (truncated?)",
           source.name, header_bytes, total);
  std::string text(header_bytes, '\0');
  source.read(8, text.data(), header_bytes);
  const uint64_t data_start = 8 + header_bytes;
  const Header header = parse_header(text, total - data_start, source.name);

  SafetensorsContents contents;
  contents.metadata = header.metadata;
  const std::optional<StoredChecksums> stored = take_checksums(contents.metadata, source.name);
  HG_CHECK(stored || !options.require_checksum,
           "load: \"{}\": expected a file with halfgrad's checksums (require_checksum), got one "
           "without (no \"{}\" or \"{}\" in __metadata__)",
           source.name, kDataChecksumKey, kHeaderChecksumKey);
  if (stored) {
    const uint64_t computed = header_digest(header.entries, contents.metadata);
    HG_CHECK(computed == stored->header,
             "load: \"{}\": the header does not match its checksum (tensor names, dtypes, shapes, "
             "offsets and metadata: \"{}\" is {}, they hash to {}); the file is corrupted",
             source.name, kHeaderChecksumKey, hex_digest(stored->header), hex_digest(computed));
  }

  // The tensors tile the data (parse_header checked it), so hashing each as it is read, in
  // offset order, hashes the data region once.
  std::optional<DataHasher> data_hasher;
  if (stored) data_hasher.emplace();
  std::vector<Tensor> tensors;
  tensors.reserve(header.entries.size());
  for (const Entry& entry : header.entries) {
    Tensor tensor = empty(entry.shape, entry.dtype);
    const uint64_t nbytes = entry.end - entry.begin;
    if (nbytes > 0) source.read(data_start + entry.begin, tensor.data_ptr(), nbytes);
    if (data_hasher) data_hasher->update(tensor.data_ptr(), nbytes);
    tensors.push_back(std::move(tensor));
  }
  if (stored) {
    const uint64_t computed = data_hasher->digest();
    HG_CHECK(computed == stored->data,
             "load: \"{}\": the data does not match its checksum (the {} bytes after the header: "
             "\"{}\" is {}, they hash to {}); the file is corrupted",
             source.name, total - data_start, kDataChecksumKey, hex_digest(stored->data),
             hex_digest(computed));
  }

  for (size_t i = 0; i < header.entries.size(); ++i) {
    const Entry& entry = header.entries[i];
    if (entry.dtype == kBool) {
      // Read as bytes before any is used as a bool: a bool holding 2 is undefined behaviour.
      const auto* bytes = static_cast<const unsigned char*>(tensors[i].data_ptr());
      const uint64_t nbytes = entry.end - entry.begin;
      const auto bad = std::find_if(bytes, bytes + nbytes, [](unsigned char b) { return b > 1; });
      HG_CHECK(bad == bytes + nbytes,
               "load: \"{}\": key \"{}\": expected BOOL bytes to be 0 or 1, got {} at element {}",
               source.name, entry.name, int(*bad), bad - bytes);
    }
    contents.tensors.emplace(entry.name, std::move(tensors[i]));
  }
  contents.verified = stored.has_value();
  return contents;
}

// Throws unless `text` (a tensor name, a metadata key or value: a JSON string of the header)
// is UTF-8, as JSON requires; `what` names it in the error.
void check_utf8(const std::string& text, const std::string& what) {
  try {
    (void)json(text).dump();
  } catch (const json::type_error& e) {
    HG_ERROR("save: {}: expected UTF-8 text (the header is JSON), got {}", what, e.what());
  }
}

// The tensors of a save, checked, in the order their bytes are laid out, each as contiguous
// CPU memory.
std::vector<std::pair<std::string, Tensor>> prepare(const TensorMap& tensors) {
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const auto& [name, tensor] : tensors) {
    HG_CHECK(name != kMetadataKey,
             "save: \"__metadata__\" is the format's metadata key (expected a tensor name, got "
             "that one)");
    check_utf8(name, "a tensor name");
    HG_CHECK(tensor.defined(), "save: key \"{}\": expected a tensor, got an undefined one", name);
    HG_CHECK(layout_rank(tensor.dtype()) < kDTypeNames.size(),
             "save: key \"{}\": expected a dtype safetensors stores, got {}", name,
             dtype_name(tensor.dtype()));
    ordered.emplace_back(name, tensor);
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return layout_rank(a.second.dtype()) < layout_rank(b.second.dtype());
  });
  return ordered;
}

void check_user_metadata(const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "a metadata key");
    check_utf8(value, fmt::format("the value of metadata key \"{}\"", key));
    HG_CHECK(!starts_with(key, kChecksumKeyPrefix),
             "save: metadata key \"{}\": expected a key without the prefix \"{}\" (reserved for "
             "the checksums halfgrad writes)",
             key, kChecksumKeyPrefix);
  }
}

// Where the prepared tensors' bytes go: their header entries, back to back from offset 0.
std::vector<Entry> layout(const std::vector<std::pair<std::string, Tensor>>& ordered) {
  std::vector<Entry> entries;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : ordered) {
    const uint64_t nbytes = tensor.nbytes();
    entries.push_back({.name = name,
                       .dtype = tensor.dtype(),
                       .shape = tensor.sizes(),
                       .begin = offset,
                       .end = offset + nbytes});
    offset += nbytes;
  }
  return entries;
}

struct HeaderBytes {
  std::string bytes;
  // Where the data checksum's placeholder digits sit, from the start of the file.
  uint64_t data_checksum_offset;
};

// The header (length prefix included), padded with spaces to a multiple of 8 bytes as the
// Python writer does. The data checksum, unknown until the data is written, is a placeholder
// of its final width at a fixed place: __metadata__ comes first and the checksums first in it.
HeaderBytes header_bytes(const std::vector<Entry>& entries,
                         const std::map<std::string, std::string>& metadata) {
  ordered_json meta = ordered_json::object();
  meta[std::string(kDataChecksumKey)] = std::string(kDigestHexDigits, '0');
  meta[std::string(kHeaderChecksumKey)] = hex_digest(header_digest(entries, metadata));
  for (const auto& [key, value] : metadata) meta[key] = value;
  ordered_json header = ordered_json::object();
  header[std::string(kMetadataKey)] = std::move(meta);
  for (const Entry& entry : entries) {
    header[entry.name] = {{"dtype", safetensors_dtype_name(entry.dtype)},
                          {"shape", std::vector<int64_t>(entry.shape.begin(), entry.shape.end())},
                          {"data_offsets", {entry.begin, entry.end}}};
  }
  std::string text = header.dump();
  const std::string placeholder_prefix =
      fmt::format(R"({{"{}":{{"{}":")", kMetadataKey, kDataChecksumKey);
  HG_CHECK(starts_with(text, placeholder_prefix),
           "save: internal error: expected the header to start with {}, got {}", placeholder_prefix,
           text.substr(0, placeholder_prefix.size()));
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i, length >>= 8) out[size_t(i)] = char(length & 0xff);
  return {.bytes = out + text, .data_checksum_offset = 8 + placeholder_prefix.size()};
}

// Calls write(data, size) for the header and then each tensor's bytes, hashing them as they
// go, then patch(offset, data, size) to put the data checksum in the header.
template <class Write, class Patch>
void write_safetensors(const TensorMap& tensors, const std::map<std::string, std::string>& metadata,
                       Write&& write, Patch&& patch) {
  const std::vector<std::pair<std::string, Tensor>> ordered = prepare(tensors);
  check_user_metadata(metadata);
  const HeaderBytes header = header_bytes(layout(ordered), metadata);
  write(header.bytes.data(), header.bytes.size());
  DataHasher data_hasher;
  for (const auto& [name, tensor] : ordered) {
    const Tensor bytes = tensor.to(kCPU).contiguous();  // no copy for a contiguous CPU tensor
    data_hasher.update(bytes.data_ptr(), bytes.nbytes());
    write(bytes.data_ptr(), bytes.nbytes());
  }
  const std::string digest = hex_digest(data_hasher.digest());
  patch(header.data_checksum_offset, digest.data(), digest.size());
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  const size_t rank = layout_rank(dtype);
  HG_CHECK(rank < kDTypeNames.size(), "safetensors: no dtype name for {}", dtype_name(dtype));
  return kDTypeNames[rank].name;
}

DType dtype_from_safetensors_name(std::string_view name) {
  for (const DTypeName& entry : kDTypeNames) {
    if (entry.name == name) return entry.dtype;
  }
  HG_ERROR(
      "expected a dtype halfgrad reads (F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, "
      "F8_E4M3, F8_E5M2), got \"{}\"",
      name);
}

std::string to_safetensors_bytes(const TensorMap& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  std::string out;
  write_safetensors(
      tensors, metadata,
      [&](const void* data, size_t size) { out.append(static_cast<const char*>(data), size); },
      [&](uint64_t offset, const void* data, size_t size) {
        out.replace(size_t(offset), size, static_cast<const char*>(data), size);
      });
  return out;
}

SafetensorsContents from_safetensors_bytes(std::string_view bytes, std::string_view source,
                                           const LoadOptions& options) {
  return read_contents(ByteSource{.memory = bytes, .fd = -1, .name = source}, bytes.size(),
                       options);
}

SafetensorsContents load_safetensors(const std::string& path, const LoadOptions& options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HG_CHECK(fd >= 0, "load: cannot open \"{}\": {}", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  HG_CHECK(::fstat(fd, &info) == 0, "load: cannot stat \"{}\": {}", path, std::strerror(errno));
  HG_CHECK(S_ISREG(info.st_mode), "load: expected \"{}\" to be a regular file", path);
  return read_contents(ByteSource{.memory = {}, .fd = fd, .name = path}, uint64_t(info.st_size),
                       options);
}

}  // namespace io

void save(const std::string& path, const TensorMap& tensors,
          const std::map<std::string, std::string>& metadata) {
  io::AtomicFileWriter out(path);
  io::write_safetensors(
      tensors, metadata, [&](const void* data, size_t size) { out.write(data, size); },
      [&](uint64_t offset, const void* data, size_t size) { out.write_at(offset, data, size); });
  out.commit();
}

TensorMap load(const std::string& path, const io::LoadOptions& options) {
  return io::load_safetensors(path, options).tensors;
}

}  // namespace hg
