// The engine: runs the graph backwards from some tensors, in reverse recording order,
// iteratively (no recursion, so deep graphs do not overflow the stack).
#pragma once

#include <functional>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::autograd {

class Node;

// Accumulates d(sum_i <tensors[i], grad_tensors[i]>)/d(leaf) into every leaf's grad().
// grad_tensors[i] may be undefined for a one-element tensors[i] (it is then 1).
// Unless retain_graph, the graph's saved tensors are freed as it runs. With create_graph
// the backward pass is itself recorded, so the gradients can be differentiated again.
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              bool retain_graph = false, bool create_graph = false);
// The same for one tensor (Tensor::backward), without building the lists.
void backward(const Tensor& tensor, const Tensor& gradient, bool retain_graph, bool create_graph);

// The gradients of the outputs w.r.t. the inputs, returned instead of accumulated into
// grad() (no leaf's grad() changes). An input the outputs do not depend on is an error
// unless allow_unused (its gradient is then undefined).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

// Code above autograd/ that wants to see each node the engine applies on this thread (the
// profiler) derives from NodeObserver; while it lives, the engine calls on_node_begin before a
// node's apply and on_node_end after it, also when apply threw. Observers form a per-thread list
// as the dispatch observers do (ops/observer.h): with none alive the engine's cost is one
// thread-local load per node, and an observer must not be moved.
class NodeObserver {
 public:
  NodeObserver(const NodeObserver&) = delete;
  NodeObserver& operator=(const NodeObserver&) = delete;

  virtual void on_node_begin(const Node& node) = 0;
  virtual void on_node_end(const Node& node) noexcept = 0;

 protected:
  NodeObserver();           // joins this thread's list, first
  virtual ~NodeObserver();  // leaves it

 private:
  friend class NodeObserverList;
  NodeObserver* next_ = nullptr;
};

// a + b, two gradients of one tensor, summed as the engine sums them: with the add op, so that
// under create_graph the sum is recorded too. (The engine calls the add op of ops/: the one
// place the autograd layer reaches above itself, docs/design.md §1.)
Tensor add_gradients(const Tensor& a, const Tensor& b);

// Queues `callback` to run on this thread once the innermost backward pass running here has
// applied its last node (torch's Variable._execution_engine.queue_callback): after every
// gradient of the pass has reached its leaves, before backward() returns. Callbacks run in
// the order queued, and one may queue another. A pass that throws drops its callbacks.
// Throws outside a backward pass.
void queue_callback(std::function<void()> callback);

// True while a backward pass runs on this thread: inside its nodes, and between them (where the
// engine sums the gradients that reach one tensor twice).
bool is_backward_running();

}  // namespace hg::autograd
