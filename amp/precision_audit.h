// PrecisionAudit: which op loses precision. While an audit lives, every op its thread's code
// calls (forward and backward) is run a second time in float64 on the same inputs, and its
// low-precision outputs are compared with the float64 ones:
//
//   amp::PrecisionAudit audit(model.get());   // names ops by module
//   {
//     amp::Autocast autocast(kCPU, kBFloat16);
//     loss = nn::functional::cross_entropy(model->forward(x), y);
//   }
//   loss.backward();
//   audit.stop();
//   fmt::print("{}", audit.table(10, /*worst_first=*/true));
//   audit.write_csv("audit.csv");
//   audit.write_svg("audit.svg");           // error by module, forward and backward
//
// It answers "which op loses precision in fp16/bf16/fp8" as OverflowWatch answers "which op
// overflowed".
//
// NOTE [Precision audit] What is measured. Each outermost op call (the call a user or a
// backward formula wrote, as autocast sees it; a composite op's inner calls are part of its
// error) whose outputs include a floating tensor narrower than float64 is rerun on float64
// copies of its inputs as the caller gave them, before autocast's casts (NOTE [Op reruns]). So an
// op's error is everything autocast and the kernel cost it on those inputs: the casts of its
// inputs, the arithmetic, and the rounding of its output; errors that came from earlier ops are
// not counted again, since both runs start from the same values. Per call, over its floating
// outputs narrower than float64 (y, reference r):
//   rel_error      ||y - r||_2 / ||r||_2
//   max_rel_error  max |y - r| / max |r|
//   ulps           |y - r| / ulp(r), ulp in y's dtype (subnormal spacing below its normals);
//                  max and mean over the elements
// An op "grows" the error when rel_error > growth_threshold * u, u the unit roundoff of its
// output dtype (2^-11 float16, 2^-8 bfloat16, 2^-24 float32, finfo(dtype).eps / 2): a correctly
// rounded op on exact inputs stays below u; the default threshold 2 flags the ops that lose
// more than the roundings of their inputs and output. first_growth() is the first such call in
// execution order.
// Backward nodes are measured as wholes too (NOTE [Precision audit of backward nodes]).
// Not measured, reported with the reason: views and in-place ops (an output shares an input's
// memory, or an input was written: their inputs are gone by the time the op returns), ops whose
// float64 rerun throws (a kernel without float64), ops that fix their output dtype (a cast to
// float16 has no float64 answer), and ops whose struct cannot be copied. Ops that draw random
// numbers (dropout) rerun with the same draws. The audit's own work (the reruns and the
// comparisons) is hidden from every observer and leaves the step's tensors and random stream
// as they would be without it. Cost: each audited op runs again in float64 and both outputs
// are read on the host, so an audited step is several times slower: audit one step.
//
// NOTE [Precision audit of backward nodes] A first-order backward often dispatches no op (the
// fused kernels of the norms, conv, pool and embedding, NOTE [Differentiable nn backwards]), so
// auditing the ops a backward dispatches misses it. Each backward node dispatch() recorded is
// therefore also measured as a whole (OpPrecision::whole_node): after it ran, its backward is
// run again from a copy of its op on float64 copies of the node's saved tensors and of the
// gradients it was given (ops/observer.h, NOTE [Node reruns]), and the gradients it returned are
// compared with those, output by output, with the measures above. As in forward, the error is
// the node's own: the saved tensors and incoming gradients are the values the real backward
// read (intermediate results a forward saved, such as batch_norm's float32 mean and 1/std, as
// saved: their rounding is the forward's). A gradient whose float64 recomputation does not come back in float64 (a backward that
// casts to a fixed dtype: a cast's backward, a gradient cast to its parameter's dtype) is not
// compared; a node with none left is reported as skipped.
// Training-mode batch_norm writes its running statistics in place, so its inputs are gone by
// the time it returns: for the ops that update buffers (batch_norm), the audit takes float64
// copies of the inputs as the call begins and reruns from those. The rerun updates those copies,
// never the module's buffers, which hold what the real call left in them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/op.h"

namespace hg::nn {
class Module;
}

