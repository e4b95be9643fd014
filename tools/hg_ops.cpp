// hg-ops: the op registry, one line per op, tab-separated:
//   name  cuda_policy  cpu_policy  differentiable  fp8
// Policies are the ones in force (op_list.def's, as torch.amp's tables); fp8 says whether the
// op runs in float8 inside an amp::Fp8Autocast region (NOTE [Fp8 ops]). The table is
// amp::policy_table(), which a program can print too: there it also lists the custom Functions
// the program registered with amp::register_autocast.
//
// hg-ops --markdown prints the same defaults as docs/design.md §3 shows them: the op count and
// one row per policy with its ops on each device type. design.md holds that output between
// marker lines, and a test ("docs: design.md's policy table is hg-ops --markdown") keeps it so.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "halfgrad/amp/autocast.h"
#include "halfgrad/ops/op.h"

namespace {

using hg::CastPolicy;

struct PolicyRow {
  CastPolicy policy;
  std::string_view meaning;
};

constexpr PolicyRow kRows[] = {
    {CastPolicy::LowerPrecision, "LowerPrecision: floating inputs to the autocast dtype"},
    {CastPolicy::Fp32, "Fp32: floating inputs to float32"},
    {CastPolicy::Promote, "Promote: floating inputs to the widest floating input"},
    {CastPolicy::Banned, "Banned: an hg::Error naming the safe form"},
};

// The ops whose default policy on device_type is `policy`, in op_list.def's order.
std::vector<std::string_view> ops_with(CastPolicy policy, hg::DeviceType device_type) {
  std::vector<std::string_view> names;
  for (const hg::OpInfo& op : hg::all_ops()) {
    const CastPolicy given = device_type == hg::kCUDA ? op.cuda_policy : op.cpu_policy;
    if (given == policy) names.push_back(op.name);
  }
  return names;
}

std::string cell(const std::vector<std::string_view>& names) {
  return names.empty() ? std::string("—") : fmt::format("{}", fmt::join(names, ", "));
}

// op_list.def's defaults (never the run-time overrides), as design.md §3's table.
std::string markdown() {
  const auto ops = hg::all_ops();
  size_t differentiable = 0;
  for (const hg::OpInfo& op : ops) differentiable += op.differentiable ? 1 : 0;
  std::string out = fmt::format(
      "`op_list.def` has {} ops, {} of them differentiable; their default policies:\n\n",
      ops.size(), differentiable);
  out += "| policy | CUDA | CPU |\n| --- | --- | --- |\n";
  for (const PolicyRow& row : kRows) {
    const auto cuda = ops_with(row.policy, hg::kCUDA);
    const auto cpu = ops_with(row.policy, hg::kCPU);
    out += fmt::format("| {} | {} | {} |\n", row.meaning, cell(cuda),
                       cpu == cuda && !cpu.empty() ? std::string("the same") : cell(cpu));
  }
  out += fmt::format("| Unlisted: inputs as given | the other {} ops | the other {} ops |\n",
                     ops_with(CastPolicy::Unlisted, hg::kCUDA).size(),
                     ops_with(CastPolicy::Unlisted, hg::kCPU).size());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hg-ops: every op halfgrad dispatches, with its autocast cast policies"};
  bool header = false;
  bool as_markdown = false;
  app.add_flag("--header", header, "print a header line first");
  app.add_flag("--markdown", as_markdown,
               "print op_list.def's default policies as docs/design.md's table");
  CLI11_PARSE(app, argc, argv);

  fmt::print("{}", as_markdown ? markdown() : hg::amp::policy_table(header));
  return 0;
}
