// The safetensors loader under libFuzzer: any bytes either parse, or raise hg::Error; nothing
// else (no crash, no sanitizer report, no other exception). What parses must survive a
// round trip: written again and read back, it gives the same tensors and metadata, verified
// against the checksums the write added (NOTE [Safetensors checksums]).
//
// Built with clang's -fsanitize=fuzzer when HALFGRAD_FUZZ is on (hg-fuzz-safetensors, run by
// ctest for a bounded time over tests/fuzz/corpus/safetensors); otherwise linked with
// replay_main.cpp, which runs every corpus file once (test_fuzz_safetensors_replay).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "halfgrad/core/error.h"
#include "halfgrad/io/safetensors.h"

namespace {

bool same_bytes(const hg::Tensor& a, const hg::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hg::io::SafetensorsContents contents;
  try {
    contents = hg::io::from_safetensors_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
  } catch (const hg::Error&) {
    return 0;  // refused with a message: what the loader must do with bad bytes
  }
  const std::string again = hg::io::to_safetensors_bytes(contents.tensors, contents.metadata);
  const hg::io::SafetensorsContents back = hg::io::from_safetensors_bytes(again, "round trip");
  if (!back.verified || back.metadata != contents.metadata ||
      back.tensors.size() != contents.tensors.size()) {
    std::abort();
  }
  for (const auto& [name, tensor] : contents.tensors) {
    const auto found = back.tensors.find(name);
    if (found == back.tensors.end() || !same_bytes(found->second, tensor)) std::abort();
  }
  return 0;
}
