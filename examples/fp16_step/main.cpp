// fp16_step: one float16 training step (autocast + GradScaler + AdamW) on the CPU, printed
// stage by stage. docs/walkthrough.md follows this step through halfgrad's code and quotes
// this program's output; a test checks that every quoted block is what the program prints.
//
// The model is two Linear layers with a GELU between them; the batch is two rows of four
// features and their classes. Everything printed is exact (dtypes, shapes, names, powers of
// two, counts), so the output is the same on every machine.
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

void section(const char* title) { fmt::print("\n== {}\n", title); }

std::string describe(const Tensor& t) { return fmt::format("{} {}", t.dtype(), t.sizes()); }

// The graph below `node`, one node a line, indented by depth; leaves named by `leaf_names`.
void print_graph(const std::shared_ptr<autograd::Node>& node,
                 const std::map<const autograd::Node*, std::string>& leaf_names, int depth) {
  std::string line = fmt::format("{:{}}{}", "", 2 * depth, node->name());
  if (auto it = leaf_names.find(node.get()); it != leaf_names.end()) {
    line += fmt::format(" -> {}.grad()", it->second);
  }
  fmt::print("{}\n", line);
  for (const autograd::Edge& edge : node->next_edges) {
    if (edge.valid()) print_graph(edge.node, leaf_names, depth + 1);
  }
}

// The largest |g| over every parameter's gradient, in double.
double max_abs_grad(const std::vector<std::pair<std::string, Tensor>>& params) {
  double m = 0;
  for (const auto& [name, p] : params) m = std::max(m, amax(abs(p.grad())).item<double>());
  return m;
}

std::string power_of_two(double value) {
  const double exponent = std::log2(value);
  return exponent == std::floor(exponent) ? fmt::format("2^{}", int(exponent))
                                          : fmt::format("{}", value);
}

}  // namespace

int main() {
  manual_seed(0);
  auto fc1 = std::make_shared<nn::Linear>(4, 8);
  auto fc2 = std::make_shared<nn::Linear>(8, 3);
  nn::Sequential model(fc1, nn::GELU(), fc2);
  const Tensor x = randn({2, 4});
  const Tensor targets = tensor(std::vector<int64_t>{0, 2});
  optim::AdamW opt(model.parameters(), {.lr = 1e-3});
  amp::GradScaler scaler;  // torch's defaults: init_scale 2^16, growth_interval 2000
  const auto params = model.named_parameters();

  section("1. the model, the batch and the optimizer");
  for (const auto& [name, p] : params) fmt::print("{:<9} {}\n", name, describe(p));
  fmt::print("x         {}\ntargets   {}\n", describe(x), describe(targets));

  section("2. the forward, inside amp::Autocast(kCPU, kFloat16)");
  Tensor hidden, loss;
  std::vector<DType> hidden_grad_dtypes;
  {
    amp::AutocastTrace trace;
    amp::Autocast autocast(kCPU, kFloat16);
    hidden = fc1->forward(x);
    const Tensor logits = fc2->forward(gelu(hidden));
    loss = nn::functional::cross_entropy(logits, targets);
    fmt::print("{}", trace.table());
    fmt::print("weight-cast cache: {} casts (each float32 parameter cast to float16 once)\n",
               amp::weight_cast_cache_size());
  }
  fmt::print("after the region: weight-cast cache {}, loss {}\n", amp::weight_cast_cache_size(),
             describe(loss));
  hidden.register_hook([&](const Tensor& grad) {
    hidden_grad_dtypes.push_back(grad.dtype());
    return Tensor();
  });

  section("3. the graph autograd recorded");
  std::map<const autograd::Node*, std::string> leaf_names;
  for (const auto& [name, p] : params) leaf_names[autograd::gradient_edge(p).node.get()] = name;
  print_graph(loss.grad_fn(), leaf_names, 0);

  section("4. scaler.scale(loss).backward()");
  const Tensor scaled = scaler.scale(loss);
  fmt::print("scale {}; scaled loss {}\n", power_of_two(scaler.get_scale()), describe(scaled));
  scaled.backward();
  fmt::print("gradient reaching fc1's float16 output: {}\n",
             hidden_grad_dtypes.empty() ? std::string("none") : dtype_name(hidden_grad_dtypes[0]));
  for (const auto& [name, p] : params) {
    fmt::print("{:<9} grad {}\n", name, describe(p.grad()));
  }

  section("5. scaler.unscale_(opt)");
  const double scaled_max = max_abs_grad(params);
  scaler.unscale_(opt);
  const double unscaled_max = max_abs_grad(params);
  fmt::print("largest |grad| before / after: {}\n", power_of_two(scaled_max / unscaled_max));

  section("6. scaler.step(opt)");
  std::vector<Tensor> before;
  for (const auto& [name, p] : params) before.push_back(p.clone());
  const bool stepped = bool(scaler.step(opt));
  fmt::print("found an inf or NaN: {}; AdamW stepped: {}\n", !stepped, stepped);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    const int64_t changed = sum(ne(p, before[i]).to(kInt64)).item<int64_t>();
    fmt::print("{:<9} {} of {} elements changed, AdamW step count {}\n", params[i].first,
               changed, p.numel(), opt.state(0, i).step_count());
  }

  section("7. scaler.update()");
  scaler.update();
  fmt::print("scale {} (a clean step: the growth tracker counts it, 2000 clean steps double "
             "the scale)\n",
             power_of_two(scaler.get_scale()));
  return 0;
}
