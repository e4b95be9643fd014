// amp::PrecisionAudit (amp/precision_audit.h): reruns each op in float64 and measures how far its
// low-precision outputs are from the float64 ones.
#include "halfgrad/amp/precision_audit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/svg_chart.h"
#include "halfgrad/core/text_file.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/ops/autocast.h"

namespace hg::amp {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool compared(const Tensor& t) {
  return t.defined() && t.is_floating_point() && t.dtype() != kFloat64;
}

// The spacing of `dtype`'s values around |value| (its subnormal spacing below the normals).
double ulp(double value, const FInfo& info) {
  const double magnitude = std::abs(value);
  if (magnitude < info.tiny) return info.smallest_subnormal;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent, m in [0.5, 1)
  return std::ldexp(info.eps, exponent - 1);
}

// A float64 copy that shares nothing with `t` (a rerun may write its inputs).
Tensor widened(const Tensor& t) {
  if (!t.defined()) return t;
  if (t.is_floating_point() && t.dtype() != kFloat64) return t.to(kFloat64);
  return t.clone();
}

// An error's first line: enough to say why a rerun failed.
std::string first_line(const char* message) {
  std::string text(message);
  const size_t newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

std::string display_module(const std::string& path, const std::string& type) {
  if (!path.empty()) return path;
  if (!type.empty()) return "(" + type + ")";
  return "(no module)";
}

std::string policy_text(const std::optional<CastPolicy>& policy, bool fp8) {
  if (fp8) return "fp8";
  return policy ? std::string(cast_policy_name(*policy)) : "-";
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string join_dtypes(const std::vector<DType>& dtypes, const char* separator) {
  std::string out;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) out += separator;
    out += dtype_name(dtypes[i]);
  }
  return out;
}

// Left-aligned text columns, two spaces apart.
std::string format_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string text;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += c + 1 < row.size() ? fmt::format("{:<{}}  ", row[c], width[c]) : row[c];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text += line + "\n";
  }
  return text;
}

std::string describe(const OpPrecision& entry) {
  const std::string what = entry.whole_node ? entry.node : std::string(op_name(entry.op));
  return fmt::format(
      "{} ({}) in {} (call #{}), {}: rel_error {:.3g} = {:.2f} u, max {:.1f} ulps", what,
      entry.whole_node ? "backward node" : (entry.backward ? "backward" : "forward"),
      display_module(entry.module, entry.module_type), entry.index, dtype_name(entry.dtype),
      entry.rel_error, entry.rel_error / entry.unit_roundoff, entry.max_ulps);
}

}  // namespace

PrecisionAudit::PrecisionAudit(nn::Module* model, PrecisionAuditOptions options)
    : options_(options) {
  HG_CHECK(options_.growth_threshold > 0,
           "PrecisionAudit: expected a positive growth_threshold, got {}",
           options_.growth_threshold);
  if (model != nullptr) {
    for (auto& [path, module] : model->named_modules()) module_paths_[module.get()] = path;
  }
  request_reruns();
}

PrecisionAudit::~PrecisionAudit() = default;

void PrecisionAudit::stop() {
  stopped_ = true;
  request_reruns(false);
  given_inputs_.clear();
  given_valid_ = false;
}

PrecisionAudit::ModuleName PrecisionAudit::current_module() const {
  const std::span<const nn::Module* const> stack = nn::forward_stack();
  if (stack.empty()) return {};
  const nn::Module* innermost = stack.back();
  const auto found = module_paths_.find(innermost);
  if (found != module_paths_.end()) return {found->second, innermost->name()};
  // A module outside the model (or no model): its type names it.
  return {module_paths_.empty() ? innermost->name() : std::string(), innermost->name()};
}

void PrecisionAudit::on_op_begin(const ops::OpBegin& call) {
  if (stopped_ || !call.outermost) return;
  given_inputs_.assign(call.inputs.begin(), call.inputs.end());
  given_versions_.clear();
  for (const Tensor& t : given_inputs_) given_versions_.push_back(t.defined() ? t.version() : 0);
  given_valid_ = true;
  given_snapshot_.clear();
  if (call.op == OpId::batch_norm) {
    // Its running statistics are written in place (in training): keep them as they are now.
    ops::detail::HiddenObservers hidden;
    ops::BelowAutocastGuard below;
    NoGradGuard no_grad;
    for (const Tensor& t : given_inputs_) given_snapshot_.push_back(widened(t));
  }
}

