// What the CPU backend's two oneDNN users share: cpu/onednn.cpp (the GEMM's matmul primitives)
// and cpu/onednn_conv.cpp (conv2d's convolution primitives) run on one CPU engine, each thread
// on a stream of its own, with halfgrad's floating dtypes named as oneDNN's, and keep their
// primitives in caches of one kind. Only those two
// files include it: it brings in dnnl.hpp.
#pragma once

#include "halfgrad/config.h"

#if HALFGRAD_HAS_ONEDNN
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include <dnnl.hpp>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"

namespace hg::cpu::onednn_runtime {

inline dnnl::engine& engine() {
  static dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

// A thread's stream (oneDNN streams are not to be shared between threads running at once).
inline dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(engine());
  return stream;
}

// float32, bfloat16 and float16 as oneDNN's data types; `what` names the caller's primitive
// ("matmul", "convolution") in the error for any other dtype.
inline dnnl::memory::data_type data_type(DType dtype, const char* what) {
  switch (dtype) {
    case kFloat32:
      return dnnl::memory::data_type::f32;
    case kBFloat16:
      return dnnl::memory::data_type::bf16;
    case kFloat16:
      return dnnl::memory::data_type::f16;
    default:
      HG_ERROR("oneDNN has no {} for {}", what, dtype);
  }
}

// A process-wide cache of primitives by key (NOTE [oneDNN matmul cache]): each made once, under
// the lock, and shared after; emptied when it holds kMaxEntries, so that a program cycling
// through endless shapes does not grow it without bound.
template <class Key, class Entry, size_t kMaxEntries>
class PrimitiveCache {
 public:
  template <class Make>
  std::shared_ptr<const Entry> get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = entries_.find(key); found != entries_.end()) return found->second;
    if (entries_.size() >= kMaxEntries) entries_.clear();
    std::shared_ptr<const Entry> made = make();
    entries_.emplace(key, made);
    return made;
  }

  int64_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(entries_.size());
  }

 private:
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<const Entry>> entries_;
};

}  // namespace hg::cpu::onednn_runtime

#endif  // HALFGRAD_HAS_ONEDNN
