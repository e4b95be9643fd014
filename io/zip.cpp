// ZIP archives (zip.h): the central directory and ZIP64 records, stored and deflated entries
// through zlib, checked against their sizes and CRC-32.
#include "halfgrad/io/zip.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>

#include <zlib.h>

#include "halfgrad/core/error.h"
#include "halfgrad/io/atomic_file.h"

namespace hg::io {

namespace {

// Record signatures and fixed sizes (APPNOTE 4.3).
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint64_t kLocalHeaderBytes = 30;
constexpr uint64_t kCentralHeaderBytes = 46;
constexpr uint64_t kEndBytes = 22;
constexpr uint64_t kZip64EndBytes = 56;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint64_t kMaxCommentBytes = 0xFFFF;
constexpr uint16_t kZip64ExtraTag = 0x0001;

// A classic field holding this value defers to the ZIP64 extra field or end record.
constexpr uint32_t kZip64Marker32 = 0xFFFFFFFF;
constexpr uint16_t kZip64Marker16 = 0xFFFF;

constexpr uint16_t kMethodStored = 0;
constexpr uint16_t kMethodDeflate = 8;
constexpr uint16_t kFlagEncrypted = 1 << 0;
constexpr uint16_t kFlagStrongEncryption = 1 << 6;
constexpr uint16_t kFlagUtf8Name = 1 << 11;

// zlib counts bytes in 32-bit uInt: larger buffers go through it in pieces.
constexpr uint64_t kZlibChunk = uint64_t(1) << 30;

uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
uint64_t get64(const uint8_t* p) { return uint64_t(get32(p)) | (uint64_t(get32(p + 4)) << 32); }

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(uint8_t(v));
  out.push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, uint16_t(v));
  put16(out, uint16_t(v >> 16));
}
void put64(std::vector<uint8_t>& out, uint64_t v) {
  put32(out, uint32_t(v));
  put32(out, uint32_t(v >> 32));
}

uint32_t crc32_of(std::span<const std::byte> bytes) {
  return uint32_t(::crc32_z(::crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                            bytes.size()));
}