void PrecisionAudit::on_op_failed(OpId /*op*/) noexcept {
  given_valid_ = false;
  given_snapshot_.clear();
}

void PrecisionAudit::on_node_begin(const autograd::Node& node) {
  if (!stopped_) running_nodes_.push_back(&node);
}

void PrecisionAudit::on_node_end(const autograd::Node& node) noexcept {
  if (!running_nodes_.empty() && running_nodes_.back() == &node) running_nodes_.pop_back();
}

void PrecisionAudit::on_op(const ops::OpCall& call) {
  if (stopped_ || !call.outermost) return;
  // The given inputs serve this call only: let go of them once it is measured.
  struct Forget {
    bool& valid;
    std::vector<Tensor>& inputs;
    std::vector<Tensor>& snapshot;
    ~Forget() {
      valid = false;
      inputs.clear();
      snapshot.clear();
    }
  } forget{given_valid_, given_inputs_, given_snapshot_};

  const bool backward = autograd::is_backward_running();
  ModuleName module;
  std::string node_name;
  if (backward) {
    // Between nodes (the engine summing two gradients of one tensor) no node is running.
    if (!running_nodes_.empty()) {
      const autograd::Node* node = running_nodes_.back();
      node_name = node->name();
      const auto found = node_origins_.find(node);
      if (found != node_origins_.end() && !found->second.node.expired()) {
        module = found->second.module;
      }
    }
  } else {
    module = current_module();
    // Remember which module made each node, for the backward ops it will run.
    for (Tensor* out : call.outputs) {
      if (!out->defined()) continue;
      if (std::shared_ptr<autograd::Node> node = out->grad_fn()) {
        node_origins_[node.get()] = {node, module};
      }
    }
  }

  if (std::none_of(call.outputs.begin(), call.outputs.end(),
                   [](const Tensor* t) { return compared(*t); })) {
    return;
  }
  OpPrecision entry{.index = int64_t(ops_.size()),
                    .op = call.op,
                    .module = module.path,
                    .module_type = module.type,
                    .backward = backward,
                    .node = node_name,
                    .policy = call.policy,
                    .fp8 = call.fp8};
  for (const DType dtype : call.given_dtypes) {
    if (is_floating_point(dtype)) entry.input_dtypes.push_back(dtype);
  }
  for (const Tensor* out : call.outputs) {
    if (compared(*out)) {
      entry.dtype = out->dtype();
      break;
    }
  }
  entry.unit_roundoff = finfo(entry.dtype).eps / 2;
  measure(call, entry);
  entry.grew =
      entry.measured() && entry.rel_error > options_.growth_threshold * entry.unit_roundoff;
  ops_.push_back(std::move(entry));
}

void PrecisionAudit::on_node(const ops::NodeCall& call) {
  if (stopped_) return;
  std::vector<const Tensor*> outputs;
  for (const Tensor& grad : call.grad_inputs) outputs.push_back(&grad);
  if (std::none_of(outputs.begin(), outputs.end(), [](const Tensor* t) { return compared(*t); })) {
    return;
  }
  OpPrecision entry{.index = int64_t(ops_.size()),
                    .op = call.op,
                    .backward = true,
                    .whole_node = true,
                    .node = call.node->name()};
  const auto found = node_origins_.find(call.node);
  if (found != node_origins_.end() && !found->second.node.expired()) {
    entry.module = found->second.module.path;
    entry.module_type = found->second.module.type;
  }
  for (const Tensor& grad : call.grad_outputs) {
    if (grad.defined() && grad.is_floating_point()) entry.input_dtypes.push_back(grad.dtype());
  }
  for (const Tensor* out : outputs) {
    if (compared(*out)) {
      entry.dtype = out->dtype();
      break;
    }
  }
  entry.unit_roundoff = finfo(entry.dtype).eps / 2;
  if (call.rerun == nullptr) {
    entry.skipped = "its node cannot be rerun";
  } else {
    // The audit's own work: hidden, below autocast, recorded by no graph (as in measure).
    ops::detail::HiddenObservers hidden;
    ops::BelowAutocastGuard below;
    NoGradGuard no_grad;
    std::vector<Tensor> reference;
    try {
      std::vector<Tensor> grads;
      for (const Tensor& grad : call.grad_outputs) grads.push_back(widened(grad));
      reference = (*call.rerun)(grads);
    } catch (const Error& error) {
      entry.skipped = "float64 rerun failed: " + first_line(error.what());
    }
    if (entry.skipped.empty() && reference.size() != outputs.size()) {
      entry.skipped = fmt::format("the float64 rerun gave {} gradients, the node {}",
                                  reference.size(), outputs.size());
    }
    if (entry.skipped.empty()) compare(outputs, reference, /*every_output=*/false, entry);
  }
  entry.grew =
      entry.measured() && entry.rel_error > options_.growth_threshold * entry.unit_roundoff;
  ops_.push_back(std::move(entry));
}

