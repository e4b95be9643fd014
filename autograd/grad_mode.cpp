// The thread's grad mode flag (grad_mode.h).
#include "halfgrad/autograd/grad_mode.h"

namespace hg::autograd {

namespace detail {
thread_local constinit bool grad_enabled = true;
}

}  // namespace hg::autograd
