// Helpers shared by tests: bit-exact tensor comparison, row-major index arithmetic, per-dtype
// tolerances, the message of a rejected call, a temporary folder and whole-file reads and writes.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "halfgrad/core/error.h"
#include "halfgrad/core/tensor.h"

namespace hg::testing {

// Same dtype, same shape, same bytes (NaN payloads and signed zeros included).
inline bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// ---- row-major index arithmetic over plain sizes (what references written with loops use) ----

using Sizes = std::vector<int64_t>;

inline Sizes sizes_of(const Tensor& t) { return Sizes(t.sizes().begin(), t.sizes().end()); }

// The number of elements of a tensor of these sizes.
inline int64_t count(const Sizes& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// The index of the element at row-major position flat, and back.
inline Sizes unravel(int64_t flat, const Sizes& sizes) {
  Sizes index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return index;
}
inline int64_t ravel(const Sizes& index, const Sizes& sizes) {
  int64_t flat = 0;
  for (size_t d = 0; d < sizes.size(); ++d) flat = flat * sizes[d] + index[d];
  return flat;
}

// ---- tolerances ------------------------------------------------------------------------------

// The value for a floating dtype among one per dtype (bfloat16's for any other dtype).
template <class T>
T per_dtype(DType dtype, T float64, T float32, T float16, T bfloat16) {
  switch (dtype) {
    case kFloat64:
      return float64;
    case kFloat32:
      return float32;
    case kFloat16:
      return float16;
    default:
      return bfloat16;
  }
}

// The relative error allowed for a value computed in float32 and rounded once to dtype: a few
// units of its last place (float16 has 11 significant bits, bfloat16 8; float32 and float64
// results are held to float32's arithmetic).
inline double rounding_tolerance(DType dtype) {
  return per_dtype(dtype, 1e-5, 1e-5, 2e-3, 1e-2);
}

// ---- rejected calls --------------------------------------------------------------------------

// The message of the hg::Error f throws; empty when it throws none.
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// ---- files --------------------------------------------------------------------------------

// Every byte of a file, and a file made of these bytes (an hg::Error naming the file when it
// cannot be read or written).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  HG_CHECK(in.good(), "read_file: cannot open \"{}\"", path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  HG_CHECK(out.good(), "write_file: cannot write \"{}\"", path.string());
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
