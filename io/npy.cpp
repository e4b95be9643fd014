// NumPy's .npy and .npz files (npy.h): the header's dict literal, type codes, byte order,
// Fortran order, and the .npz archive through io/zip.h.
#include "halfgrad/io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/io/atomic_file.h"
#include "halfgrad/io/zip.h"

namespace hg::io {

// The host's byte order is little-endian (NOTE [Little-endian hosts] in io/safetensors.cpp);
// '=' and halfgrad's own files mean little-endian.
static_assert(std::endian::native == std::endian::little,
              "halfgrad's npy reader and writer assume a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr uint64_t kVersion1PrefixBytes = 10;  // magic, 2 version bytes, 2 length bytes
constexpr uint64_t kVersion2PrefixBytes = 12;  // magic, 2 version bytes, 4 length bytes
constexpr uint64_t kDataAlignment = 64;        // numpy's ARRAY_ALIGN
constexpr size_t kGrowthAxisMaxDigits = 21;    // numpy's GROWTH_AXIS_MAX_DIGITS

struct TypeCode {
  DType dtype;
  std::string_view code;  // kind and size, after the byte order
};
constexpr std::array<TypeCode, 9> kTypeCodes = {{{kFloat16, "f2"},
                                                 {kFloat32, "f4"},
                                                 {kFloat64, "f8"},
                                                 {kInt8, "i1"},
                                                 {kInt16, "i2"},
                                                 {kInt32, "i4"},
                                                 {kInt64, "i8"},
                                                 {kUInt8, "u1"},
                                                 {kBool, "b1"}}};

// What a type code halfgrad does not read is, for the error.
std::string describe_unsupported(std::string_view code) {
  if (code.empty()) return "an empty type code";
  switch (code[0]) {
    case 'c':
      return "complex numbers";
    case 'U':
      return "a Unicode string";
    case 'S':
    case 'a':
      return "a byte string";
    case 'O':
      return "Python objects (pickled)";
    case 'V':
      return "raw or structured records (numpy has no bfloat16 type code)";
    case 'M':
      return "datetime64";
    case 'm':
      return "timedelta64";
    case 'u':
      return "an unsigned integer wider than a byte";
    case 'f':
      return "a floating type of another width";
    case 'i':
      return "an integer of another width";
    default:
      return "an unknown type code";
  }
}

constexpr std::string_view kSupportedCodes = "f2, f4, f8, i1, i2, i4, i8, u1, b1";

std::string_view type_code_of(DType dtype) {
  for (const TypeCode& entry : kTypeCodes) {
    if (entry.dtype == dtype) return entry.code;
  }
  HG_ERROR(
      "save_npy: expected a dtype numpy has (float16, float32, float64, int8, int16, int32, "
      "int64, uint8, bool), got {}; numpy has no type code for it, convert the tensor "
      "first (e.g. .to(kFloat32))",
      dtype_name(dtype));
}

// Bytes to read from: a file (pread) or memory, every read within `size`.
struct Source {
  std::string name;
  uint64_t size;
  std::function<void(uint64_t offset, void* destination, uint64_t count)> read;
};

// ---- the header: a Python dict literal ----

struct Header {
  DType dtype;
  bool swap_bytes;  // big-endian elements
  bool fortran_order;
  Shape shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  Header parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<Shape> shape;
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = parse_string("a key");
      expect(':');
      skip_space();
      if (key == "descr") {
        fail_if(descr.has_value(), "the key 'descr' once", "it twice");
        if (peek() == '[') fail("a simple dtype in 'descr'", "a list (a structured dtype)");
        descr = parse_string("the dtype string of 'descr'");
      } else if (key == "fortran_order") {
        fail_if(fortran_order.has_value(), "the key 'fortran_order' once", "it twice");
        fortran_order = parse_bool();
      } else if (key == "shape") {
        fail_if(shape.has_value(), "the key 'shape' once", "it twice");
        shape = parse_shape();
      } else {
        fail("only the keys 'descr', 'fortran_order' and 'shape'", "the key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      skip_space();
      if (peek() != '}') fail("',' or '}' after a value", describe_here());
    }
    ++at_;  // '}'
    skip_space();
    fail_if(at_ != text_.size(), "only spaces and a newline after the dict", describe_here());
    fail_if(!descr || !fortran_order || !shape, "the keys 'descr', 'fortran_order' and 'shape'",
            fmt::format("a dict without '{}'", !descr           ? "descr"
                                               : !fortran_order ? "fortran_order"
                                                                : "shape"));
    Header header{
        .dtype = kFloat32, .swap_bytes = false, .fortran_order = *fortran_order, .shape = *shape};
    decode_descr(*descr, header);
    return header;
  }

 private:
  [[noreturn]] void fail(std::string_view expected, std::string_view got) const {
    HG_ERROR(
        "load_npy: \"{}\": the header {{...}} is not one numpy writes: expected {}, got {} "
        "(header: {})",
        source_, expected, got, shown_header());
  }
  void fail_if(bool condition, std::string_view expected, std::string_view got) const {
    if (condition) fail(expected, got);
  }
  std::string shown_header() const {
    std::string shown(text_.substr(0, 200));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    return shown + (text_.size() > 200 ? "..." : "");
  }
  std::string describe_here() const {
    return at_ < text_.size() ? fmt::format("'{}' at character {}", text_[at_], at_)
                              : std::string("the end of the header");
  }
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t' || text_[at_] == '\r')) {
      ++at_;
    }
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(fmt::format("'{}'", c), describe_here());
    ++at_;
  }
  std::string parse_string(std::string_view what) {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(what, describe_here());
    const size_t end = text_.find(quote, at_ + 1);
    if (end == std::string_view::npos) fail(fmt::format("{} to end", what), "no closing quote");
    std::string value(text_.substr(at_ + 1, end - at_ - 1));
    at_ = end + 1;
    return value;
  }
  bool parse_bool() {
    if (text_.substr(at_).starts_with("True")) {
      at_ += 4;
      return true;
    }
    if (text_.substr(at_).starts_with("False")) {
      at_ += 5;
      return false;
    }
    fail("True or False for 'fortran_order'", describe_here());
  }
  Shape parse_shape() {
    expect('(');
    Shape shape;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("a non-negative integer in 'shape'", describe_here());
      int64_t dim = 0;
      while (peek() >= '0' && peek() <= '9') {
        const int digit = peek() - '0';
        if (dim > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          fail("a dimension below 2^63 in 'shape'", "a larger one");
        }
        dim = dim * 10 + digit;
        ++at_;
      }
      if (peek() == 'L') ++at_;  // Python 2's long literals
      shape.push_back(dim);
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      skip_space();
      if (peek() != ')') fail("',' or ')' in 'shape'", describe_here());
    }
    ++at_;  // ')'
    return shape;
  }
  void decode_descr(const std::string& descr, Header& header) const {
    const char order = descr.empty() ? '\0' : descr[0];
    const bool has_order = order == '<' || order == '>' || order == '|' || order == '=';
    const std::string_view code = std::string_view(descr).substr(has_order ? 1 : 0);
    const auto found = std::find_if(kTypeCodes.begin(), kTypeCodes.end(),
                                    [&](const TypeCode& entry) { return entry.code == code; });
    if (found == kTypeCodes.end()) {
      HG_ERROR(
          "load_npy: \"{}\": expected a dtype halfgrad reads ({}, with a byte order <, >, | "
          "or =), got '{}' ({})",
          source_, kSupportedCodes, descr, describe_unsupported(code));
    }
    const size_t item_size = element_size(found->dtype);
    if (!has_order || (order == '|' && item_size > 1)) {
      HG_ERROR(
          "load_npy: \"{}\": expected a byte order ('<' or '>') in the dtype '{}' of "
          "{}-byte elements, got {}",
          source_, descr, item_size, has_order ? "'|' (not applicable)" : "none");
    }
    header.dtype = found->dtype;
    header.swap_bytes = order == '>' && item_size > 1;
  }

  std::string_view text_;
  const std::string& source_;
  size_t at_ = 0;
};

