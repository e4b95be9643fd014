// autocast_tour: what amp::Autocast does to each op of a small model, op by op.
//
// Builds Linear -> LayerNorm -> GELU -> Linear -> cross_entropy, runs the forward twice (two
// micro-batches) inside one amp::Autocast(kCPU, bf16 or fp16) region while an
// amp::AutocastTrace records every op, and prints:
//   1. the trace table: each op with the cast policy autocast applied and the dtypes that went
//      in and came out;
//   2. a summary read off the trace: which ops produced 16-bit results, which float32;
//   3. the weight-cast cache: the float32 weights are cast to 16 bits once per region, so the
//      second micro-batch reuses the casts of the first (amp::weight_cast_cache_size());
//   4. the same ops' policies on CUDA (amp::cast_policy(op, kCUDA)) next to the CPU ones.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

bool is_16_bit(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16; }

std::string join_ops(const std::vector<OpId>& ops) {
  std::string out;
  for (OpId op : ops) {
    if (!out.empty()) out += ", ";
    out += op_name(op);
  }
  return out.empty() ? "(none)" : out;
}

void add_unique(std::vector<OpId>& ops, OpId op) {
  if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"autocast_tour: the cast policy of each op of a small model under autocast"};
  std::string dtype_flag = "bf16";
  uint64_t seed = 0;
  app.add_option("--dtype", dtype_flag, "the autocast dtype of the CPU region")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  app.add_option("--seed", seed, "seed of the weights and the inputs");
  CLI11_PARSE(app, argc, argv);
  const DType autocast_dtype = dtype_flag == "fp16" ? kFloat16 : kBFloat16;

  manual_seed(seed);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 16), nn::LayerNorm(16), nn::GELU(),
                                                nn::Linear(16, 4));
  const Tensor x1 = randn({6, 8});
  const Tensor x2 = randn({6, 8});
  const Tensor labels = tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1});
  const size_t num_params = model->parameters().size();

  // The trace covers the autocast region only: the backward below records nothing.
  auto trace = std::make_unique<amp::AutocastTrace>();
  Tensor loss1, loss2;
  size_t cache_after_first = 0;
  size_t cache_after_second = 0;
  {
    amp::Autocast autocast(kCPU, autocast_dtype);
    loss1 = nn::functional::cross_entropy(model->forward(x1), labels);
    cache_after_first = amp::weight_cast_cache_size();
    loss2 = nn::functional::cross_entropy(model->forward(x2), labels);
    cache_after_second = amp::weight_cast_cache_size();
  }
  const std::vector<amp::TraceEntry> entries = trace->entries();
  const std::string table = trace->table();
  trace.reset();
  // backward runs outside autocast; each gradient has its parameter's dtype.
  const Tensor loss = (loss1 + loss2) / 2.0;
  loss.backward();

  fmt::print("halfgrad {} - autocast on cpu with {}\n\n", HALFGRAD_VERSION,
             dtype_name(autocast_dtype));
  fmt::print("1. every op of two forward passes, as autocast saw it:\n\n{}\n", table);

  std::vector<OpId> low_precision, full_precision, all_ops_seen;
  for (const amp::TraceEntry& entry : entries) {
    add_unique(all_ops_seen, entry.op);
    const bool low = std::any_of(entry.output_dtypes.begin(), entry.output_dtypes.end(), is_16_bit);
    const bool fp32 = std::find(entry.output_dtypes.begin(), entry.output_dtypes.end(), kFloat32) !=
                      entry.output_dtypes.end();
    if (low) add_unique(low_precision, entry.op);
    if (fp32) add_unique(full_precision, entry.op);
  }
  fmt::print("2. what the table says:\n");
  fmt::print(
      "   gave {} (lower_precision_fp: the matmul-like ops, where 16 bits pay; then the\n"
      "   unlisted ops that were handed their 16-bit outputs): {}\n",
      dtype_name(autocast_dtype), join_ops(low_precision));
  fmt::print(
      "   gave float32 (fp32 policy: reductions and losses, where 16 bits lose accuracy;\n"
      "   or promote/unlisted ops whose inputs were float32): {}\n",
      join_ops(full_precision));
  fmt::print(
      "   unlisted ops run in whatever dtype they are given, so a 16-bit activation stays\n"
      "   16-bit through them; the loss comes out float32: {}\n",
      dtype_name(loss.dtype()));
  fmt::print("   the gradients stay float32 like the parameters: {}.weight.grad is {}\n\n", "0",
             dtype_name(model->at<nn::Linear>(0)->weight.grad().dtype()));

  fmt::print("3. the weight-cast cache (inside the region):\n");
  fmt::print(
      "   after the first forward:  {} cached casts ({} parameters in the model; the others\n"
      "   feed ops that do not cast to 16 bits)\n",
      cache_after_first, num_params);
  fmt::print("   after the second forward: {} cached casts\n", cache_after_second);
  fmt::print(
      "   the second forward used the same weights, so it found their {} copies in the\n"
      "   cache: {} casts saved. The cache empties when the outermost Autocast ends\n"
      "   (now: {}).\n\n",
      dtype_name(autocast_dtype), cache_after_second, amp::weight_cast_cache_size());

  fmt::print("4. the same ops' policies per device (CUDA autocasts to float16 by default):\n\n");
  fmt::print("   {:<16} {:<20} {}\n", "op", "cpu policy", "cuda policy");
  for (OpId op : all_ops_seen) {
    fmt::print("   {:<16} {:<20} {}\n", op_name(op), cast_policy_name(amp::cast_policy(op, kCPU)),
               cast_policy_name(amp::cast_policy(op, kCUDA)));
  }
  for (OpId op : all_ops_seen) {
    if (amp::cast_policy(op, kCPU) != amp::cast_policy(op, kCUDA)) {
      fmt::print("   {} differs: on CUDA it would run as {}, here it ran as {}\n", op_name(op),
                 cast_policy_name(amp::cast_policy(op, kCUDA)),
                 cast_policy_name(amp::cast_policy(op, kCPU)));
    }
  }
  if (cache_after_second != cache_after_first || low_precision.empty() ||
      loss.dtype() != kFloat32) {
    fmt::print("\nautocast_tour: unexpected result (see above)\n");
    return 1;
  }
  return 0;
}
