// The CPU GEMM on Eigen: every float64 product, and float32 where halfgrad is built without
// oneDNN or GemmImpl::Eigen asks for it (NOTE [CPU GEMM paths] in cpu/linalg.cpp).
#include <omp.h>

#include <cstdint>

#include "halfgrad/cpu/linalg_detail.h"

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics once Eigen's packing
// code is inlined (a HALFGRAD_NATIVE build on an AVX-512 machine); the values are written
// before they are read. Only Eigen's code is compiled with the warning off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

namespace hg::cpu::linalg_detail {

namespace {

// Below this many multiply-adds per matrix, Eigen runs the batch's matrices on separate
// threads instead of splitting each matrix across threads.
constexpr int64_t kSmallEigenGemm = int64_t(1) << 21;

template <class T>
using EigenRowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using EigenColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class Matrix>
using EigenInput = Eigen::Map<const Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;

// Calls f with matrix `batch` of op as an Eigen map of its own storage order, so that
// Eigen's GEMM reads it in place.
template <class T, class F>
void with_eigen_matrix(const MatrixOperand& op, int64_t batch, int64_t rows, int64_t cols, F&& f) {
  const T* data = reinterpret_cast<const T*>(element(op, sizeof(T), batch, 0, 0));
  if (op.row_major()) {
    f(EigenInput<EigenRowMajor<T>>(data, rows, cols, Eigen::OuterStride<>(op.row_stride)));
  } else {
    f(EigenInput<EigenColMajor<T>>(data, rows, cols, Eigen::OuterStride<>(op.col_stride)));
  }
}

}  // namespace

template <class T>
void eigen_gemm(const Problem& p) {
  const T alpha = T(p.alpha), beta = T(p.beta);
  const auto one_matrix = [&](int64_t i) {
    Eigen::Map<EigenRowMajor<T>> out(reinterpret_cast<T*>(p.out) + i * p.m * p.n, p.m, p.n);
    with_eigen_matrix<T>(p.a, i, p.m, p.k, [&](const auto& a) {
      with_eigen_matrix<T>(p.b, i, p.k, p.n, [&](const auto& b) {
        if (p.beta == 0) {
          out.noalias() = alpha * a * b;  // assigns: NaN in the old out does not survive
        } else {
          if (p.beta != 1) out *= beta;
          out.noalias() += alpha * a * b;
        }
      });
    });
  };
  // Eigen splits one GEMM across OpenMP threads (omp_get_max_threads) and runs serially
  // inside a parallel region, so small matrices of a batch go one per thread instead.
  if (p.batch > 1 && p.m * p.n * p.k <= kSmallEigenGemm && omp_get_max_threads() > 1 &&
      !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.batch; ++i) one_matrix(i);
  } else {
    for (int64_t i = 0; i < p.batch; ++i) one_matrix(i);
  }
}

template void eigen_gemm<float>(const Problem& p);
template void eigen_gemm<double>(const Problem& p);

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace hg::cpu::linalg_detail
