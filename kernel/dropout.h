// The dropout family's shared types: what dropout returns on every backend.
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

struct DropoutForward {
  Tensor out;
  Tensor mask;
};

}  // namespace hg::kernel
