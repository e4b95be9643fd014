// The thread-local autocast mode (core/autocast_mode.h).
#include "halfgrad/core/autocast_mode.h"

namespace hg::detail {

thread_local constinit AutocastMode autocast_mode;

}  // namespace hg::detail