// A file opened for reading, every read bounds-checked against its size.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    HG_CHECK(fd_ >= 0, "zip: cannot open \"{}\": {}", path, std::strerror(errno));
    struct stat info {};
    const bool stat_failed = ::fstat(fd_, &info) != 0;
    if (stat_failed || !S_ISREG(info.st_mode)) {
      const int error = errno;
      ::close(fd_);
      HG_ERROR("zip: \"{}\": expected a regular file, got {}", path,
               stat_failed ? std::strerror(error) : "a folder or another kind of file");
    }
    size_ = uint64_t(info.st_size);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { ::close(fd_); }

  uint64_t size() const { return size_; }

  // `what` names the record being read, for the error.
  void read(uint64_t offset, void* destination, uint64_t count, const std::string& what) const {
    HG_CHECK(offset <= size_ && count <= size_ - offset,
             "zip: \"{}\" is truncated or corrupted: {} needs bytes [{}, {}), the file has {}",
             path_, what, offset, offset + std::min(count, size_), size_);
    auto* out = static_cast<char*>(destination);
    while (count > 0) {
      const size_t chunk = size_t(std::min(count, kZlibChunk));
      const ssize_t got = ::pread(fd_, out, chunk, off_t(offset));
      if (got < 0 && errno == EINTR) continue;
      HG_CHECK(got > 0, "zip: \"{}\": reading {} at offset {} failed: {}", path_, what, offset,
               got < 0 ? std::strerror(errno) : "unexpected end of file");
      out += got;
      offset += uint64_t(got);
      count -= uint64_t(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The end-of-central-directory fields halfgrad uses, ZIP64's where present.
struct CentralDirectory {
  uint64_t entry_count;
  uint64_t size;
  uint64_t offset;
  uint64_t end;  // where the records after it begin (the ZIP64 end record or the classic one)
};

CentralDirectory find_central_directory(const InputFile& file, const std::string& path) {
  HG_CHECK(file.size() >= kEndBytes,
           "zip: \"{}\": expected a ZIP archive (at least {} bytes), got a file of {} bytes", path,
           kEndBytes, file.size());
  const uint64_t tail_size = std::min(file.size(), kEndBytes + kMaxCommentBytes);
  const uint64_t tail_start = file.size() - tail_size;
  std::vector<uint8_t> tail(tail_size);
  file.read(tail_start, tail.data(), tail_size, "the end of the archive");
  // The last signature whose record and comment fit before the end of the file.
  std::optional<uint64_t> end_in_tail;
  for (uint64_t i = tail_size - kEndBytes + 1; i-- > 0;) {
    if (get32(&tail[i]) == kEndSignature && get16(&tail[i + 20]) <= tail_size - i - kEndBytes) {
      end_in_tail = i;
      break;
    }
  }
  HG_CHECK(end_in_tail.has_value(),
           "zip: \"{}\": expected a ZIP archive (an end-of-central-directory record, signature "
           "PK\\5\\6, in its last {} bytes), found none: not a ZIP file, or truncated",
           path, tail_size);
  const uint8_t* end = &tail[*end_in_tail];
  const uint64_t end_offset = tail_start + *end_in_tail;
  const uint16_t disk = get16(end + 4), directory_disk = get16(end + 6);
  CentralDirectory directory{.entry_count = get16(end + 10),
                             .size = get32(end + 12),
                             .offset = get32(end + 16),
                             .end = end_offset};
  const uint16_t entries_on_disk = get16(end + 8);

  // A ZIP64 locator right before the classic record points to the ZIP64 end record.
  if (end_offset >= kZip64LocatorBytes) {
    uint8_t locator[kZip64LocatorBytes];
    file.read(end_offset - kZip64LocatorBytes, locator, kZip64LocatorBytes,
              "the ZIP64 end locator");
    if (get32(locator) == kZip64LocatorSignature) {
      const uint64_t record_offset = get64(locator + 8);
      HG_CHECK(get32(locator + 4) == 0 && get32(locator + 16) <= 1,
               "zip: \"{}\": expected a single-file archive, got a ZIP64 locator for disk {} of "
               "{} (split archives are not supported)",
               path, get32(locator + 4), get32(locator + 16));
      HG_CHECK(record_offset <= end_offset - kZip64LocatorBytes &&
                   end_offset - kZip64LocatorBytes - record_offset >= kZip64EndBytes,
               "zip: \"{}\" is corrupted: expected the ZIP64 end record ({} bytes) before its "
               "locator at offset {}, the locator gives offset {}",
               path, kZip64EndBytes, end_offset - kZip64LocatorBytes, record_offset);
      uint8_t record[kZip64EndBytes];
      file.read(record_offset, record, kZip64EndBytes, "the ZIP64 end record");
      HG_CHECK(get32(record) == kZip64EndSignature,
               "zip: \"{}\" is corrupted: expected the ZIP64 end record signature PK\\6\\6 at "
               "offset {}, got 0x{:08x}",
               path, record_offset, get32(record));
      HG_CHECK(get32(record + 16) == 0 && get32(record + 20) == 0 &&
                   get64(record + 24) == get64(record + 32),
               "zip: \"{}\": expected a single-file archive, got a ZIP64 end record for disk "
               "{} (split archives are not supported)",
               path, get32(record + 16));
      directory = {.entry_count = get64(record + 32),
                   .size = get64(record + 40),
                   .offset = get64(record + 48),
                   .end = record_offset};
      return directory;
    }
  }
  HG_CHECK(disk == 0 && directory_disk == 0 && entries_on_disk == directory.entry_count,
           "zip: \"{}\": expected a single-file archive, got an end record for disk {} "
           "(split archives are not supported)",
           path, disk);
  return directory;
}

// The fields of a ZIP64 extra field (tag 0x0001) that replace classic fields holding the marker,
// in their order: size, compressed size, local header offset.
void apply_zip64_extra(const uint8_t* extra, uint64_t extra_size, ZipEntry& entry,
                       bool size_deferred, bool compressed_deferred, bool offset_deferred,
                       const std::string& path) {
  uint64_t at = 0;
  while (extra_size - at >= 4) {
    const uint16_t tag = get16(extra + at);
    const uint16_t data_size = get16(extra + at + 2);
    at += 4;
    HG_CHECK(data_size <= extra_size - at,
             "zip: \"{}\" is corrupted: entry \"{}\": an extra field (tag 0x{:04x}) of {} bytes "
             "runs past the {} bytes of its extra data",
             path, entry.name, tag, data_size, extra_size);
    if (tag == kZip64ExtraTag) {
      const uint8_t* field = extra + at;
      uint64_t left = data_size;
      auto take = [&](uint64_t& value, const char* what) {
        HG_CHECK(left >= 8,
                 "zip: \"{}\" is corrupted: entry \"{}\": expected its {} in the ZIP64 extra "
                 "field, got a field of {} bytes",
                 path, entry.name, what, data_size);
        value = get64(field);
        field += 8;
        left -= 8;
      };
      if (size_deferred) take(entry.size, "size");
      if (compressed_deferred) take(entry.compressed_size, "compressed size");
      if (offset_deferred) take(entry.local_header_offset, "local header offset");
      return;
    }
    at += data_size;
  }
  HG_CHECK(!size_deferred && !compressed_deferred && !offset_deferred,
           "zip: \"{}\" is corrupted: entry \"{}\": its central record defers its sizes or offset "
           "to a ZIP64 extra field (0xFFFFFFFF), expected one, got none",
           path, entry.name);
}

// Inflates a raw deflate stream that must give exactly `expected` bytes. The output grows as
// bytes come out, so a corrupted size allocates no more than the stream really inflates to.
std::vector<std::byte> inflate_entry(std::span<const std::byte> input, uint64_t expected,
                                     const std::string& path, const std::string& name) {
  z_stream stream{};
  HG_CHECK(::inflateInit2(&stream, -MAX_WBITS) == Z_OK,
           "zip: \"{}\": entry \"{}\": zlib's "
           "inflateInit2 failed",
           path, name);
  struct End {
    z_stream* stream;
    ~End() { ::inflateEnd(stream); }
  } end{&stream};

  std::vector<std::byte> out;
  uint64_t produced = 0;
  uint64_t consumed = 0;
  auto fail = [&](const std::string& reason) {
    HG_ERROR(
        "zip: \"{}\" is corrupted: entry \"{}\": expected a deflate stream of {} bytes "
        "inflating to {} bytes, got {} after {} bytes of output",
        path, name, input.size(), expected, reason, produced);
  };
  for (;;) {
    if (stream.avail_in == 0 && consumed < input.size()) {
      const uint64_t chunk = std::min<uint64_t>(input.size() - consumed, kZlibChunk);
      // zlib's next_in is not const-qualified; it only reads.
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(input.data() + consumed));
      stream.avail_in = uInt(chunk);
      consumed += chunk;
    }
    const bool input_exhausted = stream.avail_in == 0 && consumed == input.size();
    if (produced == out.size() && out.size() < expected) {
      out.resize(size_t(std::min<uint64_t>(expected, std::max<uint64_t>(out.size() * 2, 1 << 16))));
    }
    int status;
    if (produced == expected) {
      // Every declared byte is out: the stream must end without producing another.
      Bytef extra_byte;
      stream.next_out = &extra_byte;
      stream.avail_out = 1;
      status = ::inflate(&stream, Z_NO_FLUSH);
      if (stream.avail_out == 0) fail("more bytes than declared");
    } else {
      const uint64_t room = std::min<uint64_t>(out.size() - produced, kZlibChunk);
      stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
      stream.avail_out = uInt(room);
      status = ::inflate(&stream, Z_NO_FLUSH);
      produced += room - stream.avail_out;
    }
    if (status == Z_STREAM_END) break;
    if (status == Z_BUF_ERROR && input_exhausted) fail("a stream cut short");
    if (status != Z_OK && status != Z_BUF_ERROR) {
      fail(fmt::format("invalid deflate data ({})", stream.msg ? stream.msg : "zlib error"));
    }
  }
  if (produced != expected) fail("a stream that ends early");
  return out;
}

std::vector<std::byte> deflate_bytes(std::span<const std::byte> input, const std::string& path,
                                     const std::string& name) {
  z_stream stream{};
  HG_CHECK(::deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8,
                          Z_DEFAULT_STRATEGY) == Z_OK,
           "zip: \"{}\": entry \"{}\": zlib's deflateInit2 failed", path, name);
  struct End {
    z_stream* stream;
    ~End() { ::deflateEnd(stream); }
  } end{&stream};
  std::vector<std::byte> out(size_t(::deflateBound(&stream, uLong(input.size()))));
  uint64_t produced = 0;
  uint64_t consumed = 0;
  for (;;) {
    if (stream.avail_in == 0 && consumed < input.size()) {
      const uint64_t chunk = std::min<uint64_t>(input.size() - consumed, kZlibChunk);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(input.data() + consumed));
      stream.avail_in = uInt(chunk);
      consumed += chunk;
    }
    if (produced == out.size()) out.resize(out.size() * 2 + 64);
    const uint64_t room = std::min<uint64_t>(out.size() - produced, kZlibChunk);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = uInt(room);
    const bool last = consumed == input.size();
    const int status = ::deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH);
    produced += room - stream.avail_out;
    if (status == Z_STREAM_END) break;
    HG_CHECK(status == Z_OK || status == Z_BUF_ERROR,
             "zip: \"{}\": entry \"{}\": zlib's deflate failed ({})", path, name, status);
  }
  out.resize(size_t(produced));
  return out;
}

}  // namespace

