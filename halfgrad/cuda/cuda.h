// The CUDA runtime as halfgrad sees it. These functions exist in every build; a build
// without the CUDA backend answers that no device is available.
#pragma once

#include <string>

namespace hg::cuda {

// True when halfgrad was built with its CUDA backend.
bool is_compiled();
// True when the CUDA backend is built and at least one device is usable.
bool is_available();
// The number of usable devices (0 without the backend, without a driver or without a GPU).
int device_count();
// Why no device is available, or the name of device 0 ("NVIDIA H100 80GB HBM3").
std::string describe();

}  // namespace hg::cuda
