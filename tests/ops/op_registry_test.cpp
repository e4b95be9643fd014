// The op registry against the policy tables of docs/design.md §3 (torch.amp's lists,
// restricted to halfgrad's ops), written out here independently of op_list.def.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/dispatch.h"

using namespace hg;

namespace {

// linear_gelu and scaled_dot_product_flash_attention are halfgrad's fused forms of linear and
// attention (torch's _addmm_activation and _scaled_dot_product_flash_attention): their policy.
// lstm_cell and gru_cell are torch's CUDA list's cells; on the CPU torch lists the whole layer
// (mkldnn_rnn), which halfgrad runs as these cells.
const std::set<std::string> kCudaLower = {"conv_transpose2d",
                                          "conv1d",
                                          "einsum",
                                          "matmul",
                                          "mm",
                                          "bmm",
                                          "addmm",
                                          "baddbmm",
                                          "linear",
                                          "linear_gelu",
                                          "addmv",
                                          "addr",
                                          "addbmm",
                                          "multi_dot",
                                          "chain_matmul",
                                          "conv2d",
                                          "prelu",
                                          "scaled_dot_product_attention",
                                          "scaled_dot_product_flash_attention",
                                          "lstm_cell",
                                          "gru_cell",
                                          "rnn_tanh_cell",
                                          "rnn_relu_cell"};
const std::set<std::string> kCudaFp32 = {"cumprod",
                                         "erfinv",
                                         "cosine_similarity",
                                         "normalize",
                                         "cdist",
                                         "dist",
                                         "pdist",
                                         "pow",
                                         "rpow",
                                         "renorm",
                                         "square",
                                         "exp",
                                         "expm1",
                                         "log2",
                                         "log10",
                                         "log",
                                         "log1p",
                                         "rsqrt",
                                         "reciprocal",
                                         "softmax",
                                         "log_softmax",
                                         "logsumexp",
                                         "sum",
                                         "prod",
                                         "cumsum",
                                         "norm",
                                         "layer_norm",
                                         "group_norm",
                                         "mse_loss",
                                         "l1_loss",
                                         "smooth_l1_loss",
                                         "nll_loss",
                                         "cross_entropy",
                                         "kl_div",
                                         "margin_ranking_loss",
                                         "hinge_embedding_loss",
                                         "soft_margin_loss",
                                         "huber_loss",
                                         "cosine_embedding_loss",
                                         "poisson_nll_loss",
                                         "triplet_margin_loss",
                                         "multi_margin_loss",
                                         "multilabel_margin_loss",
                                         "softmin",
                                         "binary_cross_entropy_with_logits",
                                         "softplus",
                                         "acos",
                                         "asin",
                                         "cosh",
                                         "sinh",
                                         "tan"};
const std::set<std::string> kCudaPromote = {"atan2",     "addcmul",     "addcdiv", "dot",
                                            "index_put", "scatter_add", "cat",     "stack",
                                            "tensordot", "bilinear",    "cross",   "grid_sample"};
const std::set<std::string> kCudaBanned = {"binary_cross_entropy"};
// torch's CPU list has addbmm of the three, not addmv or addr, nor the matrix chains.
const std::set<std::string> kCpuLower = [] {
  std::set<std::string> lower = kCudaLower;
  lower.erase("addmv");
  lower.erase("addr");
  lower.erase("multi_dot");
  lower.erase("chain_matmul");
  return lower;
}();
const std::set<std::string> kCpuFp32 = {"cdist",
                                        "grid_sample",
                                        "quantile",
                                        "nanquantile",
                                        "reflection_pad",
                                        "replication_pad",
                                        "trace",
                                        "prod",
                                        "mse_loss",
                                        "l1_loss",
                                        "smooth_l1_loss",
                                        "nll_loss",
                                        "cross_entropy",
                                        "kl_div",
                                        "margin_ranking_loss",
                                        "hinge_embedding_loss",
                                        "soft_margin_loss",
                                        "huber_loss",
                                        "cosine_embedding_loss",
                                        "poisson_nll_loss",
                                        "triplet_margin_loss",
                                        "multi_margin_loss",
                                        "multilabel_margin_loss",
                                        "binary_cross_entropy",
                                        "binary_cross_entropy_with_logits"};
const std::set<std::string> kCpuPromote = {"cat", "stack", "index_copy"};

CastPolicy expected(const std::string& name, const std::set<std::string>& lower,
                    const std::set<std::string>& fp32, const std::set<std::string>& promote,
                    const std::set<std::string>& banned) {
  if (lower.count(name)) return CastPolicy::LowerPrecision;
  if (fp32.count(name)) return CastPolicy::Fp32;
  if (promote.count(name)) return CastPolicy::Promote;
  if (banned.count(name)) return CastPolicy::Banned;
  return CastPolicy::Unlisted;
}

}  // namespace

TEST_CASE("the registry's cast policies are torch.amp's tables", "[registry]") {
  std::set<std::string> names;
  for (const OpInfo& op : all_ops()) {
    const std::string name(op.name);
    CAPTURE(name);
    CHECK(names.insert(name).second);  // one line per op
    CHECK(op_name(op.id) == op.name);
    CHECK(op.cuda_policy == expected(name, kCudaLower, kCudaFp32, kCudaPromote, kCudaBanned));
    CHECK(op.cpu_policy == expected(name, kCpuLower, kCpuFp32, kCpuPromote, {}));
    CHECK(amp::cast_policy(op.id, kCUDA) == op.cuda_policy);
    CHECK(amp::cast_policy(op.id, kCPU) == op.cpu_policy);
  }
  // Every op the tables name is in the registry.
  for (const auto* table : {&kCudaLower, &kCudaFp32, &kCudaPromote, &kCudaBanned, &kCpuFp32}) {
    for (const std::string& name : *table) {
      CAPTURE(name);
      CHECK(names.count(name) == 1);
    }
  }
  CHECK(int(all_ops().size()) == kNumOps);
}

TEST_CASE("policies can be overridden at run time and reset", "[registry]") {
  CHECK(amp::cast_policy(OpId::layer_norm, kCUDA) == CastPolicy::Fp32);
  amp::set_cast_policy(OpId::layer_norm, kCUDA, CastPolicy::LowerPrecision);
  CHECK(amp::cast_policy(OpId::layer_norm, kCUDA) == CastPolicy::LowerPrecision);
  CHECK(amp::cast_policy(OpId::layer_norm, kCPU) == CastPolicy::Unlisted);  // per device type
  amp::reset_cast_policies();
  CHECK(amp::cast_policy(OpId::layer_norm, kCUDA) == CastPolicy::Fp32);
  CHECK(cast_policy_name(CastPolicy::LowerPrecision) == "lower_precision_fp");
  CHECK(ops::backward_node_name(OpId::layer_norm) == "LayerNormBackward");
}
