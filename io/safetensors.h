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
// writes the dtypes F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3 and F8_E5M2.
//
// NOTE [Safetensors validation] A file is checked completely before any tensor is made: the
// header length against the file's size and a 100 MB cap (the Python reader's), the JSON
// (UTF-8, an object, no key twice), each entry's dtype, shape and offsets, the byte count
// each shape needs, and that the tensors tile the data exactly (sorted by offset, no gap, no
// overlap, nothing after the last); BOOL bytes must be 0 or 1. Every violation is an hg::Error
// naming the file and the key, and nothing is returned: a bad file never yields a partial
// state dict.
//
// NOTE [Safetensors checksums] Every file halfgrad writes carries two xxHash64 digests (XXH64,
// seed 0) in its __metadata__, each as 16 lower-case hex digits, so that a flipped bit in the
// weights or in an optimizer's step is an error on load instead of a silently different run.
// The file stays plain safetensors: other readers see two more metadata strings.
//   "halfgrad.checksum.data"    XXH64 of the data region, every byte after the header
//   "halfgrad.checksum.header"  XXH64 of the canonical text of the header, below
// The canonical text says what the header means, not how its JSON is spelled (spacing, key
// order, escapes and padding are left out). It is the concatenation of one line per tensor,
// in the byte order of the names, then one line per metadata entry except the two checksums,
// in the byte order of the keys; a string s is written as its UTF-8 byte count in decimal, a
// colon, and its bytes (so any byte may occur in it), a number in decimal without sign or
// leading zeros, and each line ends in a single '\n':
//   "tensor " s(name) " " dtype " " rank (" " dimension)... " " begin " " end "\n"
//   "metadata " s(key) " " s(value) "\n"
// dtype is the header's name ("F32"), begin and end its data_offsets. For example
//   {"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [0, 24]}}
// has the canonical text "tensor 1:w F32 2 2 3 0 24\nmetadata 6:format 2:pt\n".
// The prefix "halfgrad.checksum." is reserved: save() refuses a metadata key that starts with
// it. On load, a file with any such key must hold both checksums, well formed and matching,
// and no other key with the prefix (so a flipped bit in a checksum's name is caught too); the
// header is checked before any data is read, the data as it is read, and both before a tensor
// is returned or a BOOL byte is looked at. A file with no such key (written by Python or by
// an older halfgrad) loads unverified: SafetensorsContents::verified says which, and
// LoadOptions::require_checksum refuses such a file.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "halfgrad/core/tensor.h"

namespace hg {

// name -> tensor (nn::StateDict is the same type).
using TensorMap = std::map<std::string, Tensor>;

namespace io {

struct LoadOptions {
  // Refuse a file without halfgrad's checksums (NOTE [Safetensors checksums]) instead of
  // loading it unverified.
  bool require_checksum = false;
};

// The metadata keys of the checksums, and the prefix reserved for them.
inline constexpr std::string_view kChecksumKeyPrefix = "halfgrad.checksum.";
inline constexpr std::string_view kDataChecksumKey = "halfgrad.checksum.data";
inline constexpr std::string_view kHeaderChecksumKey = "halfgrad.checksum.header";

}  // namespace io

// Writes the tensors (any device, any layout; copied to contiguous CPU memory as they are
// written) and the string metadata, with their checksums (NOTE [Safetensors checksums]),
// atomically (NOTE [Atomic checkpoints]). A metadata key starting with "halfgrad.checksum." is
// an error.
void save(const std::string& path, const TensorMap& tensors,
          const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a safetensors file into new CPU tensors, verifying the file's checksums
// when it has them.
TensorMap load(const std::string& path, const io::LoadOptions& options = {});

namespace io {

struct SafetensorsContents {
  TensorMap tensors;
  // "__metadata__" without the checksum entries, empty when absent.
  std::map<std::string, std::string> metadata;
  // True when the file held both checksums and both matched; false for a file without them.
  bool verified = false;
};

// load() that also returns the metadata and whether the file was verified.
SafetensorsContents load_safetensors(const std::string& path, const LoadOptions& options = {});

// The format in memory: the bytes save() writes, and their parse (with the checks of
// load(); `source` names the bytes in error messages).
std::string to_safetensors_bytes(const TensorMap& tensors,
                                 const std::map<std::string, std::string>& metadata = {});
SafetensorsContents from_safetensors_bytes(std::string_view bytes,
                                           std::string_view source = "<memory>",
                                           const LoadOptions& options = {});

// The header's dtype name ("F32", "BF16", ...) of a halfgrad dtype, and back (an error naming
// the dtypes halfgrad reads for any other name).
std::string_view safetensors_dtype_name(DType dtype);
DType dtype_from_safetensors_name(std::string_view name);

}  // namespace io

}  // namespace hg
