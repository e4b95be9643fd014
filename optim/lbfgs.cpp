// LBFGS (lbfgs.h): torch.optim.LBFGS's step, its strong-Wolfe line search and its state, on
// flat vectors of all the parameters.
#include "halfgrad/optim/lbfgs.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/whole_number.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/linalg.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/ops.h"

namespace hg::optim {

namespace {

// torch's _strong_wolfe constants (LBFGS.step passes only max_ls, so the search's
// tolerance_change is always 1e-9, whatever the group's is).
constexpr double kC1 = 1e-4;
constexpr double kC2 = 0.9;
constexpr double kSearchToleranceChange = 1e-9;

// The state keys of one iteration; func_evals and n_iter come before them.
constexpr const char* kIterationKeys[] = {"d",  "t",      "old_dirs",       "old_stps",
                                          "ro", "H_diag", "prev_flat_grad", "prev_loss"};

double dot_value(const Tensor& a, const Tensor& b) { return dot(a, b).item<double>(); }
double abs_max(const Tensor& v) { return max(abs(v)).item<double>(); }

// torch's _cubic_interpolate: the minimiser of the cubic through (x1, f1) and (x2, f2) with
// slopes g1 and g2, clamped to [lo, hi] (the two points when no bounds are given), or the
// middle of the bounds when the cubic has no minimiser.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const double lo = bounds ? bounds->first : std::min(x1, x2);
  const double hi = bounds ? bounds->second : std::max(x1, x2);
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (!(d2_square >= 0)) return (lo + hi) / 2.0;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(min_pos, lo), hi);
}

