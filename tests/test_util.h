// Helpers shared by tests: bit-exact tensor comparison and a temporary folder.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "halfgrad/core/tensor.h"

namespace hg::testing {

// Same dtype, same shape, same bytes (NaN payloads and signed zeros included).
inline bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// A fresh folder under the system's temporary folder, removed with everything in it at the
// end of its scope.
struct TempFolder {
  std::filesystem::path path;
  TempFolder() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           fmt::format("halfgrad-test-{}-{}", ::getpid(), counter++);
    std::filesystem::create_directories(path);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  ~TempFolder() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  size_t entries() const {
    return size_t(std::distance(std::filesystem::directory_iterator(path),
                                std::filesystem::directory_iterator()));
  }
};

}  // namespace hg::testing
