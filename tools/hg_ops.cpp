// hg-ops: the op registry, one line per op, tab-separated:
//   name  cuda_policy  cpu_policy  differentiable  fp8
// Policies are the ones in force (op_list.def's, as torch.amp's tables); fp8 says whether the
// op runs in float8 inside an amp::Fp8Autocast region (NOTE [Fp8 ops]). The table is
// amp::policy_table(), which a program can print too: there it also lists the custom Functions
// the program registered with amp::register_autocast.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "halfgrad/amp/autocast.h"

int main(int argc, char** argv) {
  CLI::App app{"hg-ops: every op halfgrad dispatches, with its autocast cast policies"};
  bool header = false;
  app.add_flag("--header", header, "print a header line first");
  CLI11_PARSE(app, argc, argv);

  fmt::print("{}", hg::amp::policy_table(header));
  return 0;
}