namespace hg::amp {

struct PrecisionAuditOptions {
  // An op grows the error when rel_error exceeds this many unit roundoffs of its output dtype.
  double growth_threshold = 2.0;
};

// One audited op call.
struct OpPrecision {
  int64_t index = 0;  // its place among the calls the audit saw, in execution order
  OpId op = OpId{};
  // The innermost module running the op (its dotted name in the model, "" for the model itself
  // or for no module) and its type ("" when none ran it). A backward op is attributed to the
  // module that ran the forward op whose node is being applied.
  std::string module = {};
  std::string module_type = {};
  bool backward = false;
  // A backward node as a whole: its gradients for the inputs of `op`, the op whose node it is
  // (NOTE [Precision audit of backward nodes]).
  bool whole_node = false;
  // backward: the node applied ("LinearBackward"); "" between nodes (the engine's gradient sums)
  std::string node = {};
  std::optional<CastPolicy> policy = std::nullopt;
  bool fp8 = false;  // ran in float8 under amp::Fp8Autocast (its policy column reads "fp8")
  std::vector<DType> input_dtypes = {};  // the floating inputs as given
  DType dtype = kFloat32;                // the first compared output's dtype
  int64_t numel = 0;                     // elements compared
  double rel_error = 0;
  double max_rel_error = 0;
  double max_ulps = 0;
  double mean_ulps = 0;
  double unit_roundoff = 0;  // u of dtype
  bool grew = false;         // rel_error > growth_threshold * unit_roundoff
  std::string skipped = {};  // why it was not measured; "" when measured
  bool measured() const { return skipped.empty(); }
};

// The calls of one module, summed up.
struct ModulePrecision {
  std::string module;
  std::string module_type;
  int64_t forward_ops = 0;  // measured
  int64_t backward_ops = 0;
  double forward_max_rel_error = 0;
  double backward_max_rel_error = 0;
  double max_ulps = 0;
  OpId worst_op = OpId{};  // the measured call with the largest rel_error
  bool worst_backward = false;
};

// A dispatch observer (ops/observer.h) and an autograd node observer (for backward's module).
class PrecisionAudit final : public ops::DispatchObserver, public autograd::NodeObserver {
 public:
  // With a model, ops are attributed to its modules by dotted name (model->named_modules());
  // the model must outlive the audit's recording.
  explicit PrecisionAudit(nn::Module* model = nullptr, PrecisionAuditOptions options = {});
  ~PrecisionAudit() override;

  // Stops auditing (the destructor does too); the results stay.
  void stop();

  // Every call seen that has a floating output narrower than float64, in execution order.
  const std::vector<OpPrecision>& ops() const { return ops_; }
  // The measured call with the largest rel_error, or null when none was measured.
  const OpPrecision* worst() const;
  // The first measured call whose error grew (NOTE [Precision audit]), or null.
  const OpPrecision* first_growth() const;
  // One entry per module, in the order of their first op.
  std::vector<ModulePrecision> by_module() const;

  // The measured calls as a text table (all of them with limit 0), in execution order or
  // worst first, followed by the worst call, the first growth and the skipped calls by reason.
  std::string table(size_t limit = 0, bool worst_first = false) const;
  // by_module() as a text table.
  std::string module_table() const;
  // Every call, skipped ones included, one CSV row each with a header row.
  void write_csv(const std::string& path) const;
  // Error by module as an SVG chart (core/svg_chart.h): the largest forward and backward
  // rel_error of each module, on a log axis.
  void write_svg(const std::string& path, const std::string& title = "") const;

  void on_op_begin(const ops::OpBegin& call) override;
  void on_op(const ops::OpCall& call) override;
  void on_op_failed(OpId op) noexcept override;
  void on_node(const ops::NodeCall& call) override;
  void on_node_begin(const autograd::Node& node) override;
  void on_node_end(const autograd::Node& node) noexcept override;

 private:
  struct ModuleName {
    std::string path;
    std::string type;
  };
  struct NodeOrigin {
    std::weak_ptr<autograd::Node> node;  // expired: the address may now be another node's
    ModuleName module;
  };
  ModuleName current_module() const;
  void measure(const ops::OpCall& call, OpPrecision& entry) const;
  // Compares the compared outputs with their float64 references into entry's measures; false
  // (with entry.skipped set) when a reference is not comparable and `every_output` asks that all
  // be, or when none was compared.
  static bool compare(std::span<const Tensor* const> outputs, std::span<const Tensor> reference,
                      bool every_output, OpPrecision& entry);

  PrecisionAuditOptions options_;
  bool stopped_ = false;
  std::map<const nn::Module*, std::string> module_paths_;
  std::map<const autograd::Node*, NodeOrigin> node_origins_;
  std::vector<const autograd::Node*> running_nodes_;
  // The inputs of the outermost call under way, as given, and their storage versions.
  std::vector<Tensor> given_inputs_;
  std::vector<uint64_t> given_versions_;
  // Float64 copies of them taken as the call began, for an op that updates buffers in place.
  std::vector<Tensor> given_snapshot_;
  bool given_valid_ = false;
  std::vector<OpPrecision> ops_;
};

}  // namespace hg::amp