// ---- reading --------------------------------------------------------------------------------

ZipReader::ZipReader(const std::string& path) : path_(path) {
  const InputFile file(path);
  const CentralDirectory directory = find_central_directory(file, path);
  HG_CHECK(directory.offset <= directory.end && directory.size <= directory.end - directory.offset,
           "zip: \"{}\" is corrupted: expected the central directory ({} bytes at offset {}) to "
           "end by offset {}, where the end records begin (an archive with bytes prepended is "
           "not supported)",
           path, directory.size, directory.offset, directory.end);
  HG_CHECK(directory.entry_count <= directory.size / kCentralHeaderBytes,
           "zip: \"{}\" is corrupted: expected at most {} entries in a central directory of {} "
           "bytes, the end record says {}",
           path, directory.size / kCentralHeaderBytes, directory.size, directory.entry_count);
  std::vector<uint8_t> records(size_t(directory.size));
  file.read(directory.offset, records.data(), directory.size, "the central directory");

  entries_.reserve(size_t(directory.entry_count));
  uint64_t at = 0;
  for (uint64_t i = 0; i < directory.entry_count; ++i) {
    HG_CHECK(directory.size - at >= kCentralHeaderBytes &&
                 get32(&records[at]) == kCentralHeaderSignature,
             "zip: \"{}\" is corrupted: expected central record {} of {} (signature PK\\1\\2) at "
             "offset {}, got {}",
             path, i + 1, directory.entry_count, directory.offset + at,
             directory.size - at >= 4 ? fmt::format("0x{:08x}", get32(&records[at]))
                                      : std::string("the end of the central directory"));
    const uint8_t* record = &records[at];
    const uint64_t name_size = get16(record + 28), extra_size = get16(record + 30),
                   comment_size = get16(record + 32);
    HG_CHECK(name_size + extra_size + comment_size <= directory.size - at - kCentralHeaderBytes,
             "zip: \"{}\" is corrupted: central record {} of {} at offset {} declares a name, "
             "extra field and comment of {} bytes, past the end of the central directory",
             path, i + 1, directory.entry_count, directory.offset + at,
             name_size + extra_size + comment_size);
    ZipEntry entry;
    entry.flags = get16(record + 8);
    entry.method = get16(record + 10);
    entry.crc32 = get32(record + 16);
    entry.compressed_size = get32(record + 20);
    entry.size = get32(record + 24);
    entry.local_header_offset = get32(record + 42);
    entry.name.assign(reinterpret_cast<const char*>(record + kCentralHeaderBytes), name_size);
    const uint16_t start_disk = get16(record + 34);
    HG_CHECK(start_disk == 0 || start_disk == kZip64Marker16,
             "zip: \"{}\": entry \"{}\": expected it on disk 0, got disk {} (split archives are "
             "not supported)",
             path, entry.name, start_disk);
    apply_zip64_extra(record + kCentralHeaderBytes + name_size, extra_size, entry,
                      entry.size == kZip64Marker32, entry.compressed_size == kZip64Marker32,
                      entry.local_header_offset == kZip64Marker32, path);
    index_[entry.name] = entries_.size();
    entries_.push_back(std::move(entry));
    at += kCentralHeaderBytes + name_size + extra_size + comment_size;
  }
  central_directory_offset_ = directory.offset;
}

