// The autograd graph: a Node per recorded op, Edges to the nodes of its inputs, and the
// per-tensor AutogradMeta that ties a tensor to the node that made it.
//
//   y = mul(a, b)        y.grad_fn() = MulBackward, with edges to a's and b's nodes
//                        (a leaf's node is its AccumulateGrad, which adds into a.grad())
//
// Nodes are ordered by a sequence number that grows as ops are recorded, so the engine can
// walk the graph in reverse recording order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/core/object_pool.h"
#include "halfgrad/core/tensor.h"

namespace hg::autograd {

class Node;

// Input `input_nr` of `node` (a null node: the input needs no gradient).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;

  bool valid() const { return node != nullptr; }
};

// A gradient hook: returns a replacement for the gradient, or an undefined tensor to keep it.
// A node's edges (and its outputs' metadata) come from the object pool: every recorded op
// makes a few such short lists (NOTE [Object pool]).
using EdgeList = std::vector<Edge, PoolAllocator<Edge>>;
// The gradients a node takes and returns, from the pool for the same reason.
using GradList = std::vector<Tensor, PoolAllocator<Tensor>>;

using Hook = std::function<Tensor(const Tensor&)>;
// A hook run on a leaf after its gradient was added into grad(); it sees the leaf.
using PostAccumulateGradHook = std::function<void(const Tensor&)>;

// What autograd knows about a tensor. Tensors that never took part in autograd have none.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                    // accumulated gradient (leaves, or retain_grad)
  std::shared_ptr<Node> grad_fn;  // the node that produced this tensor (null for leaves)
  uint32_t output_nr = 0;         // which output of grad_fn this tensor is
  // A leaf's AccumulateGrad, made on first use and kept (NOTE [Kept AccumulateGrad]).
  std::shared_ptr<Node> grad_accumulator;
  std::vector<Hook> leaf_hooks;  // hooks of a leaf, run before accumulation
  std::vector<PostAccumulateGradHook> post_accumulate_hooks;  // run after accumulation
  bool retains_grad = false;
};

// The metadata of an output, so that a gradient that never arrives can be made as zeros.
struct OutputInfo {
  Shape sizes;
  DType dtype = kFloat32;
  Device device;
};

uint64_t next_sequence_nr();

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node() : sequence_nr_(next_sequence_nr()) {}
  // Tears down the nodes this one alone keeps alive iteratively (NOTE [Graph teardown]).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MulBackward", "AccumulateGrad", ...
  virtual std::string name() const = 0;
  // Gradients of the outputs (one per output, each defined) -> gradients of the inputs (one
  // per edge; undefined where an input needs none).
  virtual GradList apply(GradList&& grad_outputs) = 0;
  // Frees saved tensors once a backward pass without retain_graph has used them.
  virtual void release_saved() {}

  uint64_t sequence_nr() const { return sequence_nr_; }

  EdgeList next_edges;
  std::vector<OutputInfo, PoolAllocator<OutputInfo>> outputs;
  // Hooks on the gradient of output `output_nr`, run before apply.
  std::vector<std::pair<uint32_t, Hook>> pre_hooks;
  // For anomaly mode: the forward op and its inputs, recorded when the node was made.
  std::string creation_context;

 private:
  uint64_t sequence_nr_;
};

// The node of a leaf that requires grad: adds the incoming gradient into the leaf's grad.
// It holds the leaf weakly: the leaf's meta holds it (NOTE [Kept AccumulateGrad]).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf);
  std::string name() const override { return "AccumulateGrad"; }
  GradList apply(GradList&& grad_outputs) override;
  // The leaf, or an undefined tensor once it is gone.
  Tensor leaf() const {
    std::shared_ptr<TensorImpl> held = leaf_.lock();
    return held ? Tensor(std::move(held)) : Tensor();
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// A tensor saved for backward, with the version it had when saved (NOTE [Version counter]).
// An op's own output is held without its grad_fn (which would be a cycle: the node would
// own the tensor that owns the node) and gets it back, weakly, when unpacked.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& tensor, bool is_output);

  // The saved tensor; throws if it was modified in place since it was saved, or if the
  // graph was already freed. `saved_by` names the node for the message.
  Tensor unpack(std::string_view saved_by) const;
  // The same checks, but the data alone, without autograd history (for a kernel that only
  // reads it; cheaper than unpack for an output).
  Tensor unpack_data(std::string_view saved_by) const;
  void release() {
    data_ = Tensor();
    released_ = true;
  }
  bool defined() const { return data_.defined() || released_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool is_output_ = false;
  bool released_ = false;
  std::weak_ptr<Node> grad_fn_;  // for outputs only
  uint32_t output_nr_ = 0;
  bool requires_grad_ = false;
};

// ---- tensor <-> graph ---------------------------------------------------------------------------

// The meta of t, created on first use.
AutogradMeta& meta(const Tensor& t);
// The meta of t, or null.
AutogradMeta* meta_or_null(const Tensor& t);
// The edge through which a gradient for t flows: (grad_fn, output_nr), a leaf's
// AccumulateGrad, or an invalid edge when t needs no gradient.
Edge gradient_edge(const Tensor& t);
// Makes `node` the grad_fn of output `output_nr` = t.
void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr);

}  // namespace hg::autograd
