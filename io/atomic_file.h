// Atomic file writes: a file is written under a temporary name next to its destination,
// flushed to the disk (fsync), and renamed over the destination; then the folder is flushed
// so the rename itself survives a crash. Temporaries left by writers that died are removed.
//
//   io::AtomicFileWriter out("run/ckpt.safetensors");
//   out.write(header.data(), header.size());
//   out.commit();                 // until here, run/ckpt.safetensors is the previous file
//
// NOTE [Atomic checkpoints] A crash, a full disk or an exception at any point before commit()
// leaves the destination as it was (the previous checkpoint, or no file) and removes the
// temporary file; rename(2) within one folder replaces the destination in one step, so a
// reader sees the old file or the new one, never a mix.
//
// The temporary is "<path>.tmp-<16 hex digits>", 64 random bits (std::random_device) created
// with O_EXCL and retried under a new name when taken: unique across processes and restarts,
// where a process id is not (every run in a fresh container is pid 1).
//
// A killed writer cannot remove its temporary, so writers remove each other's: a writer
// holds an exclusive flock(2) on its temporary from creation to commit or abandon, and the
// kernel drops the lock when the process dies (however it dies, whatever pid comes next).
// When a writer is created and after it commits, it scans the folder for this checkpoint's
// temporaries ("<basename>.tmp-<16 hex digits>", and "<basename>.tmp-<pid>-<n>" of earlier
// versions), and unlinks the regular files among them whose lock it can take: their writer
// is gone. A live writer's lock fails the attempt, so its temporary stays. Other files (other
// checkpoints' temporaries, other names, folders, links) are never touched. A cleaner may
// take the lock of a file created an instant earlier and not yet locked by its writer; the
// writer therefore checks, once locked, that its name still names its file (same device and
// inode), and creates another one otherwise. The lock is held through the rename, so a
// finished temporary is not removed before it becomes the destination.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hg::io {

class AtomicFileWriter {
 public:
  // Removes this checkpoint's stale temporaries, then creates and locks the temporary file
  // "<path>.tmp-<random>" (an error when the folder does not exist or is not writable).
  explicit AtomicFileWriter(std::string path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  // Without commit(): removes and closes the temporary file.
  ~AtomicFileWriter();

  // Appends bytes; an error (naming the file and the system's reason) when they cannot all
  // be written.
  void write(const void* data, size_t size);
  // Overwrites `size` bytes at `offset` within what was already written (a field whose value
  // is known only once the rest is written, as a checksum in a header); an error otherwise.
  void write_at(uint64_t offset, const void* data, size_t size);
  // fsync, rename over the destination, fsync the folder, remove stale temporaries.
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