uint32_t little_endian(const uint8_t* p, int bytes) {
  uint32_t value = 0;
  for (int i = bytes; i-- > 0;) value = (value << 8) | p[i];
  return value;
}

Tensor read_npy(const Source& source) {
  const std::string& name = source.name;
  HG_CHECK(source.size >= kVersion1PrefixBytes,
           "load_npy: \"{}\": expected an .npy file (at least {} bytes), got {} bytes", name,
           kVersion1PrefixBytes, source.size);
  uint8_t prefix[kVersion2PrefixBytes] = {};
  source.read(0, prefix, std::min<uint64_t>(source.size, kVersion2PrefixBytes));
  HG_CHECK(std::memcmp(prefix, kMagic.data(), kMagic.size()) == 0,
           "load_npy: \"{}\": expected an .npy file (magic \\x93NUMPY), got the bytes {:02x}", name,
           fmt::join(prefix, prefix + kMagic.size(), " "));
  const int major = prefix[6], minor = prefix[7];
  HG_CHECK((major == 1 || major == 2 || major == 3) && minor == 0,
           "load_npy: \"{}\": expected format version 1.0, 2.0 or 3.0, got {}.{}", name, major,
           minor);
  const uint64_t prefix_bytes = major == 1 ? kVersion1PrefixBytes : kVersion2PrefixBytes;
  HG_CHECK(source.size >= prefix_bytes,
           "load_npy: \"{}\" is truncated: expected at least {} bytes, got {}", name, prefix_bytes,
           source.size);
  const uint64_t header_bytes = little_endian(prefix + 8, major == 1 ? 2 : 4);
  HG_CHECK(header_bytes <= source.size - prefix_bytes,
           "load_npy: \"{}\" is truncated: expected a header of {} bytes after the first {}, the "
           "file has {} bytes",
           name, header_bytes, prefix_bytes, source.size);
  std::string text(size_t(header_bytes), '\0');
  source.read(prefix_bytes, text.data(), header_bytes);
  const Header header = HeaderParser(text, name).parse();

  const uint64_t item_size = element_size(header.dtype);
  uint64_t count = 1;
  for (int64_t dim : header.shape) {
    HG_CHECK(!__builtin_mul_overflow(count, uint64_t(dim), &count),
             "load_npy: \"{}\": the shape {} has more elements than 2^64", name, header.shape);
  }
  uint64_t data_bytes = 0;
  HG_CHECK(!__builtin_mul_overflow(count, item_size, &data_bytes),
           "load_npy: \"{}\": the shape {} of {}-byte elements has more than 2^64 bytes", name,
           header.shape, item_size);
  const uint64_t data_offset = prefix_bytes + header_bytes;
  HG_CHECK(data_bytes == source.size - data_offset,
           "load_npy: \"{}\": expected {} bytes of data after the header (shape {}, {} bytes "
           "each), got {}",
           name, data_bytes, header.shape, item_size, source.size - data_offset);

  // A Fortran-ordered array's bytes are the row-major layout of its transpose.
  Shape stored_shape = header.shape;
  if (header.fortran_order) std::reverse(stored_shape.begin(), stored_shape.end());
  Tensor tensor = empty(stored_shape, header.dtype);
  auto* bytes = static_cast<unsigned char*>(data_bytes > 0 ? tensor.data_ptr() : nullptr);
  if (data_bytes > 0) source.read(data_offset, bytes, data_bytes);
  if (header.swap_bytes) {
    for (uint64_t i = 0; i < data_bytes; i += item_size)
      std::reverse(bytes + i, bytes + i + item_size);
  }
  if (header.dtype == kBool && data_bytes > 0) {
    // Read as bytes before any is used as a bool: a bool holding 2 is undefined behaviour.
    const auto* bad =
        std::find_if(bytes, bytes + data_bytes, [](unsigned char b) { return b > 1; });
    HG_CHECK(bad == bytes + data_bytes,
             "load_npy: \"{}\": expected bool bytes to be 0 or 1, got {} at element {}", name,
             int(*bad), bad - bytes);
  }
  if (header.fortran_order && header.shape.size() > 1) {
    Shape reverse_dims;
    for (int64_t d = int64_t(header.shape.size()); d-- > 0;) reverse_dims.push_back(d);
    tensor = tensor.permute(reverse_dims).contiguous();
  }
  return tensor;
}