void PrecisionAudit::measure(const ops::OpCall& call, OpPrecision& entry) const {
  // Nothing the audit runs is an op call of the step: hidden from every observer, below
  // autocast, and recorded by no graph.
  ops::detail::HiddenObservers hidden;
  ops::BelowAutocastGuard below;
  NoGradGuard no_grad;

  if (!given_valid_ || given_inputs_.size() != call.inputs.size()) {
    entry.skipped = "its inputs were not seen";
    return;
  }
  for (size_t i = 0; i < given_inputs_.size(); ++i) {
    const Tensor& given = given_inputs_[i];
    if (!given.defined()) continue;
    if (given.version() != given_versions_[i] && given_snapshot_.empty()) {
      entry.skipped = "writes an input in place";
      return;
    }
    for (const Tensor* out : call.outputs) {
      if (out->defined() && (out->shares_storage(given) ||
                             (call.inputs[i].defined() && out->shares_storage(call.inputs[i])))) {
        entry.skipped = "a view or in-place: its output shares an input's memory";
        return;
      }
    }
  }
  if (call.rerun == nullptr) {
    entry.skipped = "its op cannot be rerun";
    return;
  }

  std::vector<Tensor> inputs;
  inputs.reserve(given_inputs_.size());
  std::vector<Tensor> reference;
  try {
    if (!given_snapshot_.empty()) {
      inputs = given_snapshot_;  // the rerun updates these copies, not the module's buffers
    } else {
      for (const Tensor& t : given_inputs_) inputs.push_back(widened(t));
    }
    reference = (*call.rerun)(inputs);
  } catch (const Error& error) {
    entry.skipped = "float64 rerun failed: " + first_line(error.what());
    return;
  }
  if (reference.size() != call.outputs.size()) {
    entry.skipped = fmt::format("the float64 rerun gave {} outputs, the call {}", reference.size(),
                                call.outputs.size());
    return;
  }

  compare(call.outputs, reference, /*every_output=*/true, entry);
}

