// AtomicFileWriter (atomic_file.h): a write to a temporary file, fsync, rename over the
// destination, fsync of the folder; and the fault injection tests use.
#include "halfgrad/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "halfgrad/core/error.h"

namespace hg::io {

namespace {

std::atomic<uint64_t> temporary_counter{0};

// The byte count after which writes fail (the WriteFaultGuard); max: no fault.
constexpr uint64_t kNoFault = std::numeric_limits<uint64_t>::max();
std::atomic<uint64_t> fail_after_bytes{kNoFault};

std::string system_reason(int error) { return std::strerror(error); }

std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  HG_CHECK(!path_.empty(), "save: expected a file path, got an empty one");
  temporary_path_ = path_ + ".tmp-" + std::to_string(::getpid()) + "-" +
                    std::to_string(temporary_counter.fetch_add(1));
  fd_ = ::open(temporary_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  HG_CHECK(fd_ >= 0, "save: cannot create \"{}\" next to \"{}\": {}", temporary_path_, path_,
           system_reason(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t size) {
  HG_CHECK(fd_ >= 0 && !committed_, "save: writing to \"{}\" after it was committed", path_);
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    size_t chunk = std::min<size_t>(size, size_t(1) << 30);
    const uint64_t limit = fail_after_bytes.load();
    if (limit != kNoFault) {
      HG_CHECK(bytes_written_ < limit, "save: writing \"{}\" failed after {} bytes: {}", path_,
               bytes_written_, system_reason(ENOSPC));
      chunk = std::min<size_t>(chunk, size_t(limit - bytes_written_));
    }
    const ssize_t written = ::write(fd_, bytes, chunk);
    if (written < 0 && errno == EINTR) continue;
    HG_CHECK(written > 0, "save: writing \"{}\" failed after {} bytes: {}", path_, bytes_written_,
             system_reason(written < 0 ? errno : EIO));
    bytes += written;
    size -= size_t(written);
    bytes_written_ += uint64_t(written);
  }
}

void AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t size) {
  HG_CHECK(fd_ >= 0 && !committed_, "save: writing to \"{}\" after it was committed", path_);
  HG_CHECK(offset <= bytes_written_ && size <= bytes_written_ - offset,
           "save: \"{}\": expected to overwrite bytes within the {} written, got {} bytes at "
           "offset {}",
           path_, bytes_written_, size, offset);
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::pwrite(fd_, bytes, size, off_t(offset));
    if (written < 0 && errno == EINTR) continue;
    HG_CHECK(written > 0, "save: writing \"{}\" at offset {} failed: {}", path_, offset,
             system_reason(written < 0 ? errno : EIO));
    bytes += written;
    size -= size_t(written);
    offset += uint64_t(written);
  }
}

void AtomicFileWriter::commit() {
  HG_CHECK(fd_ >= 0 && !committed_, "save: \"{}\" was already committed", path_);
  HG_CHECK(::fsync(fd_) == 0, "save: flushing \"{}\" to the disk failed: {}", temporary_path_,
           system_reason(errno));
  const int close_result = ::close(fd_);
  fd_ = -1;
  HG_CHECK(close_result == 0, "save: closing \"{}\" failed: {}", temporary_path_,
           system_reason(errno));
  HG_CHECK(::rename(temporary_path_.c_str(), path_.c_str()) == 0,
           "save: renaming \"{}\" to \"{}\" failed: {}", temporary_path_, path_,
           system_reason(errno));
  committed_ = true;
  // The rename is durable once the folder's entry is on the disk.
  const int folder = ::open(folder_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder >= 0) {
    ::fsync(folder);
    ::close(folder);
  }
}

namespace testing {

WriteFaultGuard::WriteFaultGuard(uint64_t bytes_before_failure) {
  uint64_t expected = kNoFault;
  HG_CHECK(fail_after_bytes.compare_exchange_strong(expected, bytes_before_failure),
           "WriteFaultGuard: expected no other guard alive, got one failing after {} bytes",
           expected);
}

WriteFaultGuard::~WriteFaultGuard() { fail_after_bytes.store(kNoFault); }

}  // namespace testing

}  // namespace hg::io