std::vector<std::byte> ZipReader::read(const std::string& name) const {
  const auto found = index_.find(name);
  if (found == index_.end()) {
    std::string names;
    for (size_t i = 0; i < entries_.size() && i < 20; ++i) {
      names += fmt::format("{}\"{}\"", i > 0 ? ", " : "", entries_[i].name);
    }
    if (entries_.size() > 20) names += fmt::format(", ... ({} in all)", entries_.size());
    HG_ERROR("zip: \"{}\": expected an entry \"{}\", the archive has {}", path_, name,
             entries_.empty() ? std::string("none") : names);
  }
  const ZipEntry& entry = entries_[found->second];
  HG_CHECK((entry.flags & (kFlagEncrypted | kFlagStrongEncryption)) == 0,
           "zip: \"{}\": entry \"{}\" is encrypted (flags 0x{:04x}); expected an unencrypted "
           "entry",
           path_, name, entry.flags);
  HG_CHECK(entry.method == kMethodStored || entry.method == kMethodDeflate,
           "zip: \"{}\": entry \"{}\": expected the compression method stored (0) or deflate "
           "(8), got method {}",
           path_, name, entry.method);

  const InputFile file(path_);
  const std::string what = fmt::format("entry \"{}\"", name);
  uint8_t local[kLocalHeaderBytes];
  HG_CHECK(entry.local_header_offset <= central_directory_offset_,
           "zip: \"{}\" is corrupted: entry \"{}\": its local header offset {} is past the "
           "central directory at {}",
           path_, name, entry.local_header_offset, central_directory_offset_);
  file.read(entry.local_header_offset, local, kLocalHeaderBytes, "the local header of " + what);
  HG_CHECK(get32(local) == kLocalHeaderSignature,
           "zip: \"{}\" is corrupted: entry \"{}\": expected a local header (signature PK\\3\\4) "
           "at offset {}, got 0x{:08x}",
           path_, name, entry.local_header_offset, get32(local));
  const uint64_t data_offset =
      entry.local_header_offset + kLocalHeaderBytes + get16(local + 26) + get16(local + 28);
  HG_CHECK(data_offset <= central_directory_offset_ &&
               entry.compressed_size <= central_directory_offset_ - data_offset,
           "zip: \"{}\" is corrupted: entry \"{}\": its {} bytes of data at offset {} run past "
           "the central directory at offset {}",
           path_, name, entry.compressed_size, data_offset, central_directory_offset_);
  std::vector<std::byte> stored(size_t(entry.compressed_size));
  file.read(data_offset, stored.data(), entry.compressed_size, "the data of " + what);

  std::vector<std::byte> bytes;
  if (entry.method == kMethodStored) {
    HG_CHECK(entry.size == entry.compressed_size,
             "zip: \"{}\" is corrupted: entry \"{}\" is stored, so expected its size ({}) to "
             "equal its compressed size, got {}",
             path_, name, entry.size, entry.compressed_size);
    bytes = std::move(stored);
  } else {
    bytes = inflate_entry(stored, entry.size, path_, name);
  }
  const uint32_t crc = crc32_of(bytes);
  HG_CHECK(crc == entry.crc32,
           "zip: \"{}\" is corrupted: entry \"{}\": expected CRC-32 0x{:08x} (from the central "
           "directory), got 0x{:08x} for its {} bytes",
           path_, name, entry.crc32, crc, bytes.size());
  return bytes;
}

