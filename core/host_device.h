// HG_HOST_DEVICE: a function that CUDA device code calls too (__host__ __device__ under nvcc,
// nothing elsewhere). The formulas both backends compile (kernel/formulas.h), the Philox
// stream (core/random.h) and stochastic rounding (core/stochastic_rounding.h) are marked so.
#pragma once

#ifndef HG_HOST_DEVICE
#ifdef __CUDACC__
#define HG_HOST_DEVICE __host__ __device__
#else
#define HG_HOST_DEVICE
#endif
#endif
