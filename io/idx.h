// IDX files, the format of the MNIST family of datasets (data/mnist.h), plain or gzipped. In io/
// beside npy and safetensors: a file format for tensors, which data/ builds its datasets on.
//
//   Tensor images = io::read_idx("mnist/train-images-idx3-ubyte.gz");   // uint8 [60000, 28, 28]
//
// The format: two zero bytes, a type byte, the number of dimensions n, then n dimensions as
// unsigned 32-bit big-endian integers, then the elements, big-endian and row-major:
//   0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64.
// A file that starts with gzip's magic (1f 8b) is inflated as it is read.
//
// A file is checked before and while it is read: the magic, the type, the byte count the
// dimensions need (without overflow) against what the file holds (a plain file's size; for a
// gzipped file, what its compressed size can inflate to at most, deflate's ratio of 1032, so a
// corrupted header allocates nothing absurd), then that the data ends exactly where the
// dimensions say and, for a gzipped file, its CRC-32 and length. Errors name the file and what
// was expected and given.
#pragma once

#include <string>

#include "halfgrad/core/tensor.h"

namespace hg::io {

// An IDX file (plain or gzipped) as a CPU tensor of the file's dtype and dimensions.
Tensor read_idx(const std::string& path);

}  // namespace hg::io