// ---- writing --------------------------------------------------------------------------------

ZipWriter::ZipWriter(const std::string& path, bool compress, bool force_zip64)
    : path_(path),
      compress_(compress),
      force_zip64_(force_zip64),
      uncaught_at_creation_(std::uncaught_exceptions()),
      file_(std::make_unique<AtomicFileWriter>(path)) {}

ZipWriter::~ZipWriter() {
  if (closed_ || failed_ || std::uncaught_exceptions() > uncaught_at_creation_) return;
  try {
    close();
  } catch (...) {
    // A destructor must not throw; the destination stays as it was (AtomicFileWriter).
  }
}

void ZipWriter::add(const std::string& name, std::span<const std::byte> data) {
  HG_CHECK(!closed_, "zip: \"{}\": cannot add \"{}\" after close()", path_, name);
  HG_CHECK(!failed_, "zip: \"{}\": cannot add \"{}\": an earlier add() failed", path_, name);
  HG_CHECK(!name.empty() && name.size() <= 0xFFFF,
           "zip: \"{}\": expected an entry name of 1 to 65535 bytes, got {} bytes", path_,
           name.size());
  HG_CHECK(names_.count(name) == 0, "zip: \"{}\": expected a new entry name, got \"{}\" twice",
           path_, name);
  try {
    ZipEntry entry;
    entry.name = name;
    entry.method = compress_ ? kMethodDeflate : kMethodStored;
    entry.crc32 = crc32_of(data);
    entry.size = data.size();
    entry.flags = std::any_of(name.begin(), name.end(), [](char c) { return (c & 0x80) != 0; })
                      ? kFlagUtf8Name
                      : 0;
    std::vector<std::byte> deflated;
    if (compress_) deflated = deflate_bytes(data, path_, name);
    const std::span<const std::byte> payload =
        compress_ ? std::span<const std::byte>(deflated) : data;
    entry.compressed_size = payload.size();
    entry.local_header_offset = file_->bytes_written();

    const bool zip64 =
        force_zip64_ || entry.size >= kZip64Marker32 || entry.compressed_size >= kZip64Marker32;
    std::vector<uint8_t> header;
    put32(header, kLocalHeaderSignature);
    put16(header, zip64 ? 45 : (compress_ ? 20 : 10));  // version needed to extract
    put16(header, entry.flags);
    put16(header, entry.method);
    put16(header, 0);                        // time 00:00:00
    put16(header, (0 << 9) | (1 << 5) | 1);  // date 1980-01-01
    put32(header, entry.crc32);
    put32(header, zip64 ? kZip64Marker32 : uint32_t(entry.compressed_size));
    put32(header, zip64 ? kZip64Marker32 : uint32_t(entry.size));
    put16(header, uint16_t(name.size()));
    put16(header, zip64 ? 20 : 0);
    header.insert(header.end(), name.begin(), name.end());
    if (zip64) {
      put16(header, kZip64ExtraTag);
      put16(header, 16);
      put64(header, entry.size);
      put64(header, entry.compressed_size);
    }
    file_->write(header.data(), header.size());
    if (!payload.empty()) file_->write(payload.data(), payload.size());
    names_[name] = entries_.size();
    entries_.push_back(std::move(entry));
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void ZipWriter::close() {
  HG_CHECK(!closed_, "zip: \"{}\" was already closed", path_);
  HG_CHECK(!failed_, "zip: \"{}\": cannot close: an earlier add() failed", path_);
  const uint64_t directory_offset = file_->bytes_written();
  std::vector<uint8_t> directory;
  for (const ZipEntry& entry : entries_) {
    const bool size_zip64 = force_zip64_ || entry.size >= kZip64Marker32;
    const bool compressed_zip64 = force_zip64_ || entry.compressed_size >= kZip64Marker32;
    const bool offset_zip64 = force_zip64_ || entry.local_header_offset >= kZip64Marker32;
    const uint16_t zip64_bytes = uint16_t(8 * (size_zip64 + compressed_zip64 + offset_zip64));
    const bool zip64 = zip64_bytes > 0;
    put32(directory, kCentralHeaderSignature);
    put16(directory, (3 << 8) | 45);  // made by: Unix, APPNOTE 4.5
    put16(directory, zip64 ? 45 : (entry.method == kMethodDeflate ? 20 : 10));
    put16(directory, entry.flags);
    put16(directory, entry.method);
    put16(directory, 0);
    put16(directory, (0 << 9) | (1 << 5) | 1);
    put32(directory, entry.crc32);
    put32(directory, compressed_zip64 ? kZip64Marker32 : uint32_t(entry.compressed_size));
    put32(directory, size_zip64 ? kZip64Marker32 : uint32_t(entry.size));
    put16(directory, uint16_t(entry.name.size()));
    put16(directory, zip64 ? uint16_t(4 + zip64_bytes) : 0);
    put16(directory, 0);            // comment length
    put16(directory, 0);            // disk number start
    put16(directory, 0);            // internal attributes
    put32(directory, 0644u << 16);  // external attributes: a regular file, rw-r--r--
    put32(directory, offset_zip64 ? kZip64Marker32 : uint32_t(entry.local_header_offset));
    directory.insert(directory.end(), entry.name.begin(), entry.name.end());
    if (zip64) {
      put16(directory, kZip64ExtraTag);
      put16(directory, zip64_bytes);
      if (size_zip64) put64(directory, entry.size);
      if (compressed_zip64) put64(directory, entry.compressed_size);
      if (offset_zip64) put64(directory, entry.local_header_offset);
    }
  }
  const uint64_t count = entries_.size();
  const uint64_t directory_size = directory.size();
  const bool zip64_end = force_zip64_ || count >= kZip64Marker16 ||
                         directory_offset >= kZip64Marker32 || directory_size >= kZip64Marker32;
  if (zip64_end) {
    const uint64_t record_offset = directory_offset + directory_size;
    put32(directory, kZip64EndSignature);
    put64(directory, kZip64EndBytes - 12);  // the record's size after this field
    put16(directory, (3 << 8) | 45);
    put16(directory, 45);
    put32(directory, 0);  // this disk
    put32(directory, 0);  // the disk of the central directory
    put64(directory, count);
    put64(directory, count);
    put64(directory, directory_size);
    put64(directory, directory_offset);
    put32(directory, kZip64LocatorSignature);
    put32(directory, 0);
    put64(directory, record_offset);
    put32(directory, 1);  // disks in all
  }
  put32(directory, kEndSignature);
  put16(directory, 0);
  put16(directory, 0);
  const uint16_t classic_count = zip64_end ? kZip64Marker16 : uint16_t(count);
  put16(directory, classic_count);
  put16(directory, classic_count);
  put32(directory, zip64_end ? kZip64Marker32 : uint32_t(directory_size));
  put32(directory, zip64_end ? kZip64Marker32 : uint32_t(directory_offset));
  put16(directory, 0);  // comment length
  try {
    file_->write(directory.data(), directory.size());
    file_->commit();
  } catch (...) {
    failed_ = true;
    throw;
  }
  closed_ = true;
}

}  // namespace hg::io
