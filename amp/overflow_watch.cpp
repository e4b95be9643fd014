// amp::OverflowWatch (amp/overflow_watch.h): finds the first op whose output overflowed.
#include "halfgrad/amp/overflow_watch.h"

#include <bit>
#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/half.h"
#include "halfgrad/nn/module.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/multi_tensor.h"
#endif

namespace hg::amp {

namespace detail {
thread_local constinit OverflowWatch* active_watch = nullptr;
}  // namespace detail

using detail::active_watch;

namespace {

// float16's largest finite value.
constexpr double kFloat16Max = 65504.0;

template <class T>
void scan(const T* data, int64_t n, TensorRange& range) {
  for (int64_t i = 0; i < n; ++i) {
    const double value = double(data[i]);
    if (std::isfinite(value)) {
      range.max_abs = std::max(range.max_abs, std::abs(value));
    } else {
      ++range.non_finite;
    }
  }
  range.all_finite = range.non_finite == 0;
}

TensorRange range_of(const Tensor& t) {
  TensorRange range{.dtype = t.dtype(), .shape = t.sizes()};
#if HALFGRAD_HAS_CUDA
  if (t.is_cuda()) {
    // Reduced on the device: the host reads two numbers, not the tensor (the same values:
    // float64 in double, the other dtypes through float32).
    const std::vector<int64_t> values = cuda::value_range(t).to_vector<int64_t>();
    range.max_abs = std::bit_cast<double>(values[0]);
    range.non_finite = values[1];
    range.all_finite = range.non_finite == 0;
    return range;
  }
#endif
  const Tensor host = t.to(kCPU);
  if (t.dtype() == kFloat64) {
    const Tensor dense = host.contiguous();
    scan(dense.data_ptr<double>(), dense.numel(), range);
  } else {
    const Tensor dense = host.to(kFloat32).contiguous();
    scan(dense.data_ptr<float>(), dense.numel(), range);
  }
  return range;
}

std::string describe(const TensorRange& range) {
  if (!range.all_finite) {
    return fmt::format("{} {}: {} inf/NaN, max finite |x| = {:g}", dtype_name(range.dtype),
                       range.shape, range.non_finite, range.max_abs);
  }
  return fmt::format("{} {}: finite, max |x| = {:g}", dtype_name(range.dtype), range.shape,
                     range.max_abs);
}

std::string describe(const OverflowFinding& finding) {
  std::string where =
      finding.module_type.empty()
          ? std::string("outside any module")
          : fmt::format("in module \"{}\" ({})", finding.module, finding.module_type);
  std::string out = fmt::format("{} {} (op #{}), output {}\n", op_name(finding.op), where,
                                finding.op_index, describe(finding.output));
  for (size_t i = 0; i < finding.inputs.size(); ++i) {
    out += fmt::format("  input {}: {}\n", i, describe(finding.inputs[i]));
  }
  return out;
}

}  // namespace

OverflowWatch::OverflowWatch(nn::Module* model) : previous_(active_watch) {
  if (model) {
    for (auto& [path, module] : model->named_modules()) {
      const std::string name = path;
      nn::RemovableHandle pre = module->register_forward_pre_hook(
          [this, name](nn::Module& m, const nn::Args&) -> std::optional<nn::Args> {
            module_stack_.emplace_back(name, m.name());
            return std::nullopt;
          });
      nn::RemovableHandle post = module->register_forward_hook(
          [this](nn::Module&, const nn::Args&, const nn::Value&) -> std::optional<nn::Value> {
            if (!module_stack_.empty()) module_stack_.pop_back();
            return std::nullopt;
          });
      remove_hooks_.push_back([pre, post]() mutable {
        pre.remove();
        post.remove();
      });
    }
  }
  active_watch = this;
}

OverflowWatch::~OverflowWatch() {
  for (auto& remove : remove_hooks_) remove();
  active_watch = previous_;
}

void OverflowWatch::reset() {
  first_non_finite_.reset();
  first_beyond_float16_.reset();
  ops_checked_ = 0;
}

void OverflowWatch::on_op(const ops::OpCall& call) {
  if (checking_ || active_watch != this) return;
  const OpId op = call.op;
  const std::span<const Tensor> inputs = call.inputs;
  const std::span<Tensor* const> outputs = call.outputs;
  if (first_non_finite_ && first_beyond_float16_) {
    ++ops_checked_;
    return;  // both answers are in: nothing more to look for
  }
  checking_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset_flag{checking_};
  NoGradGuard no_grad;

  for (Tensor* output : outputs) {
    if (!output->defined() || !output->is_floating_point() || output->numel() == 0) continue;
    const TensorRange range = range_of(*output);
    const bool non_finite = !range.all_finite && !first_non_finite_;
    const bool beyond = range.all_finite && range.max_abs > kFloat16Max && !first_beyond_float16_;
    if (!non_finite && !beyond) continue;
    OverflowFinding finding{.op = op,
                            .module = {},
                            .module_type = {},
                            .op_index = ops_checked_,
                            .inputs = {},
                            .output = range};
    if (!module_stack_.empty()) {
      finding.module = module_stack_.back().first;
      finding.module_type = module_stack_.back().second;
    }
    for (const Tensor& input : inputs) {
      if (input.defined() && input.is_floating_point()) finding.inputs.push_back(range_of(input));
    }
    (non_finite ? first_non_finite_ : first_beyond_float16_) = std::move(finding);
  }
  ++ops_checked_;
}

std::string OverflowWatch::report() const {
  std::string out = fmt::format("OverflowWatch: {} ops checked\n", ops_checked_);
  if (first_non_finite_) {
    out += "first non-finite output: " + describe(*first_non_finite_);
  } else {
    out += "no op produced an inf or a NaN\n";
  }
  if (first_beyond_float16_) {
    out += "first output beyond float16's range: " + describe(*first_beyond_float16_);
  }
  return out;
}

}  // namespace hg::amp
