// NumPy's .npy and .npz files: tensors to and from numpy.save, numpy.savez and
// numpy.savez_compressed, and numpy.load of what halfgrad writes. In io/ beside safetensors: a
// file format for tensors, which data/ (the datasets) builds on.
//
//   io::save_npy("x.npy", hg::randn({3, 4}));        // np.load("x.npy")
//   Tensor y = io::load_npy("y.npy");                 // np.save("y.npy", a)
//   io::save_npz("run.npz", {{"w", w}, {"b", b}});    // np.load("run.npz")["w"]
//   std::map<std::string, Tensor> arrays = io::load_npz("arrays.npz");
//
// The format (numpy.lib.format): the magic "\x93NUMPY", a major and minor version byte, the
// header's length (2 bytes little-endian in version 1.0, 4 bytes in 2.0 and 3.0), the header,
// a Python dict literal padded with spaces and a newline,
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// then the array's elements. descr is a byte order ('<' little, '>' big, '|' not applicable,
// '=' native) and a type code; halfgrad maps
//   f2 float16, f4 float32, f8 float64, i1 int8, i2 int16, i4 int32, i8 int64, u1 uint8, b1 bool
// and refuses any other (complex, strings, Python objects, structured records, unsigned integers
// wider than a byte) with an error naming it. numpy has no bfloat16 (nor float8) type code, so
// saving such a tensor is an error that suggests converting it first.
//
// NOTE [Npy reading] A file is checked before a tensor is made: the magic and version (1.0,
// 2.0, 3.0), the header's length against the file's, the dict (exactly the keys descr,
// fortran_order and shape), the dtype, the shape (each dimension non-negative, their product
// and byte count without overflow) and that the data after the header is exactly that many
// bytes; bool bytes must be 0 or 1. Every error names the file (and the .npz entry) and what
// was expected and given. Big-endian elements are swapped to the host's order. A Fortran-
// ordered array (fortran_order True: the first index varies fastest) is returned as the
// row-major tensor holding the same values at the same indices.
//
// halfgrad writes version 1.0 (2.0 when the header passes 65535 bytes) with numpy's header
// text and padding (the data starts at a multiple of 64 bytes), little-endian and row-major: for
// the dtypes above, save_npy gives the bytes numpy.save gives.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::io {

// An .npy file as a tensor (CPU, contiguous).
Tensor load_npy(const std::string& path);
// Writes the tensor's values (any device, any layout; copied to contiguous CPU memory first),
// atomically (NOTE [Atomic checkpoints]).
void save_npy(const std::string& path, const Tensor& tensor);

// The arrays of an .npz archive (stored or deflated entries), keyed by entry name without
// ".npy", as numpy.load(path)[key]. An entry not ending in ".npy" is an error.
std::map<std::string, Tensor> load_npz(const std::string& path);
// numpy.savez (compressed = false) and numpy.savez_compressed (true): one "<key>.npy" entry per
// tensor, written atomically.
void save_npz(const std::string& path, const std::map<std::string, Tensor>& tensors,
              bool compressed = false);

// The bytes of an .npy file, and back; `source` names them in errors ("x.npz: entry w.npy").
std::vector<std::byte> npy_to_bytes(const Tensor& tensor);
Tensor npy_from_bytes(std::span<const std::byte> bytes, std::string_view source);

}  // namespace hg::io
