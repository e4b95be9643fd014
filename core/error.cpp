// hg::Error's throw helper (error.h).
#include "halfgrad/core/error.h"

namespace hg::detail {

// Out of line so that the throwing path stays out of the callers' hot code.
void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), file, line);
}

}  // namespace hg::detail
