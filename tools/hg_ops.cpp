// hg-ops: the op registry, one line per op, tab-separated:
//   name  cuda_policy  cpu_policy  differentiable  fp8
// Policies are the ones in force (op_list.def's, as torch.amp's tables); fp8 says whether the
// op runs in float8 inside an amp::Fp8Autocast region (NOTE [Fp8 ops]).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "halfgrad/amp/autocast.h"
#include "halfgrad/ops/op.h"

int main(int argc, char** argv) {
  CLI::App app{"hg-ops: every op halfgrad dispatches, with its autocast cast policies"};
  bool header = false;
  app.add_flag("--header", header, "print a header line first");
  CLI11_PARSE(app, argc, argv);

  if (header) fmt::print("name\tcuda_policy\tcpu_policy\tdifferentiable\tfp8\n");
  for (const hg::OpInfo& op : hg::all_ops()) {
    fmt::print("{}\t{}\t{}\t{}\t{}\n", op.name,
               hg::cast_policy_name(hg::amp::cast_policy(op.id, hg::kCUDA)),
               hg::cast_policy_name(hg::amp::cast_policy(op.id, hg::kCPU)),
               op.differentiable ? "yes" : "no", hg::op_runs_in_fp8(op.id) ? "yes" : "no");
  }
  return 0;
}
