// NOTE [The engine] Backward in three steps:
//   1. From the roots, count for every reachable node how many edges point at it.
//   2. Seed the roots' input buffers with the root gradients.
//   3. Repeatedly take the ready node (all its consumers done) with the highest sequence
//      number (recorded last), run it, and add its outputs into the buffers of the nodes its
//      edges point at; a node whose count drops to zero becomes ready.
// Gradients that never arrive at some output of a node are zeros (made from OutputInfo).
// The pass runs with grad mode = create_graph and autocast off: backward ops run in the
// dtypes forward saved, never re-cast (docs/design.md §3).
#include "halfgrad/autograd/engine.h"

#include <algorithm>
#include <memory>
#include <span>
#include <unordered_map>

#include "halfgrad/autograd/anomaly.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/autocast_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/ops.h"  // add: the one include above this layer (docs/design.md §1)

namespace hg::autograd {

// ---- node observers ----------------------------------------------------------------------------

static thread_local constinit NodeObserver* first_node_observer = nullptr;

NodeObserver::NodeObserver() : next_(first_node_observer) { first_node_observer = this; }

NodeObserver::~NodeObserver() {
  NodeObserver** link = &first_node_observer;
  while (*link != nullptr && *link != this) link = &(*link)->next_;
  if (*link == this) *link = next_;
}

class NodeObserverList {
 public:
  static void begin(const Node& node) {
    for (NodeObserver* o = first_node_observer; o != nullptr; o = o->next_) o->on_node_begin(node);
  }
  static void end(const Node& node) noexcept {
    for (NodeObserver* o = first_node_observer; o != nullptr; o = o->next_) o->on_node_end(node);
  }
};

// Tells this thread's node observers that the engine applies `node`, for as long as it lives
// (so they hear the end also when apply throws).
class ObservedNode {
 public:
  explicit ObservedNode(const Node* node);
  ~ObservedNode();
  ObservedNode(const ObservedNode&) = delete;
  ObservedNode& operator=(const ObservedNode&) = delete;

 private:
  const Node* node_;
};

ObservedNode::ObservedNode(const Node* node)
    : node_(first_node_observer != nullptr ? node : nullptr) {
  if (node_ != nullptr) NodeObserverList::begin(*node_);
}

ObservedNode::~ObservedNode() {
  if (node_ != nullptr) NodeObserverList::end(*node_);
}

namespace {

struct ByRecordingOrder {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// What a pass knows about one node it reached.
struct NodeState {
  Node* node = nullptr;
  int dependencies = 0;  // edges from nodes not run yet
  bool done = false;     // run already (a root listed twice runs once)
  GradList buffer;       // the gradients of its outputs, summed as they arrive
};

// NOTE [Engine node table] The per-node state of a pass lives in one open-addressing table
// keyed by the node's address: a training step's graph has a handful of nodes, and a
// node-based hash map allocated once per node and per lookup structure, which cost more than
// the small ops themselves. The table grows (doubling) when half full.
class NodeTable {
 public:
  NodeTable() : slots_(32) {}

  // The state of node, added (zeroed) if new; `added` tells which.
  // The reference lasts until the next node is added.
  NodeState& at(Node* node, bool* added = nullptr) {
    NodeState* slot = &probe(slots_, node);
    if (added) *added = slot->node == nullptr;
    if (slot->node == nullptr) {
      if (2 * (size_ + 1) > slots_.size()) {
        grow();
        slot = &probe(slots_, node);
      }
      slot->node = node;
      ++size_;
    }
    return *slot;
  }

 private:
  static NodeState& probe(std::vector<NodeState>& slots, const Node* node) {
    const size_t mask = slots.size() - 1;
    size_t i = (reinterpret_cast<uintptr_t>(node) >> 4) * 0x9E3779B97F4A7C15ull >> 32 & mask;
    while (slots[i].node != nullptr && slots[i].node != node) i = (i + 1) & mask;
    return slots[i];
  }
  void grow() {
    std::vector<NodeState> bigger(2 * slots_.size());
    for (NodeState& slot : slots_) {
      if (slot.node != nullptr) probe(bigger, slot.node) = std::move(slot);
    }
    slots_ = std::move(bigger);
  }

  std::vector<NodeState> slots_;  // a power-of-two count
  size_t size_ = 0;

 public:
  // Empties the table, keeping its slots.
  void clear() {
    if (size_ == 0) return;
    for (NodeState& slot : slots_) {
      if (slot.node != nullptr) slot = NodeState{};
    }
    size_ = 0;
  }
};

struct Pass {
  NodeTable nodes;
  std::vector<std::shared_ptr<Node>> keep_alive;  // nodes reached, alive until the pass ends
  std::vector<Edge> roots;
  std::vector<Node*> stack;  // count_dependencies' walk
  std::vector<Node*> ready;  // a heap by ByRecordingOrder: the node recorded last on top
  std::vector<std::function<void()>> callbacks;  // queue_callback's, run when the graph is done

  // Forgets the pass (releasing the nodes it kept alive), keeping the memory.
  void clear() {
    nodes.clear();
    keep_alive.clear();
    roots.clear();
    stack.clear();
    ready.clear();
    callbacks.clear();
  }

  void push_ready(Node* node) {
    ready.push_back(node);
    std::push_heap(ready.begin(), ready.end(), ByRecordingOrder{});
  }
  Node* pop_ready() {
    std::pop_heap(ready.begin(), ready.end(), ByRecordingOrder{});
    Node* node = ready.back();
    ready.pop_back();
    return node;
  }