bool PrecisionAudit::compare(std::span<const Tensor* const> outputs,
                             std::span<const Tensor> reference, bool every_output,
                             OpPrecision& entry) {
  double diff_squares = 0, reference_squares = 0, max_diff = 0, max_reference = 0;
  double max_ulps = 0, sum_ulps = 0;
  int64_t count = 0;
  bool any_compared = false;
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Tensor& out = *outputs[o];
    if (!compared(out)) continue;
    const Tensor& ref = reference[o];
    if (!ref.defined() || ref.dtype() != kFloat64) {
      if (!every_output) continue;
      entry.skipped = fmt::format("the op fixes its output dtype ({} in float64 too)",
                                  ref.defined() ? dtype_name(ref.dtype()) : "undefined");
      return false;
    }
    if (ref.sizes() != out.sizes()) {
      entry.skipped =
          fmt::format("the float64 rerun's output is {}, the call's {}", ref.sizes(), out.sizes());
      return false;
    }
    if (!any_compared) {
      entry.dtype = out.dtype();
      entry.unit_roundoff = finfo(entry.dtype).eps / 2;
    }
    any_compared = true;
    const FInfo info = finfo(out.dtype());
    const Tensor y = out.to(kCPU).to(kFloat64).contiguous();
    const Tensor r = ref.to(kCPU).contiguous();
    const double* y_data = y.data_ptr<double>();
    const double* r_data = r.data_ptr<double>();
    const int64_t n = y.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double yv = y_data[i], rv = r_data[i];
      ++count;
      if (!std::isfinite(rv) || !std::isfinite(yv)) {
        // Both inf of one sign, or both NaN, agree; anything else is an infinite error.
        const bool agree = (std::isnan(rv) && std::isnan(yv)) || yv == rv;
        if (!agree) {
          diff_squares = max_diff = max_ulps = sum_ulps = kInf;
        }
        continue;
      }
      const double diff = std::abs(yv - rv);
      diff_squares += diff * diff;
      reference_squares += rv * rv;
      max_diff = std::max(max_diff, diff);
      max_reference = std::max(max_reference, std::abs(rv));
      const double ulps = diff / ulp(rv, info);
      max_ulps = std::max(max_ulps, ulps);
      sum_ulps += ulps;
    }
  }
  auto relative = [](double error, double scale) {
    if (error == 0) return 0.0;
    return scale == 0 ? kInf : error / scale;
  };
  entry.numel = count;
  entry.rel_error = relative(std::sqrt(diff_squares), std::sqrt(reference_squares));
  entry.max_rel_error = relative(max_diff, max_reference);
  entry.max_ulps = max_ulps;
  entry.mean_ulps = count > 0 ? sum_ulps / double(count) : 0.0;
  if (!any_compared) {
    entry.skipped = "the backward fixes its gradients' dtypes (none comes back in float64)";
    return false;
  }
  return true;
}

const OpPrecision* PrecisionAudit::worst() const {
  const OpPrecision* worst = nullptr;
  for (const OpPrecision& entry : ops_) {
    if (entry.measured() && (worst == nullptr || entry.rel_error > worst->rel_error)) {
      worst = &entry;
    }
  }
  return worst;
}

const OpPrecision* PrecisionAudit::first_growth() const {
  for (const OpPrecision& entry : ops_) {
    if (entry.grew) return &entry;
  }
  return nullptr;
}

std::vector<ModulePrecision> PrecisionAudit::by_module() const {
  std::vector<ModulePrecision> modules;
  std::vector<double> worst_error;
  for (const OpPrecision& entry : ops_) {
    if (!entry.measured()) continue;
    auto found = std::find_if(modules.begin(), modules.end(), [&](const ModulePrecision& m) {
      return m.module == entry.module && m.module_type == entry.module_type;
    });
    if (found == modules.end()) {
      modules.push_back({.module = entry.module, .module_type = entry.module_type});
      worst_error.push_back(-1);
      found = modules.end() - 1;
    }
    ModulePrecision& m = *found;
    if (entry.backward) {
      ++m.backward_ops;
      m.backward_max_rel_error = std::max(m.backward_max_rel_error, entry.rel_error);
    } else {
      ++m.forward_ops;
      m.forward_max_rel_error = std::max(m.forward_max_rel_error, entry.rel_error);
    }
    m.max_ulps = std::max(m.max_ulps, entry.max_ulps);
    double& worst = worst_error[size_t(found - modules.begin())];
    if (entry.rel_error > worst) {
      worst = entry.rel_error;
      m.worst_op = entry.op;
      m.worst_backward = entry.backward;
    }
  }
  return modules;
}

