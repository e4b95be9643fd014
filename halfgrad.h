// halfgrad: tensors, define-by-run autograd and mixed precision in C++20.
//
//   #include <halfgrad/halfgrad.h>
//   using namespace hg;
//
//   Tensor x = randn({2, 3});                 // float32, from the Philox generator
//   Tensor h = x.to(kFloat16);                // rounded to nearest even, once
//   fmt::print("{}\n", h);                    // tensor([[...]], shape=[2, 3], dtype=float16)
//
// This umbrella header brings in the whole public API.
#pragma once

#include "halfgrad/amp/autocast.h"
#include "halfgrad/amp/fp8.h"
#include "halfgrad/amp/fp16_optimizer.h"
#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/amp/overflow_watch.h"
#include "halfgrad/amp/precision_audit.h"
#include "halfgrad/amp/loss_scaler.h"
#include "halfgrad/amp/master_params.h"
#include "halfgrad/amp/svg_chart.h"
#include "halfgrad/amp/trace.h"
#include "halfgrad/autograd/anomaly.h"
#include "halfgrad/autograd/checkpoint.h"
#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/function.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/gradcheck.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/config.h"
#include "halfgrad/core/cast.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/scalar.h"
#include "halfgrad/core/settings.h"
#include "halfgrad/core/shape.h"
#include "halfgrad/core/storage.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/core/tensor_index.h"
#include "halfgrad/cpu/capabilities.h"
#include "halfgrad/cuda/cuda.h"
#include "halfgrad/data/dataloader.h"
#include "halfgrad/data/dataset.h"
#include "halfgrad/io/atomic_file.h"
#include "halfgrad/io/checkpoint.h"
#include "halfgrad/io/safetensors.h"
#include "halfgrad/nn/functional.h"
#include "halfgrad/nn/init.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/nn/modules.h"
#include "halfgrad/nn/nn.h"
#include "halfgrad/nn/transformer.h"
#include "halfgrad/nn/utils.h"
#include "halfgrad/ops/op.h"
#include "halfgrad/optim/optim.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/profiler/profiler.h"
