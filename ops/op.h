// OpId: every op halfgrad dispatches, generated from ops/op_list.def, with its name, its
// default autocast cast policy per device type, and whether it has a backward.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "halfgrad/core/device.h"

namespace hg {

enum class OpId : uint16_t {
#define HG_OP(name, cuda, cpu, differentiable) name,
#include "halfgrad/ops/op_list.def"
#undef HG_OP
};

inline constexpr int kNumOps = 0
#define HG_OP(name, cuda, cpu, differentiable) +1
#include "halfgrad/ops/op_list.def"
#undef HG_OP
    ;

// What autocast does with an op's floating inputs (NOTE [Autocast policies] in op_list.def).
enum class CastPolicy : uint8_t {
  LowerPrecision,  // cast to the autocast dtype (float16 / bfloat16)
  Fp32,            // cast to float32
  Promote,         // cast to the widest floating input dtype
  Banned,          // refuse to run under autocast, naming the safe alternative
  Unlisted,        // run in the inputs' own dtypes
};

// "lower_precision_fp", "fp32", "promote", "banned", "unlisted".
std::string_view cast_policy_name(CastPolicy policy);

struct OpInfo {
  OpId id;
  std::string_view name;
  CastPolicy cuda_policy;  // the defaults from op_list.def; see amp::cast_policy for overrides
  CastPolicy cpu_policy;
  bool differentiable;
};

const OpInfo& op_info(OpId op);
// True for the ops that run in fp8 inside an amp::Fp8Autocast region (NOTE [Fp8 ops]);
// constexpr, so that dispatch() decides per op at compile time whether to look for a recipe.
constexpr bool op_runs_in_fp8(OpId op) {
  switch (op) {
#define HG_OP(name, cuda, cpu, differentiable)
#define HG_FP8_OP(name) case OpId::name:
#include "halfgrad/ops/op_list.def"
#undef HG_FP8_OP
#undef HG_OP
    return true;
    default:
      return false;
  }
}
std::string_view op_name(OpId op);
// Every op, in op_list.def's order.
std::span<const OpInfo> all_ops();

}  // namespace hg