std::string PrecisionAudit::table(size_t limit, bool worst_first) const {
  std::vector<const OpPrecision*> measured;
  for (const OpPrecision& entry : ops_) {
    if (entry.measured()) measured.push_back(&entry);
  }
  if (worst_first) {
    std::stable_sort(
        measured.begin(), measured.end(),
        [](const OpPrecision* a, const OpPrecision* b) { return a->rel_error > b->rel_error; });
  }
  if (limit > 0 && measured.size() > limit) measured.resize(limit);
  std::vector<std::vector<std::string>> rows = {{"#", "op", "module", "pass", "dtype", "policy",
                                                 "rel_error", "in u", "max_rel", "max_ulps",
                                                 "mean_ulps", "grew"}};
  for (const OpPrecision* e : measured) {
    rows.push_back({std::to_string(e->index), std::string(op_name(e->op)),
                    display_module(e->module, e->module_type),
                    e->whole_node ? "node" : (e->backward ? "bwd" : "fwd"),
                    std::string(dtype_name(e->dtype)), policy_text(e->policy, e->fp8),
                    fmt::format("{:.2e}", e->rel_error),
                    fmt::format("{:.2f}", e->rel_error / e->unit_roundoff),
                    fmt::format("{:.2e}", e->max_rel_error), fmt::format("{:.1f}", e->max_ulps),
                    fmt::format("{:.2f}", e->mean_ulps), e->grew ? "*" : ""});
  }
  int64_t measured_count = 0;
  std::map<std::string, int64_t> skipped;
  for (const OpPrecision& entry : ops_) {
    if (entry.measured()) {
      ++measured_count;
    } else {
      ++skipped[entry.skipped];
    }
  }
  std::string text = fmt::format(
      "PrecisionAudit: {} calls measured against float64, {} skipped (u: the output dtype's "
      "unit roundoff; grew: rel_error > {:g} u)\n",
      measured_count, ops_.size() - size_t(measured_count), options_.growth_threshold);
  text += format_rows(rows);
  if (const OpPrecision* w = worst()) text += "worst: " + describe(*w) + "\n";
  if (const OpPrecision* g = first_growth()) {
    text += "error first grows at: " + describe(*g) + "\n";
  } else {
    text += "no op grew the error\n";
  }
  for (const auto& [reason, count] : skipped) {
    text += fmt::format("skipped {}: {}\n", count, reason);
  }
  return text;
}

std::string PrecisionAudit::module_table() const {
  std::vector<std::vector<std::string>> rows = {{"module", "type", "fwd ops", "fwd max rel_error",
                                                 "bwd ops", "bwd max rel_error", "max_ulps",
                                                 "worst op"}};
  for (const ModulePrecision& m : by_module()) {
    rows.push_back({display_module(m.module, m.module_type), m.module_type,
                    std::to_string(m.forward_ops),
                    m.forward_ops > 0 ? fmt::format("{:.2e}", m.forward_max_rel_error) : "-",
                    std::to_string(m.backward_ops),
                    m.backward_ops > 0 ? fmt::format("{:.2e}", m.backward_max_rel_error) : "-",
                    fmt::format("{:.1f}", m.max_ulps),
                    fmt::format("{} ({})", op_name(m.worst_op), m.worst_backward ? "bwd" : "fwd")});
  }
  return format_rows(rows);
}

void PrecisionAudit::write_csv(const std::string& path) const {
  std::string text =
      "index,op,module,module_type,pass,node,policy,input_dtypes,dtype,numel,rel_error,"
      "max_rel_error,max_ulps,mean_ulps,unit_roundoff,grew,skipped\n";
  for (const OpPrecision& e : ops_) {
    text += fmt::format("{},{},{},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{},{}\n",
                        e.index, op_name(e.op), csv_field(e.module), csv_field(e.module_type),
                        e.whole_node ? "node" : (e.backward ? "backward" : "forward"),
                        csv_field(e.node), policy_text(e.policy, e.fp8),
                        join_dtypes(e.input_dtypes, " "), dtype_name(e.dtype), e.numel, e.rel_error,
                        e.max_rel_error, e.max_ulps, e.mean_ulps, e.unit_roundoff, e.grew ? 1 : 0,
                        csv_field(e.skipped));
  }
  write_text_file(path, text, "PrecisionAudit::write_csv");
}

void PrecisionAudit::write_svg(const std::string& path, const std::string& title) const {
  const std::vector<ModulePrecision> modules = by_module();
  SvgChartOptions options{
      .title = title.empty() ? "Relative error against float64, by module" : title,
      .x_label = "module (in order of its first op)",
      .y_label = "max rel_error of its ops",
      .log_y = true};
  std::vector<std::pair<double, double>> forward, backward;
  for (size_t i = 0; i < modules.size(); ++i) {
    const ModulePrecision& m = modules[i];
    options.x_labels.push_back(display_module(m.module, m.module_type));
    if (m.forward_ops > 0) forward.emplace_back(double(i), m.forward_max_rel_error);
    if (m.backward_ops > 0) backward.emplace_back(double(i), m.backward_max_rel_error);
  }
  SvgChart chart(std::move(options));
  chart.add_series("forward", std::move(forward));
  chart.add_series("backward", std::move(backward));
  chart.write(path);
}

}  // namespace hg::amp
