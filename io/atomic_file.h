// Atomic file writes: a file is written under a temporary name next to its destination,
// flushed to the disk (fsync), and renamed over the destination; then the folder is flushed
// so the rename itself survives a crash.
//
//   io::AtomicFileWriter out("run/ckpt.safetensors");
//   out.write(header.data(), header.size());
//   out.commit();                 // until here, run/ckpt.safetensors is the previous file
//
// NOTE [Atomic checkpoints] A crash, a full disk or an exception at any point before commit()
// leaves the destination as it was (the previous checkpoint, or no file) and removes the
// temporary file; rename(2) within one folder replaces the destination in one step, so a
// reader sees the old file or the new one, never a mix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hg::io {

class AtomicFileWriter {
 public:
  // Creates the temporary file "<path>.tmp-<pid>-<n>" (an error when the folder does not
  // exist or is not writable).
  explicit AtomicFileWriter(std::string path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  // Without commit(): closes and removes the temporary file.
  ~AtomicFileWriter();

  // Appends bytes; an error (naming the file and the system's reason) when they cannot all
  // be written.
  void write(const void* data, size_t size);
  // Overwrites `size` bytes at `offset` within what was already written (a field whose value
  // is known only once the rest is written, as a checksum in a header); an error otherwise.
  void write_at(uint64_t offset, const void* data, size_t size);
  // fsync, rename over the destination, fsync the folder.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return temporary_path_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  std::string path_;
  std::string temporary_path_;
  int fd_ = -1;
  uint64_t bytes_written_ = 0;
  bool committed_ = false;
};

namespace testing {

// For tests of what a failing disk does: while a guard lives, every AtomicFileWriter of the
// process fails its write once it has written `bytes_before_failure` bytes, with ENOSPC (as a
// full disk would). Guards do not nest.
class WriteFaultGuard {
 public:
  explicit WriteFaultGuard(uint64_t bytes_before_failure);
  WriteFaultGuard(const WriteFaultGuard&) = delete;
  WriteFaultGuard& operator=(const WriteFaultGuard&) = delete;
  ~WriteFaultGuard();
};

}  // namespace testing

}  // namespace hg::io
