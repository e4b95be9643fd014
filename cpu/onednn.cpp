#include "halfgrad/cpu/onednn.h"

#include <fmt/format.h>

#include "halfgrad/config.h"

#if HALFGRAD_HAS_ONEDNN
#include <dnnl.h>
#endif

namespace hg::cpu {

bool onednn_enabled() { return HALFGRAD_HAS_ONEDNN; }

std::string onednn_version() {
#if HALFGRAD_HAS_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OMP"
                        : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                             : "other";
  return fmt::format("{}.{}.{} (cpu runtime: {})", v->major, v->minor, v->patch, runtime);
#else
  return "not built";
#endif
}

}  // namespace hg::cpu