  // (keep_alive copies the edges' pointers: a plain count increment, where shared_from_this
  // would lock a weak pointer.)
  void count_dependencies(const std::vector<Edge>& from) {
    bool added = false;
    for (const Edge& root : from) {
      if (!root.valid()) continue;
      nodes.at(root.node.get(), &added);
      if (added) {
        stack.push_back(root.node.get());
        keep_alive.push_back(root.node);
      }
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& edge : node->next_edges) {
        if (!edge.valid()) continue;
        ++nodes.at(edge.node.get(), &added).dependencies;
        if (added) {
          stack.push_back(edge.node.get());
          keep_alive.push_back(edge.node);
        }
      }
    }
  }

  void add_to_buffer(const Edge& edge, Tensor gradient) {
    GradList& buffer = nodes.at(edge.node.get()).buffer;
    if (buffer.size() < edge.node->outputs.size()) buffer.resize(edge.node->outputs.size());
    Tensor& slot = buffer.at(edge.input_nr);
    // The engine accumulates with the add op, so create_graph records the sums too.
    slot = slot.defined() ? add(slot, gradient) : std::move(gradient);
  }
};

// NOTE [Reused pass state] A backward pass needs a node table, a walk stack, a ready heap and
// the list of nodes it keeps alive: for a small step's graph, making and freeing them cost
// more than the bookkeeping in them. Each thread keeps the state of its finished passes and
// leases it to the next one (a pass started inside a pass, from a hook, gets its own).
thread_local constinit int running_passes = 0;
thread_local constinit Pass* innermost_pass = nullptr;

class PassLease {
 public:
  PassLease() : outer_(innermost_pass) {
    ++running_passes;
    std::vector<std::unique_ptr<Pass>>& free = free_passes();
    if (free.empty()) {
      pass_ = std::make_unique<Pass>();
    } else {
      pass_ = std::move(free.back());
      free.pop_back();
    }
    innermost_pass = pass_.get();
  }
  ~PassLease() {
    --running_passes;
    innermost_pass = outer_;
    pass_->clear();
    std::vector<std::unique_ptr<Pass>>& free = free_passes();
    if (free.size() < 4) free.push_back(std::move(pass_));
  }
  PassLease(const PassLease&) = delete;
  PassLease& operator=(const PassLease&) = delete;
  Pass& operator*() { return *pass_; }
  Pass* operator->() { return pass_.get(); }

 private:
  static std::vector<std::unique_ptr<Pass>>& free_passes() {
    thread_local std::vector<std::unique_ptr<Pass>> free;
    return free;
  }
  std::unique_ptr<Pass> pass_;
  Pass* outer_;  // the pass this one runs inside (from a hook), or null
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
std::vector<Tensor> run(std::span<const Tensor> tensors, std::span<const Tensor> grad_tensors,
                        bool retain_graph, bool create_graph, const std::vector<Edge>* capture) {
  HG_CHECK(grad_tensors.empty() || grad_tensors.size() == tensors.size(),
           "backward: expected one gradient per tensor ({}), got {}", tensors.size(),
           grad_tensors.size());
  PassLease lease;
  Pass& pass = *lease;
  std::vector<Edge>& roots = pass.roots;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Edge edge = gradient_edge(tensors[i]);
    HG_CHECK(edge.valid(),
             "backward: tensor {} of shape {} does not require grad and has no grad_fn (was it "
             "made under NoGradGuard, or from tensors that do not require grad?)",
             i, tensors[i].sizes());
    roots.push_back(std::move(edge));
  }

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
  AutocastModeGuard autocast_off(autocast_mode().all_off());
  for (const Edge& root : roots) {
    if (pass.nodes.at(root.node.get()).dependencies == 0) pass.push_ready(root.node.get());
  }
  while (!pass.ready.empty()) {
    Node* node = pass.pop_ready();
    NodeState& state = pass.nodes.at(node);
    if (state.done) continue;  // a root listed twice
    state.done = true;

    GradList grads = std::move(state.buffer);
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

    if (auto it = capture ? captured_at.find(node) : captured_at.end(); it != captured_at.end()) {
      for (const auto& [k, input_nr] : it->second) captured[k] = grads.at(input_nr);
    }
    GradList input_grads;
    if (!(capture && dynamic_cast<AccumulateGrad*>(node) != nullptr)) {
      SuspendForwardChecks checked_as_a_node;
      ObservedNode observed(node);
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
      if (--pass.nodes.at(edge.node.get()).dependencies == 0) pass.push_ready(edge.node.get());
    }
  }
  // By index: a callback may queue another.
  for (size_t i = 0; i < pass.callbacks.size(); ++i) {
    std::function<void()> callback = std::move(pass.callbacks[i]);
    callback();
  }
  return captured;
}

}  // namespace

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
              bool retain_graph, bool create_graph) {
  run(tensors, grad_tensors, retain_graph || create_graph, create_graph, nullptr);
}

void backward(const Tensor& tensor, const Tensor& gradient, bool retain_graph, bool create_graph) {
  run(std::span<const Tensor>(&tensor, 1), std::span<const Tensor>(&gradient, 1),
      retain_graph || create_graph, create_graph, nullptr);
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

Tensor add_gradients(const Tensor& a, const Tensor& b) { return add(a, b); }

void queue_callback(std::function<void()> callback) {
  HG_CHECK(innermost_pass != nullptr,
           "queue_callback: expected to be called during a backward pass (from a hook or a "
           "node), got a call outside one");
  innermost_pass->callbacks.push_back(std::move(callback));
}

bool is_backward_running() { return running_passes > 0; }

}  // namespace hg::autograd