// numpy's header text: the dict with its keys sorted, spare spaces for the first dimension to
// grow, then spaces and a newline up to a multiple of 64 bytes from the file's start (at least
// one space).
std::string header_text(std::string_view descr, const Shape& shape, uint64_t prefix_bytes) {
  std::string shape_text;
  if (shape.size() == 1) {
    shape_text = fmt::format("({},)", shape[0]);
  } else {
    shape_text = fmt::format("({})", fmt::join(shape.begin(), shape.end(), ", "));
  }
  std::string text =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_text);
  if (!shape.empty()) {
    const size_t digits = fmt::formatted_size("{}", shape[0]);
    text.append(kGrowthAxisMaxDigits - std::min(digits, kGrowthAxisMaxDigits), ' ');
  }
  const uint64_t unpadded = prefix_bytes + text.size() + 1;              // + the newline
  text.append(size_t(kDataAlignment - unpadded % kDataAlignment), ' ');  // 1 to 64, as numpy
  text.push_back('\n');
  return text;
}

// Calls write(data, size) for the whole .npy file of `tensor`.
template <class Write>
void write_npy(const Tensor& tensor, Write&& write) {
  HG_CHECK(tensor.defined(), "save_npy: expected a tensor, got an undefined one");
  const std::string descr = std::string(element_size(tensor.dtype()) == 1 ? "|" : "<") +
                            std::string(type_code_of(tensor.dtype()));
  const Tensor values = tensor.to(kCPU).contiguous();  // no copy for a contiguous CPU tensor
  std::string text = header_text(descr, values.sizes(), kVersion1PrefixBytes);
  int major = 1;
  if (text.size() > 0xFFFF) {
    major = 2;
    text = header_text(descr, values.sizes(), kVersion2PrefixBytes);
  }
  std::string prefix(kMagic);
  prefix.push_back(char(major));
  prefix.push_back('\0');
  const uint64_t length = text.size();
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) prefix.push_back(char((length >> (8 * i)) & 0xff));
  write(prefix.data(), prefix.size());
  write(text.data(), text.size());
  if (values.nbytes() > 0) write(values.data_ptr(), values.nbytes());
}

}  // namespace

