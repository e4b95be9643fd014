// Launchers of the CUDA indexing kernels (index.cu), over the strided walk of walk.h. Free of
// fmt (NOTE [CUDA headers without fmt] in probe.h): plain arguments in, cudaError_t out; the
// host side (index.cpp) checks and allocates.
//
// NOTE [Sorted accumulation on CUDA] scatter_add, index_add, index_put(accumulate=true) and
// embedding_backward must add every contribution that lands on one element in a fixed order
// (NOTE [Accumulation of duplicates] in kernel/index.h), so no float atomics: each contribution
// gets a key, the destination (a row or an element), and a value, where it comes from; the
// (key, value) pairs are sorted by key with a stable radix sort, so equal keys keep the
// row-major order of the index; then one thread per destination element walks its run of
// equal keys, starting from self's value, adding in float (double for float64) and rounding
// once. The sums are those of the CPU kernels, in the same order: float32 results are
// bit-identical to the CPU's. A destination hit very many times is summed by one thread in
// sequence: correct and deterministic, slower than atomics for such a hot spot.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "halfgrad/cuda/kernel_args.h"
#include "halfgrad/cuda/walk.h"

namespace hg::cuda::detail {

// ---- copies --------------------------------------------------------------------------------

// dst[offset 0] = src[offset 1] over walk (operand 0: dst, 1: src), elements of element_size
// bytes copied as bits.
cudaError_t launch_copy(const Walk& walk, void* dst, const void* src, int element_size,
                        cudaStream_t stream);

// `rows` rows of width_bytes: row r of dst at dst + r dst_pitch gets row r of src at
// src + r src_pitch (bytes). Copies in 16-byte words where sizes and addresses allow.
cudaError_t launch_copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                             int64_t width_bytes, int64_t rows, cudaStream_t stream);

// ---- gathers -------------------------------------------------------------------------------

// For every position of walk (operand 0: out, 1: x with its stride at the gathered dim set to
// 0, 2: index): j = index[offset 2]; out[offset 0] = x[offset 1 + j x_dim_stride]. An index
// outside [0, bound) is reported (code, dim) and its element skipped.
cudaError_t launch_gather(const Walk& walk, void* out, const void* x, const void* index,
                          bool index_int32, int element_size, int64_t x_dim_stride, int64_t bound,
                          DeviceErrorSlot* slot, DeviceError code, int32_t dim,
                          cudaStream_t stream);

// index_select of a contiguous x viewed as [O, S, row_bytes]: out [O, N, row_bytes] row (o, n)
// = x row (o, index[n]); index[n] at n * index_stride elements. Bad indices as launch_gather.
cudaError_t launch_gather_rows(void* out, const void* x, const void* index, bool index_int32,
                               int64_t index_stride, int64_t O, int64_t N, int64_t S,
                               int64_t row_bytes, DeviceErrorSlot* slot, DeviceError code,
                               int32_t dim, cudaStream_t stream);

// ---- sorted accumulation (NOTE [Sorted accumulation on CUDA]) ------------------------------

// Keys and values of the contributions of one index tensor, for every position p of walk
// (operand 0: index, 1: destination base, 2: source): j = index[offset 0];
//   key = offset 1 + j dim_step, value = offset 2
// j outside [0, bound) is reported (code, dim) and gets key `sentinel`, as does j == skip when
// has_skip (embedding's padding_idx). keys/values may be null: the indices are only checked.
cudaError_t launch_scatter_keys(const Walk& walk, const void* index, bool index_int32,
                                int64_t dim_step, int64_t bound, bool has_skip, int64_t skip,
                                uint64_t sentinel, uint64_t* keys, int64_t* values,
                                DeviceErrorSlot* slot, DeviceError code, int32_t dim,
                                cudaStream_t stream);

// The index tensors of index_put, broadcast to their common shape B: tuple m (row-major over
// B) reads index k at its walk offset, wraps negative values by bounds[k] and addresses row
// sum_k j_k prod_{k' > k} bounds[k'] of self's leading K dims.
struct IndexTuples {
  int32_t count = 0;  // K
  int32_t dim = 0;    // B's dims after dropping size-1 dims
  int64_t numel = 0;  // M
  int64_t sizes[kMaxDims] = {};
  const void* data[kMaxDims] = {};
  bool int32[kMaxDims] = {};
  int64_t bounds[kMaxDims] = {};
  int64_t strides[kMaxDims][kMaxDims] = {};  // [index k][dim of B]
};

// key = the flat destination row of tuple m (sentinel when an index is out of range, which is
// reported as DeviceError::IndexPut with the index's dim), value = m.
cudaError_t launch_index_put_keys(const IndexTuples& tuples, uint64_t sentinel, uint64_t* keys,
                                  int64_t* values, DeviceErrorSlot* slot, cudaStream_t stream);

// Scratch bytes the radix sort of n pairs with keys below 2^end_bit needs.
cudaError_t sort_pairs_temp_bytes(int64_t n, int end_bit, size_t* bytes);
// Sorts (keys_in, values_in) by key into (keys_out, values_out), stably, on stream.
cudaError_t launch_sort_pairs(void* temp, size_t temp_bytes, const uint64_t* keys_in,
                              uint64_t* keys_out, const int64_t* values_in, int64_t* values_out,
                              int64_t n, int end_bit, cudaStream_t stream);

// The accumulation of NOTE [Sorted accumulation on CUDA]. out is contiguous [O, S, R] of
// dtype; keys/values sorted, n of them; keys >= sentinel are skipped. For every o, every run of
// equal keys j, and every r < R: out[o, j, r] (+)= source[o rows_o_stride + value R + r] for
// the run's values in order. accumulate: start from out's value, sum in the compute type,
// round once; else the last value of the run is copied (the last write wins).
cudaError_t launch_segment_rows(DType dtype, void* out, const void* source, const uint64_t* keys,
                                const int64_t* values, int64_t n, uint64_t sentinel, int64_t O,
                                int64_t S, int64_t R, int64_t rows_o_stride, bool accumulate,
                                cudaStream_t stream);

// The number of bits the keys [0, sentinel] need (at least 1).
inline int key_bits(uint64_t sentinel) {
  int bits = 1;
  while (bits < 64 && (sentinel >> bits) != 0) ++bits;
  return bits;
}

// ---- argsort (NOTE [Sorting rows on CUDA] in index.cpp) ------------------------------------

// keys[i] = kernel::sort_key(x[i]) and values[i] = i over `count` contiguous elements of dtype.
cudaError_t launch_sort_keys(DType dtype, const void* x, int64_t count, bool descending,
                             uint64_t* keys, int64_t* values, cudaStream_t stream);
// keys[i] = positions[i] / length (the row of each sorted position).
cudaError_t launch_row_keys(const int64_t* positions, int64_t count, int64_t length,
                            uint64_t* keys, cudaStream_t stream);
// out[i] = positions[i] % length (each position within its row).
cudaError_t launch_positions_in_row(const int64_t* positions, int64_t count, int64_t length,
                                    int64_t* out, cudaStream_t stream);

// ---- one_hot -------------------------------------------------------------------------------

// out [M, C] int64 contiguous: out[m, c] = (x[m] == c), x read at walk (operand 0) offsets
// over its M elements. A class outside [0, C) is reported (DeviceError::OneHot, dim) and its
// row left all zeros. With C == 0 the classes are only checked.
cudaError_t launch_one_hot(const Walk& walk, const int64_t* x, int64_t M, int64_t C, int64_t* out,
                           DeviceErrorSlot* slot, int32_t dim, cudaStream_t stream);

}  // namespace hg::cuda::detail
