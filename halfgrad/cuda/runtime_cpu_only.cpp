// The CUDA API in a build without the CUDA backend (HALFGRAD_CUDA=OFF, or no nvcc found).
#include "halfgrad/cuda/cuda.h"

namespace hg::cuda {

bool is_compiled() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string describe() { return "halfgrad was built without its CUDA backend"; }

}  // namespace hg::cuda
