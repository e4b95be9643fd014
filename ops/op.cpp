// The op table (op.h) generated from op_list.def: names, default cast policies, and
// whether each op is differentiable.
#include "halfgrad/ops/op.h"

#include <array>

namespace hg {

namespace {

constexpr CastPolicy L = CastPolicy::LowerPrecision;
constexpr CastPolicy F = CastPolicy::Fp32;
constexpr CastPolicy P = CastPolicy::Promote;
constexpr CastPolicy B = CastPolicy::Banned;
constexpr CastPolicy U = CastPolicy::Unlisted;
constexpr bool Y = true;
constexpr bool N = false;

constexpr std::array<OpInfo, kNumOps> kOps = {{
#define HG_OP(name, cuda, cpu, differentiable) {OpId::name, #name, cuda, cpu, differentiable},
#include "halfgrad/ops/op_list.def"
#undef HG_OP
}};

}  // namespace

std::string_view cast_policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::LowerPrecision:
      return "lower_precision_fp";
    case CastPolicy::Fp32:
      return "fp32";
    case CastPolicy::Promote:
      return "promote";
    case CastPolicy::Banned:
      return "banned";
    default:
      return "unlisted";
  }
}

const OpInfo& op_info(OpId op) { return kOps[static_cast<size_t>(op)]; }
std::string_view op_name(OpId op) { return op_info(op).name; }

std::span<const OpInfo> all_ops() { return kOps; }

}  // namespace hg
