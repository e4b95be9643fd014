// IDX files (idx.h): the header, big-endian elements, gzip through zlib's gz* functions.
#include "halfgrad/io/idx.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include <zlib.h>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"

namespace hg::io {

namespace {

struct IdxType {
  uint8_t code;
  DType dtype;
};
constexpr std::array<IdxType, 6> kIdxTypes = {{{0x08, kUInt8},
                                               {0x09, kInt8},
                                               {0x0B, kInt16},
                                               {0x0C, kInt32},
                                               {0x0D, kFloat32},
                                               {0x0E, kFloat64}}};

// Deflate's best ratio is 1032:1, so a gzipped file cannot hold more than this many bytes per
// byte of its own.
constexpr uint64_t kMaxInflateRatio = 1032;

// A plain or gzipped file, read in order; gzread passes a plain file through as it is.
class IdxInput {
 public:
  explicit IdxInput(const std::string& path) : path_(path) {
    struct stat info {};
    HG_CHECK(::stat(path.c_str(), &info) == 0, "read_idx: cannot open \"{}\": {}", path,
             std::strerror(errno));
    HG_CHECK(S_ISREG(info.st_mode), "read_idx: expected \"{}\" to be a regular file", path);
    file_size_ = uint64_t(info.st_size);
    file_ = ::gzopen(path.c_str(), "rb");
    HG_CHECK(file_ != nullptr, "read_idx: cannot open \"{}\": {}", path,
             errno != 0 ? std::strerror(errno) : "out of memory");
    ::gzbuffer(file_, 1 << 17);  // before the first read, which gzdirect makes
    gzipped_ = ::gzdirect(file_) == 0;
  }
  IdxInput(const IdxInput&) = delete;
  IdxInput& operator=(const IdxInput&) = delete;
  ~IdxInput() { ::gzclose_r(file_); }

  // Whether the file starts with gzip's magic (gzdirect looks at the first bytes).
  bool gzipped() const { return gzipped_; }
  uint64_t file_size() const { return file_size_; }

  // Reads up to `count` bytes; returns how many (fewer only at the end of the data). A gzip
  // stream that is corrupted or cut short is an error.
  uint64_t read(void* destination, uint64_t count) {
    auto* out = static_cast<char*>(destination);
    uint64_t done = 0;
    while (done < count) {
      const unsigned chunk = unsigned(std::min<uint64_t>(count - done, uint64_t(1) << 30));
      const int got = ::gzread(file_, out + done, chunk);
      if (got < 0 || (got == 0 && !::gzeof(file_))) fail_stream();
      if (got == 0) break;
      done += uint64_t(got);
    }
    // A gzip stream cut short reads as a short read with an error set.
    int error = Z_OK;
    ::gzerror(file_, &error);
    if (error != Z_OK) fail_stream();
    return done;
  }

 private:
  [[noreturn]] void fail_stream() {
    int error = Z_OK;
    const char* message = ::gzerror(file_, &error);
    HG_ERROR("read_idx: \"{}\" is corrupted or truncated: the gzip stream could not be read ({})",
             path_, error == Z_ERRNO ? std::strerror(errno) : message);
  }

  std::string path_;
  gzFile file_ = nullptr;
  uint64_t file_size_ = 0;
  bool gzipped_ = false;
};

}  // namespace

Tensor read_idx(const std::string& path) {
  IdxInput input(path);
  const bool gzipped = input.gzipped();
  uint8_t magic[4] = {};
  const uint64_t magic_bytes = input.read(magic, 4);
  HG_CHECK(magic_bytes == 4 && magic[0] == 0 && magic[1] == 0,
           "read_idx: \"{}\": expected an IDX file (magic 00 00 <type> <dims>), got {}", path,
           magic_bytes < 4 ? fmt::format("{} bytes", magic_bytes)
                           : fmt::format("{:02x} {:02x} {:02x} {:02x}", magic[0], magic[1],
                                         magic[2], magic[3]));
  const auto type = std::find_if(kIdxTypes.begin(), kIdxTypes.end(),
                                 [&](const IdxType& t) { return t.code == magic[2]; });
  HG_CHECK(type != kIdxTypes.end(),
           "read_idx: \"{}\": expected an IDX type 0x08 (uint8), 0x09 (int8), 0x0B (int16), 0x0C "
           "(int32), 0x0D (float32) or 0x0E (float64), got 0x{:02X}",
           path, magic[2]);
  const int dims = magic[3];
  std::vector<uint8_t> dim_bytes(size_t(dims) * 4);
  const uint64_t got_dims = input.read(dim_bytes.data(), dim_bytes.size());
  HG_CHECK(got_dims == dim_bytes.size(),
           "read_idx: \"{}\" is truncated: expected {} dimensions ({} bytes) after the magic, got "
           "{} bytes",
           path, dims, dim_bytes.size(), got_dims);
  Shape shape;
  uint64_t count = 1;
  for (int d = 0; d < dims; ++d) {
    const uint8_t* p = &dim_bytes[size_t(d) * 4];
    const uint32_t size =
        (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
    shape.push_back(int64_t(size));
    HG_CHECK(!__builtin_mul_overflow(count, uint64_t(size), &count),
             "read_idx: \"{}\": the dimensions {} have more than 2^64 elements", path, shape);
  }
  const uint64_t item_size = element_size(type->dtype);
  uint64_t data_bytes = 0;
  HG_CHECK(!__builtin_mul_overflow(count, item_size, &data_bytes),
           "read_idx: \"{}\": the dimensions {} of {} elements need more than 2^64 bytes", path,
           shape, dtype_name(type->dtype));
  const uint64_t header_bytes = 4 + dim_bytes.size();
  if (gzipped) {
    HG_CHECK(data_bytes / kMaxInflateRatio <= input.file_size(),
             "read_idx: \"{}\": the dimensions {} need {} bytes of {} data, more than the gzipped "
             "file of {} bytes can inflate to; the file is corrupted",
             path, shape, data_bytes, dtype_name(type->dtype), input.file_size());
  } else {
    HG_CHECK(data_bytes == input.file_size() - header_bytes,
             "read_idx: \"{}\": the dimensions {} need {} bytes of {} data after the {}-byte "
             "header, the file has {}; it is corrupted or truncated",
             path, shape, data_bytes, dtype_name(type->dtype), header_bytes,
             input.file_size() - header_bytes);
  }

  Tensor tensor = empty(shape, type->dtype);
  auto* bytes = static_cast<unsigned char*>(data_bytes > 0 ? tensor.data_ptr() : nullptr);
  const uint64_t got = data_bytes > 0 ? input.read(bytes, data_bytes) : 0;
  HG_CHECK(
      got == data_bytes,
      "read_idx: \"{}\" is truncated: the dimensions {} need {} bytes of data, the file has {}",
      path, shape, data_bytes, got);
  unsigned char extra = 0;
  HG_CHECK(input.read(&extra, 1) == 0,
           "read_idx: \"{}\": expected the data to end after the {} bytes the dimensions {} need, "
           "got more",
           path, data_bytes, shape);
  for (uint64_t i = 0; item_size > 1 && i < data_bytes; i += item_size) {
    std::reverse(bytes + i, bytes + i + item_size);  // big-endian to the host's order
  }
  return tensor;
}

}  // namespace hg::io
