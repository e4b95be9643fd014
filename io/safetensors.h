// Tensors to and from files in the safetensors format, so that weights move between halfgrad
// and Python (safetensors, PyTorch) in both directions:
//
//   hg::save("model.safetensors", model->state_dict());
//   model->load_state_dict(hg::load("model.safetensors"));
//
// The format: an unsigned 64-bit little-endian header length N, N bytes of a UTF-8 JSON
// object, then the tensors' bytes, little-endian and row-major, back to back:
//
//   {"__metadata__": {"format": "pt"},
//    "0.weight": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]}, ...}
//
// data_offsets are [begin, end) from the first byte after the header. halfgrad reads and
// writes the dtypes F32, F16, BF16, F64, I64, I32 and BOOL.
//
// NOTE [Safetensors validation] A file is checked completely before any tensor is made: the
// header length against the file's size and a 100 MB cap (the Python reader's), the JSON
// (UTF-8, an object, no key twice), each entry's dtype, shape and offsets, the byte count
// each shape needs, and that the tensors tile the data exactly (sorted by offset, no gap, no
// overlap, nothing after the last); BOOL bytes must be 0 or 1. Every violation is an hg::Error
// naming the file and the key, and nothing is returned: a bad file never yields a partial
// state dict.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "halfgrad/core/tensor.h"

namespace hg {

// name -> tensor (nn::StateDict is the same type).
using TensorMap = std::map<std::string, Tensor>;

// Writes the tensors (any device, any layout; copied to contiguous CPU memory as they are
// written) and the string metadata, atomically (NOTE [Atomic checkpoints]).
void save(const std::string& path, const TensorMap& tensors,
          const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a safetensors file into new CPU tensors.
TensorMap load(const std::string& path);

namespace io {

struct SafetensorsContents {
  TensorMap tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// load() that also returns the metadata.
SafetensorsContents load_safetensors(const std::string& path);

// The format in memory: the bytes save() writes, and their parse (with the checks of
// load(); `source` names the bytes in error messages).
std::string to_safetensors_bytes(const TensorMap& tensors,
                                 const std::map<std::string, std::string>& metadata = {});
SafetensorsContents from_safetensors_bytes(std::string_view bytes,
                                           std::string_view source = "<memory>");

// The header's dtype name ("F32", "BF16", ...) of a halfgrad dtype, and back (an error naming
// the dtypes halfgrad reads for any other name).
std::string_view safetensors_dtype_name(DType dtype);
DType dtype_from_safetensors_name(std::string_view name);

}  // namespace io

}  // namespace hg
