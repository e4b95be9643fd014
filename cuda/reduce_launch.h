// Launchers of the CUDA reductions (reduce.cu), called by reduce.cpp. Free of fmt (NOTE [CUDA
// headers without fmt] in probe.h): plain geometry structs and pointers, cudaError_t results.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/core/dtype.h"
#include "halfgrad/cuda/kernel_args.h"
#include "halfgrad/kernel/kinds.h"

namespace hg::cuda::detail {

// What a reduction pass folds: the folds of cpu/reduce.cpp, one per kind.
enum class ReduceKind : uint8_t {
  Sum,
  Prod,
  Mean,
  Amax,
  Amin,
  LogSumExpShift,  // logsumexp pass 1: the max, 0 where it is infinite
  LogSumExp,       // logsumexp pass 2: log(sum exp(x - shift)) + shift
  NormZero,        // count of nonzeros
  NormOne,
  NormTwo,
  NormInf,
  NormP,
  Var,  // pass 2 of var (pass 1 is Mean): sum (x - shift)^2 / (n - correction)
  ArgMax,
  ArgMin,
};

// Sizes and strides (in elements) walked in row-major order.
struct DimList {
  int32_t dim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

// NOTE [CUDA reduction layout] The input seen as [O outputs, N reduced elements]: `kept` walks
// the outputs in the output's row-major order (with the input's strides), `reduced` walks an
// output's N elements (sorted so that the innermost has the smallest stride). Size-1 dims are
// gone and neighbours that are back to back in memory are merged. When the last kept dim has
// stride 1 (`column`), neighbouring outputs are neighbours in memory: threads then walk that
// dim (J columns) and `kept` holds the other kept dims only.
struct ReduceGeometry {
  const void* data = nullptr;
  DType dtype = kFloat32;
  int64_t outputs = 0;  // O
  int64_t count = 0;    // N
  DimList kept;
  DimList reduced;
  bool column = false;
  int64_t columns = 1;  // J, when column
};

// Where a pass writes. Results go to `out` in the accumulator's dtype (float32, float64 or
// int64), or, with out_as_input, in the input's dtype (rounded once from the accumulator).
// ArgMax/ArgMin write values (in the input's dtype) to `out` and int64 indices to `indices`.
struct ReduceOutput {
  void* out = nullptr;
  bool out_as_input = false;
  int64_t* indices = nullptr;
  const void* shift = nullptr;  // per output, accumulator dtype: LogSumExp's max, Var's mean
  int64_t correction = 0;       // Var
  double p = 2.0;               // NormP
  void* workspace = nullptr;    // reduce_workspace_bytes(...) bytes, when that is not 0
};

// The scratch bytes a pass over this geometry needs for partial results (0: none). The launch
// plan depends only on the geometry, so results do not depend on the device.
int64_t reduce_workspace_bytes(const ReduceGeometry& g);
cudaError_t launch_reduce(ReduceKind kind, const ReduceGeometry& g, const ReduceOutput& out,
                          cudaStream_t stream);

// An inclusive scan (kernel::Scan) along one dim of length L: rows (the other dims, `rows`
// walked with the input's strides in x_rows and the output's in out_rows) of L elements, x_step
// and out_step apart. The output is written in the accumulator's dtype, or the input's with
// out_as_input. LogSumExp takes floating input only.
struct ScanGeometry {
  const void* x = nullptr;
  DType dtype = kFloat32;
  void* out = nullptr;
  bool out_as_input = false;
  int64_t rows = 0;
  int64_t length = 0;  // L
  int64_t x_step = 0;
  int64_t out_step = 0;
  DimList x_rows;
  DimList out_rows;
};
cudaError_t launch_scan(kernel::Scan kind, const ScanGeometry& g, cudaStream_t stream);

}  // namespace hg::cuda::detail
