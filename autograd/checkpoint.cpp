// Gradient checkpointing (checkpoint.h).
#include "halfgrad/autograd/checkpoint.h"

#include <algorithm>
#include <unordered_set>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/autocast_mode.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"

namespace hg::utils {

namespace {

using autograd::Edge;
using autograd::GradList;
using autograd::Node;

// One node for a checkpointed fn: its edges lead to the inputs that need a gradient, then to
// the parameters fn used.
class CheckpointNode final : public Node {
 public:
  std::string name() const override { return "CheckpointBackward"; }

  GradList apply(GradList&& grad_outputs) override {
    HG_CHECK(!released_,
             "checkpoint: the segment was already backpropagated through (use "
             "retain_graph on the first backward to go through it twice)");
    // The engine runs with grad mode on only under create_graph. The recomputed graph ends at
    // detached copies of the inputs, so a recorded backward would lose the inputs' second-order
    // terms: refused rather than wrong.
    HG_CHECK(!autograd::is_grad_enabled(),
             "checkpoint: backward with create_graph (double backward) through a checkpointed "
             "segment is not supported; run the segment without checkpoint");
    // Recompute under the forward's autocast mode and random state; the caller's random state
    // is restored afterwards, so backward does not change what later draws give.
    Generator& generator = default_generator();
    const auto resume = generator.get_state();
    generator.set_state(rng_state_);
    std::vector<Tensor> xs;
    std::vector<Tensor> wrt;
    Tensor y;
    try {
      AutocastModeGuard mode(autocast_);
      EnableGradGuard grad_on;
      for (size_t i = 0; i < inputs_.size(); ++i) {
        Tensor x = inputs_[i].unpack("CheckpointBackward").detach();
        if (input_needs_[i]) x.requires_grad_();
        xs.push_back(x);
        if (input_needs_[i]) wrt.push_back(x);
      }
      y = fn_(xs);
    } catch (...) {
      generator.set_state(resume);
      throw;
    }
    generator.set_state(resume);
    for (const Tensor& p : parameters_) wrt.push_back(p);
    HG_CHECK(y.defined() && y.requires_grad(),
             "checkpoint: recomputing the segment gave an output without history");
    std::vector<Tensor> grads = autograd::grad({y}, wrt, {grad_outputs.at(0)},
                                               /*retain_graph=*/false, /*create_graph=*/false,
                                               /*allow_unused=*/true);
    return GradList(std::make_move_iterator(grads.begin()), std::make_move_iterator(grads.end()));
  }

  void release_saved() override {
    for (autograd::SavedTensor& s : inputs_) s.release();
    released_ = true;
  }

  std::function<Tensor(const std::vector<Tensor>&)> fn_;
  std::vector<autograd::SavedTensor> inputs_;
  std::vector<bool> input_needs_;
  std::vector<Tensor> parameters_;
  Generator::State rng_state_;
  AutocastMode autocast_;
  bool released_ = false;
};

bool same_edge(const Edge& a, const Edge& b) {
  return a.node == b.node && a.input_nr == b.input_nr;
}

}  // namespace

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs) {
  HG_CHECK(bool(fn), "checkpoint: expected a function, got none");
  if (!autograd::is_grad_enabled()) return fn(inputs);
  auto node = std::make_shared<CheckpointNode>();
  node->rng_state_ = default_generator().get_state();
  node->autocast_ = autocast_mode();
  const uint64_t boundary = autograd::next_sequence_nr();
  Tensor y = fn(inputs);
  HG_CHECK(y.defined(), "checkpoint: the function returned an undefined tensor");
  if (!y.requires_grad() || y.grad_fn() == nullptr) return y;

  // The edges fn's graph takes out of itself (NOTE [Checkpoint boundary]).
  std::vector<Edge> input_edges;
  for (const Tensor& x : inputs) {
    input_edges.push_back(x.defined() && x.requires_grad() ? autograd::gradient_edge(x) : Edge{});
  }
  std::vector<bool> input_used(inputs.size(), false);
  std::vector<Tensor> parameters;
  std::unordered_set<const Node*> visited, parameter_nodes;
  std::vector<Node*> stack = {y.grad_fn().get()};
  visited.insert(stack.back());
  while (!stack.empty()) {
    Node* current = stack.back();
    stack.pop_back();
    for (const Edge& edge : current->next_edges) {
      if (!edge.valid()) continue;
      const auto input = std::find_if(input_edges.begin(), input_edges.end(),
                                      [&](const Edge& e) { return same_edge(e, edge); });
      if (input != input_edges.end()) {
        input_used[size_t(input - input_edges.begin())] = true;
        continue;
      }
      if (auto* accumulate = dynamic_cast<autograd::AccumulateGrad*>(edge.node.get())) {
        if (parameter_nodes.insert(accumulate).second) {
          const Tensor leaf = accumulate->leaf();
          if (leaf.defined()) parameters.push_back(leaf);
        }
        continue;
      }
      HG_CHECK(edge.node->sequence_nr() > boundary,
               "checkpoint: the function uses a tensor with history (grad_fn {}) that is not "
               "one of its inputs; pass it as an input so its gradient can reach it",
               edge.node->name());
      if (visited.insert(edge.node.get()).second) stack.push_back(edge.node.get());
    }
  }

  node->fn_ = fn;
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->inputs_.emplace_back(inputs[i].defined() ? inputs[i].detach() : Tensor(),
                               /*is_output=*/false);
    node->input_needs_.push_back(input_used[i]);
    if (input_used[i]) node->next_edges.push_back(input_edges[i]);
  }
  for (const Tensor& p : parameters) node->next_edges.push_back(autograd::gradient_edge(p));
  node->parameters_ = std::move(parameters);
  // The output without fn's graph (dropped here with y), with this node as its history.
  Tensor out = y.detach();
  node->outputs.push_back({out.sizes(), out.dtype(), out.device()});
  autograd::set_history(out, node, 0);
  return out;
}

}  // namespace hg::utils
