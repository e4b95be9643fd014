// The one definition autograd/function.h needs out of line: the pointer through which
// Function::apply asks amp's registry (NOTE [Autocast for custom functions]).
#include "halfgrad/autograd/function.h"

namespace hg::autograd::detail {

std::atomic<FunctionCastLookup> function_cast_lookup{nullptr};

}  // namespace hg::autograd::detail