std::map<std::string, double> lbfgs_defaults(const LBFGSOptions& o) {
  HG_CHECK(!o.line_search_fn || *o.line_search_fn == "strong_wolfe",
           "LBFGS: expected line_search_fn \"strong_wolfe\" or none, got \"{}\"",
           o.line_search_fn.value_or(""));
  return {{"lr", o.lr},
          {"max_iter", double(o.max_iter)},
          {"max_eval", double(o.max_eval.value_or(o.max_iter * 5 / 4))},
          {"tolerance_grad", o.tolerance_grad},
          {"tolerance_change", o.tolerance_change},
          {"history_size", double(o.history_size)},
          {"line_search_fn", o.line_search_fn ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// A one-element floating state entry as a double.
double loaded_scalar(const Tensor& t, const char* key) {
  HG_CHECK(t.is_floating_point() && t.numel() == 1,
           "LBFGS load_state_dict: expected \"{}\" to be a one-element floating tensor, got {} {}",
           key, t.dtype(), t.sizes());
  return t.item<double>();
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions options)
    : Optimizer({ParamGroup{std::move(params), {}}}, lbfgs_defaults(options)) {
  const std::vector<Tensor>& p = groups_[0].params;
  HG_CHECK(!p.empty(), "LBFGS: expected at least one parameter, got none");
  for (size_t i = 1; i < p.size(); ++i) {
    HG_CHECK(p[i].dtype() == p[0].dtype() && p[i].device() == p[0].device(),
             "LBFGS: expected every parameter with the dtype and device of the first ({} on "
             "{}), got {} on {} for parameter {}",
             p[0].dtype(), p[0].device(), p[i].dtype(), p[i].device(), i);
  }
  check_options(groups_[0].options);
}

// One group (torch's rule), then NOTE [One check per option]'s table.
void LBFGS::check_options(const std::map<std::string, double>& options) const {
  HG_CHECK(groups_.size() == 1,
           "LBFGS: expected one param group (it does not support per-parameter options), got {}",
           groups_.size());
  Optimizer::check_options(options);
}

void LBFGS::step() {
  HG_CHECK(false,
           "LBFGS: expected step(closure), got step(): it evaluates the model several times per "
           "step");
}

double LBFGS::objective(const Tensor& loss) const {
  HG_CHECK(loss.defined() && loss.numel() == 1,
           "LBFGS: expected the closure to return the loss, a one-element tensor, got {}",
           loss.defined() ? fmt::format("shape {}", loss.sizes()) : "an undefined tensor");
  const double value = loss.item<double>();
  return groups_[0].options.at("maximize") != 0 ? -value : value;
}

Tensor LBFGS::gather_flat_grad() const {
  std::vector<Tensor> views;
  for (const Tensor& p : groups_[0].params) {
    const Tensor& grad = p.grad();
    views.push_back(grad.defined() ? grad.reshape({-1})
                                   : zeros({p.numel()}, {p.dtype(), p.device()}));
  }
  Tensor flat = cat(views, 0);
  return groups_[0].options.at("maximize") != 0 ? neg(flat) : flat;
}

void LBFGS::add_flat(double step_size, const Tensor& update) {
  int64_t offset = 0;
  for (Tensor& p : groups_[0].params) {
    p.add_(update.narrow(0, offset, p.numel()).view(p.sizes()), step_size);
    offset += p.numel();
  }
}

std::pair<double, Tensor> LBFGS::evaluate_along(const Closure& closure,
                                                const std::vector<Tensor>& x, double t,
                                                const Tensor& d) {
  add_flat(t, d);
  double loss = 0;
  {
    EnableGradGuard grad_mode;
    loss = objective(closure());
  }
  Tensor grad = gather_flat_grad();
  for (size_t i = 0; i < x.size(); ++i) groups_[0].params[i].copy_(x[i]);
  return {loss, grad};
}

LBFGS::LineSearch LBFGS::strong_wolfe(const Closure& closure, const std::vector<Tensor>& x,
                                      double t, const Tensor& d, double f, const Tensor& g,
                                      double gtd, int64_t max_ls) {
  // torch's _strong_wolfe, step for step: bracket a step length satisfying the strong Wolfe
  // conditions, then shrink the bracket by cubic interpolation (the zoom phase).
  const double d_norm = abs_max(d);
  auto [f_new, g_new] = evaluate_along(closure, x, t, d);
  int64_t evals = 1;
  double gtd_new = dot_value(g_new, d);

  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  int64_t ls_iter = 0;
  // The bracket: one point (done) or two, with their losses, gradients and slopes.
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    if (f_new > f + kC1 * t * gtd || (ls_iter > 1 && f_new >= f_prev)) {
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    if (std::abs(gtd_new) <= -kC2 * gtd) {
      bracket = {t}, bracket_f = {f_new}, bracket_g = {g_new};
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    // Extrapolate: the cubic's minimiser within [t + 0.01 (t - t_prev), 10 t].
    const double min_step = t + 0.01 * (t - t_prev);
    const double max_step = t * 10;
    const double previous = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                          std::pair{min_step, max_step});
    t_prev = previous, f_prev = f_new, g_prev = g_new, gtd_prev = gtd_new;
    std::tie(f_new, g_new) = evaluate_along(closure, x, t, d);
    ++evals;
    gtd_new = dot_value(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) {
    bracket = {0, t}, bracket_f = {f, f_new}, bracket_g = {g, g_new};
  }

  bool insufficient_progress = false;
  size_t low = bracket_f.front() <= bracket_f.back() ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::abs(bracket[1] - bracket[0]) * d_norm < kSearchToleranceChange) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1],
                          bracket_gtd[1]);
    // A trial point within a tenth of the bracket of one of its ends is moved to that tenth
    // when the previous trial was also that close, or when it lies on or past an end.
    const double lo = std::min(bracket[0], bracket[1]), hi = std::max(bracket[0], bracket[1]);
    const double eps = 0.1 * (hi - lo);
    if (std::min(hi - t, t - lo) < eps) {
      if (insufficient_progress || t >= hi || t <= lo) {
        t = std::abs(t - hi) < std::abs(t - lo) ? hi - eps : lo + eps;
        insufficient_progress = false;
      } else {
        insufficient_progress = true;
      }
    } else {
      insufficient_progress = false;
    }
    std::tie(f_new, g_new) = evaluate_along(closure, x, t, d);
    ++evals;
    gtd_new = dot_value(g_new, d);
    ++ls_iter;

    if (f_new > f + kC1 * t * gtd || f_new >= bracket_f[low]) {
      // Not enough decrease, or no lower than the low end: the new point is the high end.
      bracket[high] = t, bracket_f[high] = f_new, bracket_g[high] = g_new;
      bracket_gtd[high] = gtd_new;
      low = bracket_f[0] <= bracket_f[1] ? 0 : 1, high = 1 - low;
    } else {
      if (std::abs(gtd_new) <= -kC2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low];
        bracket_g[high] = bracket_g[low], bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = f_new, bracket_g[low] = g_new;
      bracket_gtd[low] = gtd_new;
    }
  }
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

Tensor LBFGS::step(const Closure& closure) {
  const ops::RecordFunction range("Optimizer.step#LBFGS.step");
  NoGradGuard no_grad;
  HG_CHECK(closure != nullptr, "LBFGS: expected a closure, got an empty std::function");
  const std::map<std::string, double>& o = groups_[0].options;
  check_options(o);
  const double lr = o.at("lr");
  const auto max_iter = int64_t(o.at("max_iter"));
  const auto max_eval = int64_t(o.at("max_eval"));
  const double tolerance_grad = o.at("tolerance_grad");
  const double tolerance_change = o.at("tolerance_change");
  const auto history_size = size_t(o.at("history_size"));
  const bool strong_wolfe_search = o.at("line_search_fn") != 0;
  History& h = history_;

  // The loss and gradient where the step starts.
  Tensor orig_loss;
  {
    EnableGradGuard grad_mode;
    orig_loss = closure();
  }
  double loss = objective(orig_loss);
  int64_t current_evals = 1;
  ++h.func_evals;
  Tensor flat_grad = gather_flat_grad();
  bool opt_cond = abs_max(flat_grad) <= tolerance_grad;
  if (opt_cond) return orig_loss;

  // The history as the step found it, updated in a copy: a closure that throws part way leaves
  // the history as it was (the parameters may have moved by then, as in torch).
  History next = h;
  for (int64_t n_iter = 1; n_iter <= max_iter; ++n_iter) {
    ++next.n_iter;
    // The direction: steepest descent first, then the two-loop recursion over the pairs.
    if (next.n_iter == 1) {
      next.d = neg(flat_grad);
      next.old_dirs.clear(), next.old_stps.clear(), next.ro.clear();
      next.h_diag = 1;
    } else {
      const Tensor y = sub(flat_grad, next.prev_flat_grad);
      const Tensor s = mul(next.d, next.t);
      const double ys = dot_value(y, s);
      if (ys > 1e-10) {
        if (next.old_dirs.size() == history_size) {
          next.old_dirs.pop_front(), next.old_stps.pop_front(), next.ro.pop_front();
        }
        next.old_dirs.push_back(y), next.old_stps.push_back(s), next.ro.push_back(1.0 / ys);
        next.h_diag = ys / dot_value(y, y);
      }
      const size_t num_old = next.old_dirs.size();
      std::vector<double> al(num_old);
      Tensor q = neg(flat_grad);
      for (size_t i = num_old; i-- > 0;) {
        al[i] = dot_value(next.old_stps[i], q) * next.ro[i];
        q.add_(next.old_dirs[i], -al[i]);
      }
      Tensor r = mul(q, next.h_diag);
      for (size_t i = 0; i < num_old; ++i) {
        const double be_i = dot_value(next.old_dirs[i], r) * next.ro[i];
        r.add_(next.old_stps[i], al[i] - be_i);
      }
      next.d = r;
    }
    // No copy: every flat gradient is a new tensor (gather_flat_grad's), never written in place.
    next.prev_flat_grad = flat_grad;
    next.prev_loss = loss;

    // The step length: lr, scaled down by the gradient's size on the very first iteration.
    next.t = next.n_iter == 1 ? std::min(1.0, 1.0 / sum(abs(flat_grad)).item<double>()) * lr : lr;
    const double gtd = dot_value(flat_grad, next.d);
    if (gtd > -tolerance_change) break;  // no longer a descent direction

    int64_t ls_func_evals = 0;
    if (strong_wolfe_search) {
      std::vector<Tensor> x_init;
      for (const Tensor& p : groups_[0].params) x_init.push_back(p.clone());
      // torch 2 caps the search's evaluations at those the step has left.
      LineSearch found = strong_wolfe(closure, x_init, next.t, next.d, loss, flat_grad, gtd,
                                      max_eval - current_evals);
      loss = found.loss, flat_grad = found.grad, next.t = found.t;
      ls_func_evals = found.evals;
      add_flat(next.t, next.d);
      opt_cond = abs_max(flat_grad) <= tolerance_grad;
    } else {
      add_flat(next.t, next.d);
      // The last iteration does not evaluate again (torch: no use in a stochastic setting).
      if (n_iter != max_iter) {
        {
          EnableGradGuard grad_mode;
          loss = objective(closure());
        }
        flat_grad = gather_flat_grad();
        opt_cond = abs_max(flat_grad) <= tolerance_grad;
        ls_func_evals = 1;
      }
    }
    current_evals += ls_func_evals;
    next.func_evals += ls_func_evals;

    // torch's stops, in its order.
    if (n_iter == max_iter || current_evals >= max_eval || opt_cond) break;
    if (abs_max(mul(next.d, next.t)) <= tolerance_change) break;
    if (std::abs(loss - next.prev_loss) < tolerance_change) break;
  }
  history_ = std::move(next);
  return orig_loss;
}

OptimizerStateDict LBFGS::state_dict() const {
  OptimizerStateDict result = Optimizer::state_dict();
  const History& h = history_;
  if (h.func_evals == 0) return result;
  // torch keeps the whole state under the first parameter.
  std::map<std::string, Tensor>& entry = result.state[0];
  entry["func_evals"] = scalar_tensor(h.func_evals, kInt64);
  entry["n_iter"] = scalar_tensor(h.n_iter, kInt64);
  if (!h.d.defined()) return result;
  const int64_t n = h.d.numel();
  auto stacked = [&](const std::deque<Tensor>& list) {
    if (list.empty()) return empty({0, n}, {h.d.dtype(), h.d.device()});
    return stack(std::vector<Tensor>(list.begin(), list.end()), 0);
  };
  entry["d"] = h.d.clone();
  entry["t"] = scalar_tensor(h.t, kFloat64);
  entry["old_dirs"] = stacked(h.old_dirs);
  entry["old_stps"] = stacked(h.old_stps);
  std::vector<double> ro(h.ro.begin(), h.ro.end());
  entry["ro"] = tensor(ro, kFloat64);
  entry["H_diag"] = scalar_tensor(h.h_diag, kFloat64);
  entry["prev_flat_grad"] = h.prev_flat_grad.clone();
  entry["prev_loss"] = scalar_tensor(h.prev_loss, kFloat64);
  return result;
}

void LBFGS::load_state_dict(const OptimizerStateDict& state_dict) {
  // The history is read and checked first, the groups by the base; nothing changes until both
  // have passed.
  const std::vector<Tensor>& params = groups_[0].params;
  int64_t n = 0;
  for (const Tensor& p : params) n += p.numel();
  const TensorOptions flat{params[0].dtype(), params[0].device()};
  const Shape flat_shape{n};
  HG_CHECK(state_dict.param_groups.size() == 1, "load_state_dict: expected 1 param groups, got {}",
           state_dict.param_groups.size());
  History loaded;
  for (const auto& item : state_dict.state) {
    const int64_t index = item.first;
    const std::map<std::string, Tensor>& entries = item.second;
    HG_CHECK(index == 0,
             "LBFGS load_state_dict: expected state only for parameter 0 (where LBFGS keeps it), "
             "got state for index {}",
             index);
    std::set<std::string> allowed{"func_evals", "n_iter"};
    allowed.insert(std::begin(kIterationKeys), std::end(kIterationKeys));
    for (const auto& [key, tensor] : entries) {
      HG_CHECK(allowed.count(key) == 1 && tensor.defined(),
               "LBFGS load_state_dict: expected state keys func_evals, n_iter, {}, got \"{}\"{}",
               fmt::join(kIterationKeys, ", "), key, tensor.defined() ? "" : " undefined");
    }
    for (const char* key : {"func_evals", "n_iter"}) {
      HG_CHECK(entries.count(key) == 1, "LBFGS load_state_dict: expected \"{}\" in the state", key);
      const Tensor& t = entries.at(key);
      HG_CHECK(t.numel() == 1, "LBFGS load_state_dict: expected \"{}\" to hold one element, got {}",
               key, t.numel());
      (key == std::string("n_iter") ? loaded.n_iter : loaded.func_evals) = checked_whole_number(
          t.item<double>(), 0, INT64_MAX, fmt::format("LBFGS load_state_dict: \"{}\"", key));
    }
    const bool iterated = loaded.n_iter > 0;
    for (const char* key : kIterationKeys) {
      HG_CHECK(entries.count(key) == (iterated ? 1u : 0u),
               "LBFGS load_state_dict: expected \"{}\" {} the state with n_iter {}", key,
               iterated ? "in" : "not in", loaded.n_iter);
    }
    if (!iterated) continue;
    auto flat_vector = [&](const char* key) {
      const Tensor& t = entries.at(key);
      HG_CHECK(t.is_floating_point() && t.sizes() == flat_shape,
               "LBFGS load_state_dict: expected \"{}\" to be a floating tensor of shape [{}], got "
               "{} {}",
               key, n, t.dtype(), t.sizes());
      return t.to(flat.device, flat.dtype).clone();
    };
    loaded.d = flat_vector("d");
    loaded.prev_flat_grad = flat_vector("prev_flat_grad");
    loaded.t = loaded_scalar(entries.at("t"), "t");
    loaded.h_diag = loaded_scalar(entries.at("H_diag"), "H_diag");
    loaded.prev_loss = loaded_scalar(entries.at("prev_loss"), "prev_loss");
    const Tensor& dirs = entries.at("old_dirs");
    const Tensor& stps = entries.at("old_stps");
    const Tensor& ro = entries.at("ro");
    const int64_t k = dirs.dim() == 2 ? dirs.size(0) : -1;
    const Shape pairs_shape{k, n}, ro_shape{k};
    const std::map<std::string, double>& loaded_options = state_dict.param_groups[0].options;
    const double history_size = loaded_options.count("history_size") == 1
                                    ? loaded_options.at("history_size")
                                    : groups_[0].options.at("history_size");
    HG_CHECK(k >= 0 && double(k) <= history_size && dirs.sizes() == pairs_shape &&
                 stps.sizes() == pairs_shape && ro.sizes() == ro_shape &&
                 dirs.is_floating_point() && stps.is_floating_point() && ro.is_floating_point(),
             "LBFGS load_state_dict: expected floating \"old_dirs\" and \"old_stps\" of shape [k, "
             "{}] and \"ro\" of shape [k] with k <= history_size ({}), got {}, {} and {}",
             n, history_size, dirs.sizes(), stps.sizes(), ro.sizes());
    const Tensor ro_values = ro.to(kCPU, kFloat64);
    for (int64_t i = 0; i < k; ++i) {
      loaded.old_dirs.push_back(dirs[i].to(flat.device, flat.dtype).clone());
      loaded.old_stps.push_back(stps[i].to(flat.device, flat.dtype).clone());
      loaded.ro.push_back(ro_values[i].item<double>());
    }
  }
  OptimizerStateDict groups_only = state_dict;
  groups_only.state.clear();
  Optimizer::load_state_dict(groups_only);
  history_ = std::move(loaded);
}

}  // namespace hg::optim