Tensor npy_from_bytes(std::span<const std::byte> bytes, std::string_view source) {
  return read_npy(Source{.name = std::string(source),
                         .size = bytes.size(),
                         .read = [&](uint64_t offset, void* destination, uint64_t count) {
                           std::memcpy(destination, bytes.data() + offset, size_t(count));
                         }});
}

std::vector<std::byte> npy_to_bytes(const Tensor& tensor) {
  std::vector<std::byte> out;
  write_npy(tensor, [&](const void* data, size_t size) {
    const auto* p = static_cast<const std::byte*>(data);
    out.insert(out.end(), p, p + size);
  });
  return out;
}

Tensor load_npy(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HG_CHECK(fd >= 0, "load_npy: cannot open \"{}\": {}", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  HG_CHECK(::fstat(fd, &info) == 0 && S_ISREG(info.st_mode),
           "load_npy: expected \"{}\" to be a regular file", path);
  return read_npy(
      Source{.name = path,
             .size = uint64_t(info.st_size),
             .read = [&](uint64_t offset, void* destination, uint64_t count) {
               auto* out = static_cast<char*>(destination);
               while (count > 0) {
                 const size_t chunk = size_t(std::min<uint64_t>(count, uint64_t(1) << 30));
                 const ssize_t got = ::pread(fd, out, chunk, off_t(offset));
                 if (got < 0 && errno == EINTR) continue;
                 HG_CHECK(got > 0, "load_npy: \"{}\": reading at offset {} failed: {}", path,
                          offset, got < 0 ? std::strerror(errno) : "unexpected end of file");
                 out += got;
                 offset += uint64_t(got);
                 count -= uint64_t(got);
               }
             }});
}

void save_npy(const std::string& path, const Tensor& tensor) {
  HG_CHECK(tensor.defined(), "save_npy: \"{}\": expected a tensor, got an undefined one", path);
  (void)type_code_of(tensor.dtype());  // refuse before the file is created
  AtomicFileWriter out(path);
  write_npy(tensor, [&](const void* data, size_t size) { out.write(data, size); });
  out.commit();
}

std::map<std::string, Tensor> load_npz(const std::string& path) {
  const ZipReader archive(path);
  std::map<std::string, Tensor> tensors;
  for (const ZipEntry& entry : archive.entries()) {
    HG_CHECK(entry.name.size() > 4 && entry.name.ends_with(".npy"),
             "load_npz: \"{}\": expected entries named \"<key>.npy\", got \"{}\"", path,
             entry.name);
    const std::string key = entry.name.substr(0, entry.name.size() - 4);
    if (tensors.count(key) > 0) continue;  // a name given twice: ZipReader reads the last
    const std::vector<std::byte> bytes = archive.read(entry.name);
    tensors.emplace(key, npy_from_bytes(bytes, fmt::format("{}: entry {}", path, entry.name)));
  }
  return tensors;
}

void save_npz(const std::string& path, const std::map<std::string, Tensor>& tensors,
              bool compressed) {
  // Checked before the file is created, so a refused save leaves the destination as it was.
  for (const auto& [key, tensor] : tensors) {
    HG_CHECK(!key.empty(), "save_npz: \"{}\": expected non-empty keys, got an empty one", path);
    HG_CHECK(tensor.defined(),
             "save_npz: \"{}\": key \"{}\": expected a tensor, got an "
             "undefined one",
             path, key);
    (void)type_code_of(tensor.dtype());
  }
  ZipWriter archive(path, compressed);
  for (const auto& [key, tensor] : tensors) archive.add(key + ".npy", npy_to_bytes(tensor));
  archive.close();
}

}  // namespace hg::io
