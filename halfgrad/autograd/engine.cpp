// NOTE [The engine] Backward in three steps:
//   1. From the roots, count for every reachable node how many edges point at it.
//   2. Seed the roots' input buffers with the root gradients.
//   3. Repeatedly take the ready node (all its consumers done) with the highest sequence
//      number (recorded last), run it, and add its outputs into the buffers of the nodes its
//      edges point at; a node whose count drops to zero becomes ready.
// Gradients that never arrive at some output of a node are zeros (made from OutputInfo).
// The pass runs with grad mode = create_graph and autocast off: backward ops run in the
// dtypes forward saved, never re-cast (DESIGN §3).
#include "halfgrad/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "halfgrad/amp/autocast_state.h"
#include "halfgrad/autograd/anomaly.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/ops.h"

namespace hg::autograd {

namespace {

struct ByRecordingOrder {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

struct Pass {
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> keep_alive;  // nodes reached, alive until the pass ends

  void count_dependencies(const std::vector<Edge>& roots) {
    std::vector<Node*> stack;
    std::unordered_set<Node*> seen;
    for (const Edge& root : roots) {
      if (root.valid() && seen.insert(root.node.get()).second) stack.push_back(root.node.get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      keep_alive.push_back(node->shared_from_this());
      for (const Edge& edge : node->next_edges) {
        if (!edge.valid()) continue;
        ++dependencies[edge.node.get()];
        if (seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
      }
    }
  }

  void add_to_buffer(const Edge& edge, Tensor gradient) {
    std::vector<Tensor>& buffer = buffers[edge.node.get()];
    if (buffer.size() < edge.node->outputs.size()) buffer.resize(edge.node->outputs.size());
    Tensor& slot = buffer.at(edge.input_nr);
    // The engine accumulates with the add op, so create_graph records the sums too.
    slot = slot.defined() ? add(slot, gradient) : std::move(gradient);
  }
};

Tensor root_gradient(const Tensor& tensor, const Tensor& given) {
  if (given.defined()) {
    HG_CHECK(given.sizes() == tensor.sizes(),
             "backward: the gradient has shape {} but the tensor has shape {}", given.sizes(),
             tensor.sizes());
    return given.dtype() == tensor.dtype() ? given : given.to(tensor.dtype());
  }
  HG_CHECK(tensor.numel() == 1,
           "backward: a gradient can be implied only for a one-element tensor; this one has shape "
           "{}, so pass the gradient explicitly",
           tensor.sizes());
  return ones(tensor.sizes(), tensor.options());
}

// Runs the graph from `roots`. With `capture`, gradients reaching the captured edges are
// returned (in order) and leaves' grad() is left alone.
std::vector<Tensor> run(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
                        bool retain_graph, bool create_graph, const std::vector<Edge>* capture) {
  HG_CHECK(grad_tensors.empty() || grad_tensors.size() == tensors.size(),
           "backward: expected one gradient per tensor ({}), got {}", tensors.size(),
           grad_tensors.size());
  std::vector<Edge> roots;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Edge edge = gradient_edge(tensors[i]);
    HG_CHECK(edge.valid(),
             "backward: tensor {} of shape {} does not require grad and has no grad_fn (was it "
             "made under NoGradGuard, or from tensors that do not require grad?)",
             i, tensors[i].sizes());
    roots.push_back(std::move(edge));
  }

  Pass pass;
  pass.count_dependencies(roots);
  for (size_t i = 0; i < roots.size(); ++i) {
    AutoGradMode mode(create_graph);
    pass.add_to_buffer(
        roots[i], root_gradient(tensors[i], grad_tensors.empty() ? Tensor() : grad_tensors[i]));
  }

  std::unordered_map<Node*, std::vector<std::pair<size_t, uint32_t>>> captured_at;
  std::vector<Tensor> captured;
  if (capture) {
    captured.resize(capture->size());
    for (size_t k = 0; k < capture->size(); ++k) {
      if ((*capture)[k].valid()) {
        captured_at[(*capture)[k].node.get()].push_back({k, (*capture)[k].input_nr});
      }
    }
  }

  AutoGradMode mode(create_graph);
  amp::AutocastOff autocast_off;
  std::priority_queue<Node*, std::vector<Node*>, ByRecordingOrder> ready;
  for (const Edge& root : roots) {
    if (pass.dependencies[root.node.get()] == 0) ready.push(root.node.get());
  }
  std::unordered_set<Node*> done;
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    if (!done.insert(node).second) continue;  // a root listed twice

    std::vector<Tensor> grads = std::move(pass.buffers[node]);
    grads.resize(node->outputs.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) {
        const OutputInfo& info = node->outputs[i];
        grads[i] = zeros(info.sizes, {.dtype = info.dtype, .device = info.device});
      }
    }
    for (const auto& [output_nr, hook] : node->pre_hooks) {
      Tensor replaced = hook(grads.at(output_nr));
      if (replaced.defined()) grads[output_nr] = std::move(replaced);
    }

    const bool is_accumulator = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    if (auto it = captured_at.find(node); it != captured_at.end()) {
      for (const auto& [k, input_nr] : it->second) captured[k] = grads.at(input_nr);
    }
    std::vector<Tensor> input_grads;
    if (!(capture && is_accumulator)) {
      SuspendForwardChecks checked_as_a_node;
      input_grads = node->apply(std::move(grads));
    }
    if (!retain_graph) node->release_saved();
    if (is_anomaly_enabled()) check_backward_outputs(*node, input_grads);

    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& edge = node->next_edges[i];
      if (!edge.valid()) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        pass.add_to_buffer(edge, std::move(input_grads[i]));
      }
      if (--pass.dependencies[edge.node.get()] == 0) ready.push(edge.node.get());
    }
  }
  return captured;
}

}  // namespace

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
              bool retain_graph, bool create_graph) {
  run(tensors, grad_tensors, retain_graph || create_graph, create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool create_graph, bool allow_unused) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge edge = gradient_edge(inputs[i]);
    HG_CHECK(edge.valid(), "grad: input {} (shape {}) does not require grad", i, inputs[i].sizes());
    edges.push_back(std::move(edge));
  }
  std::vector<Tensor> result =
      run(outputs, grad_outputs, retain_graph || create_graph, create_graph, &edges);
  for (size_t i = 0; i < result.size(); ++i) {
    HG_CHECK(result[i].defined() || allow_unused,
             "grad: input {} (shape {}) was not used to compute the outputs; pass "
             "allow_unused=true to get an undefined gradient for it",
             i, inputs[i].sizes());
  }
  return result;
}

}  // namespace hg::autograd
