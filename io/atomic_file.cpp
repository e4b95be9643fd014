// AtomicFileWriter (atomic_file.h): a write to a locked temporary file with a random name,
// fsync, rename over the destination, fsync of the folder, removal of the temporaries of
// writers that died; and the fault injection tests use.
#include "halfgrad/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "halfgrad/core/error.h"

namespace hg::io {

namespace {

// 64 random bits make a taken name a sign of a broken random source, not of bad luck; the
// bound turns that into an error instead of a loop.
constexpr int kMaxCreateAttempts = 16;
constexpr size_t kRandomSuffixDigits = 16;

// The byte count after which writes fail (the WriteFaultGuard); max: no fault.
constexpr uint64_t kNoFault = std::numeric_limits<uint64_t>::max();
std::atomic<uint64_t> fail_after_bytes{kNoFault};

std::string system_reason(int error) { return std::strerror(error); }

// Writes all `size` bytes to fd, at `offset` (pwrite) when given, else at the file's position,
// in pieces of at most 1 GiB, retrying on EINTR and short writes; `written` counts the bytes
// done. Returns 0, or the errno of the write that failed (EIO for one that wrote nothing).
int write_all(int fd, const char* bytes, size_t size, std::optional<uint64_t> offset,
              uint64_t& written) {
  while (size > 0) {
    const size_t chunk = std::min<size_t>(size, size_t(1) << 30);
    const ssize_t n =
        offset ? ::pwrite(fd, bytes, chunk, off_t(*offset + written)) : ::write(fd, bytes, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    bytes += n;
    size -= size_t(n);
    written += uint64_t(n);
  }
  return 0;
}

std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string basename_of(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// A fresh std::random_device per name: a forked child must not repeat its parent's names.
std::string random_suffix(const std::string& path) {
  uint64_t bits = 0;
  try {
    std::random_device device;
    bits = (uint64_t(device()) << 32) ^ uint64_t(device());
  } catch (const std::exception& e) {
    HG_CHECK(false, "save: cannot draw a random name for the temporary of \"{}\": {}", path,
             e.what());
  }
  return fmt::format("{:0{}x}", bits, kRandomSuffixDigits);
}

bool all_of_digits(std::string_view text, std::string_view digits) {
  return !text.empty() && text.find_first_not_of(digits) == std::string_view::npos;
}

// Whether `name` is one of the temporaries of the destination `basename`:
// "<basename>.tmp-<16 hex digits>", or "<basename>.tmp-<pid>-<n>" of earlier versions. The
// exact shape keeps another checkpoint called, say, "<basename>.tmp-best" out of reach.
bool is_temporary_of(std::string_view name, std::string_view basename) {
  constexpr std::string_view kMarker = ".tmp-";
  if (!name.starts_with(basename) || !name.substr(basename.size()).starts_with(kMarker)) {
    return false;
  }
  const std::string_view suffix = name.substr(basename.size() + kMarker.size());
  if (suffix.size() == kRandomSuffixDigits && all_of_digits(suffix, "0123456789abcdef")) {
    return true;
  }
  const size_t dash = suffix.find('-');
  return dash != std::string_view::npos && all_of_digits(suffix.substr(0, dash), "0123456789") &&
         all_of_digits(suffix.substr(dash + 1), "0123456789");
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Takes the exclusive lock that marks a temporary as owned by a live writer. A cleaner holds
// a file's lock only for an unlink, so waiting for it is short. On a file system without
// flock the file stays unlocked, and cleaners there cannot lock it either: nothing is
// removed.
void lock_exclusively(int fd) {
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
}

// Whether `path` still names the open file `fd` (a cleaner may have unlinked it between its
// creation and its lock).
bool still_names(const std::string& path, int fd) {
  struct stat opened {};
  struct stat named {};
  return ::fstat(fd, &opened) == 0 && ::lstat(path.c_str(), &named) == 0 &&
         same_file(opened, named);
}

// Unlinks the temporary `name` in the folder when it is a regular file no live writer has
// locked. The name is checked again under the lock: the writer may have renamed the file
// into place since it was listed.
void remove_if_unowned(int folder_fd, const std::string& name) {
  struct stat named {};
  if (::fstatat(folder_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISREG(named.st_mode)) {
    return;
  }
  // O_NONBLOCK and O_NOFOLLOW: a file swapped for a FIFO or a link since the check above
  // neither blocks the open nor leads elsewhere.
  const int fd =
      ::openat(folder_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat opened {};
  if (::fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
      ::fstatat(folder_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
      same_file(named, opened)) {
    ::unlinkat(folder_fd, name.c_str(), 0);
  }
  ::close(fd);
}

// Removes the temporaries of `basename` in `folder` whose writer is gone. Best effort: a
// folder that cannot be listed, or a file that cannot be opened, is left as it is.
void remove_stale_temporaries(const std::string& folder, const std::string& basename) {
  const int folder_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder_fd < 0) return;
  DIR* listing = ::fdopendir(folder_fd);
  if (listing == nullptr) {
    ::close(folder_fd);
    return;
  }
  // Listed first, removed after: unlinking while readdir walks the folder may skip entries.
  std::vector<std::string> temporaries;
  while (const dirent* entry = ::readdir(listing)) {
    if (is_temporary_of(entry->d_name, basename)) temporaries.emplace_back(entry->d_name);
  }
  for (const std::string& name : temporaries) remove_if_unowned(::dirfd(listing), name);
  ::closedir(listing);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  HG_CHECK(!path_.empty(), "save: expected a file path, got an empty one");
  const std::string folder = folder_of(path_);
  // Cleaning before the new temporary exists frees the space of earlier writers' leftovers
  // (a killed run leaves a whole checkpoint) before this write needs it; commit() cleans
  // again for the writers that die meanwhile.
  remove_stale_temporaries(folder, basename_of(path_));
  for (int attempt = 0; attempt < kMaxCreateAttempts; ++attempt) {
    std::string candidate = path_ + ".tmp-" + random_suffix(path_);
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    HG_CHECK(fd >= 0, "save: cannot create \"{}\" next to \"{}\": {}", candidate, path_,
             system_reason(errno));
    lock_exclusively(fd);
    if (still_names(candidate, fd)) {
      fd_ = fd;
      temporary_path_ = std::move(candidate);
      return;
    }
    ::close(fd);  // another writer's cleanup removed it before it was locked
  }
  HG_CHECK(false,
           "save: cannot create a temporary file for \"{}\" in the folder \"{}\": expected a "
           "free name, got {} random names in a row taken or removed by another writer",
           path_, folder, kMaxCreateAttempts);
}

AtomicFileWriter::~AtomicFileWriter() {
  // Unlinked while still locked, so no cleaner is left holding the name.
  if (!committed_ && fd_ >= 0) ::unlink(temporary_path_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

void AtomicFileWriter::write(const void* data, size_t size) {
  HG_CHECK(fd_ >= 0 && !committed_, "save: writing to \"{}\" after it was committed", path_);
  const uint64_t limit = fail_after_bytes.load();
  const size_t allowed =
      limit == kNoFault ? size
                        : size_t(std::min<uint64_t>(size, limit - std::min(limit, bytes_written_)));
  const int error =
      write_all(fd_, static_cast<const char*>(data), allowed, std::nullopt, bytes_written_);
  HG_CHECK(error == 0 && allowed == size, "save: writing \"{}\" failed after {} bytes: {}", path_,
           bytes_written_, system_reason(error != 0 ? error : ENOSPC));
}

void AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t size) {
  HG_CHECK(fd_ >= 0 && !committed_, "save: writing to \"{}\" after it was committed", path_);
  HG_CHECK(offset <= bytes_written_ && size <= bytes_written_ - offset,
           "save: \"{}\": expected to overwrite bytes within the {} written, got {} bytes at "
           "offset {}",
           path_, bytes_written_, size, offset);
  uint64_t done = 0;
  const int error = write_all(fd_, static_cast<const char*>(data), size, offset, done);
  HG_CHECK(error == 0, "save: writing \"{}\" at offset {} failed: {}", path_, offset + done,
           system_reason(error));
}

void AtomicFileWriter::commit() {
  HG_CHECK(fd_ >= 0 && !committed_, "save: \"{}\" was already committed", path_);
  HG_CHECK(::fsync(fd_) == 0, "save: flushing \"{}\" to the disk failed: {}", temporary_path_,
           system_reason(errno));
  // Some file systems (NFS) report write errors only at close(). Closing a duplicate runs
  // that check before the rename while fd_ keeps the lock: a finished temporary unlocked
  // before its rename could be taken for a dead writer's and removed.
  const int duplicate = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  HG_CHECK(duplicate >= 0 && ::close(duplicate) == 0, "save: closing \"{}\" failed: {}",
           temporary_path_, system_reason(errno));
  HG_CHECK(::rename(temporary_path_.c_str(), path_.c_str()) == 0,
           "save: renaming \"{}\" to \"{}\" failed: {}", temporary_path_, path_,
           system_reason(errno));
  committed_ = true;
  ::close(fd_);  // the file is the destination now: its lock no longer matters
  fd_ = -1;
  // The rename is durable once the folder's entry is on the disk.
  const std::string folder = folder_of(path_);
  const int folder_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder_fd >= 0) {
    ::fsync(folder_fd);
    ::close(folder_fd);
  }
  remove_stale_temporaries(folder, basename_of(path_));
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
