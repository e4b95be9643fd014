// ZIP archives (PKWARE's APPNOTE): reading stored and deflated entries, ZIP64 included, and
// writing them. numpy's .npz files are ZIP archives of .npy files (io/npy.h).
//
//   io::ZipWriter out("arrays.zip", /*compress=*/true);
//   out.add("a.txt", std::as_bytes(std::span(text)));
//   out.close();                                  // writes the central directory
//
//   io::ZipReader archive("arrays.zip");
//   for (const io::ZipEntry& entry : archive.entries()) fmt::print("{}\n", entry.name);
//   std::vector<std::byte> bytes = archive.read("a.txt");
//
// NOTE [Zip archives] The reader trusts the central directory, not the local headers: it finds
// the end-of-central-directory record in the file's last 64 KiB + 22 bytes (the last one whose
// comment fits), follows the ZIP64 locator and record when present, and takes each entry's
// sizes, CRC-32 and local header offset from its central record, the 0xFFFFFFFF fields from
// its ZIP64 extra field. A local header is read only for the length of its name and extra
// field (where the data starts); its sizes may be 0 or 0xFFFFFFFF (a streamed or ZIP64 entry,
// as numpy's savez writes) and are not used. Every offset and length is checked against the
// file's size before it is used, and an entry's inflated bytes against its declared size and
// CRC-32, so a corrupted or truncated archive is an hg::Error naming the file and the entry,
// never a crash or an allocation larger than what the entry declares. Not supported (an
// error): split archives, archives with bytes prepended to them, encrypted entries, methods
// other than stored (0) and deflate (8). Entry names are their stored bytes (UTF-8 where the
// archive says so, CP437 otherwise, as given); when a name occurs twice, the last entry wins,
// as in Python's zipfile.
//
// The writer computes each entry's CRC-32 and (deflated) size before writing its local header,
// so it writes no data descriptors; it switches to ZIP64 fields where a size, an offset or the
// entry count does not fit the classic ones (or always, with force_zip64). Entries carry the
// time stamp 1980-01-01 00:00, so the same entries give the same bytes. The file is written
// atomically (io/atomic_file.h, NOTE [Atomic checkpoints]): until close() returns, the
// destination is what it was before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hg::io {

class AtomicFileWriter;

// One entry of an archive's central directory.
struct ZipEntry {
  std::string name;
  uint64_t compressed_size = 0;
  uint64_t size = 0;    // uncompressed
  uint16_t method = 0;  // 0 stored, 8 deflate
  uint32_t crc32 = 0;   // of the uncompressed bytes
  uint16_t flags = 0;   // general purpose bit flag (bit 0: encrypted)
  uint64_t local_header_offset = 0;
};

// Reads the central directory on construction (ZIP64 too); read() opens the file again, so a
// reader holds no file descriptor and several threads may read entries at once.
class ZipReader {
 public:
  explicit ZipReader(const std::string& path);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  // The entry's bytes: inflated if deflated, checked against its size and CRC-32.
  std::vector<std::byte> read(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> index_;    // name -> position in entries_ (the last one)
  uint64_t central_directory_offset_ = 0;  // entries' headers and data lie before it
};

// Writes stored or deflated entries, then the central directory on close().
class ZipWriter {
 public:
  // force_zip64: write ZIP64 extra fields and end records even where the classic fields fit
  // (what Python's force_zip64 does for one entry, here for all; tests use it).
  ZipWriter(const std::string& path, bool compress, bool force_zip64 = false);
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;
  // Calls close() if it was not called, unless an exception is unwinding the stack through
  // the writer or an add() failed: then the destination is left as it was. An error in that
  // close() is swallowed (and the destination left as it was): call close() to see it.
  ~ZipWriter();

  // An error for an empty name, a name longer than 65535 bytes, a name added before, or after
  // close().
  void add(const std::string& name, std::span<const std::byte> data);
  // Writes the central directory and moves the file into place.
  void close();

 private:
  std::string path_;
  bool compress_;
  bool force_zip64_;
  bool closed_ = false;
  bool failed_ = false;           // an add() threw midway: the file is not an archive
  int uncaught_at_creation_ = 0;  // std::uncaught_exceptions() when the writer was made
  std::unique_ptr<AtomicFileWriter> file_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> names_;
};

}  // namespace hg::io
