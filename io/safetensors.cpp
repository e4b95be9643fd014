// The safetensors format (safetensors.h): the JSON header, dtype names, and reading and
// writing tensors from files and memory.
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
#include <set>
#include <utility>
#include <vector>

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
constexpr std::array<DTypeName, 7> kDTypeNames = {{{kInt64, "I64"},
                                                   {kFloat64, "F64"},
                                                   {kFloat32, "F32"},
                                                   {kInt32, "I32"},
                                                   {kBFloat16, "BF16"},
                                                   {kFloat16, "F16"},
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

// Reads the header at the start of a source of `total` bytes, then every tensor.
SafetensorsContents read_contents(const ByteSource& source, uint64_t total) {
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
  for (const Entry& entry : header.entries) {
    Tensor tensor = empty(entry.shape, entry.dtype);
    const uint64_t nbytes = entry.end - entry.begin;
    if (nbytes > 0) source.read(data_start + entry.begin, tensor.data_ptr(), nbytes);
    if (entry.dtype == kBool) {
      // Read as bytes before any is used as a bool: a bool holding 2 is undefined behaviour.
      const auto* bytes = static_cast<const unsigned char*>(tensor.data_ptr());
      const auto bad = std::find_if(bytes, bytes + nbytes, [](unsigned char b) { return b > 1; });
      HG_CHECK(bad == bytes + nbytes,
               "load: \"{}\": key \"{}\": expected BOOL bytes to be 0 or 1, got {} at element {}",
               source.name, entry.name, int(*bad), bad - bytes);
    }
    contents.tensors.emplace(entry.name, std::move(tensor));
  }
  return contents;
}

// The tensors of a save, checked, in the order their bytes are laid out, each as contiguous
// CPU memory.
std::vector<std::pair<std::string, Tensor>> prepare(const TensorMap& tensors) {
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const auto& [name, tensor] : tensors) {
    HG_CHECK(name != kMetadataKey,
             "save: \"__metadata__\" is the format's metadata key (expected a tensor name, got "
             "that one)");
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

// The header (length prefix included) of the prepared tensors, padded with spaces to a
// multiple of 8 bytes as the Python writer does.
std::string header_bytes(const std::vector<std::pair<std::string, Tensor>>& ordered,
                         const std::map<std::string, std::string>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : ordered) {
    const uint64_t nbytes = tensor.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", std::vector<int64_t>(tensor.sizes().begin(), tensor.sizes().end())},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i, length >>= 8) out[size_t(i)] = char(length & 0xff);
  return out + text;
}

// Calls write(data, size) for the header and then each tensor's bytes.
template <class Write>
void write_safetensors(const TensorMap& tensors, const std::map<std::string, std::string>& metadata,
                       Write&& write) {
  const std::vector<std::pair<std::string, Tensor>> ordered = prepare(tensors);
  const std::string header = header_bytes(ordered, metadata);
  write(header.data(), header.size());
  for (const auto& [name, tensor] : ordered) {
    const Tensor bytes = tensor.to(kCPU).contiguous();
    write(bytes.data_ptr(), bytes.nbytes());
  }
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
  HG_ERROR("expected a dtype halfgrad reads (F32, F16, BF16, F64, I64, I32, BOOL), got \"{}\"",
           name);
}

std::string to_safetensors_bytes(const TensorMap& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  std::string out;
  write_safetensors(tensors, metadata, [&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
  });
  return out;
}

SafetensorsContents from_safetensors_bytes(std::string_view bytes, std::string_view source) {
  return read_contents(ByteSource{.memory = bytes, .fd = -1, .name = source}, bytes.size());
}

SafetensorsContents load_safetensors(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HG_CHECK(fd >= 0, "load: cannot open \"{}\": {}", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  HG_CHECK(::fstat(fd, &info) == 0, "load: cannot stat \"{}\": {}", path, std::strerror(errno));
  HG_CHECK(S_ISREG(info.st_mode), "load: expected \"{}\" to be a regular file", path);
  return read_contents(ByteSource{.memory = {}, .fd = fd, .name = path}, uint64_t(info.st_size));
}

}  // namespace io

void save(const std::string& path, const TensorMap& tensors,
          const std::map<std::string, std::string>& metadata) {
  io::AtomicFileWriter out(path);
  io::write_safetensors(tensors, metadata,
                        [&](const void* data, size_t size) { out.write(data, size); });
  out.commit();
}

TensorMap load(const std::string& path) { return io::load_safetensors(path).tensors; }

}  // namespace hg
