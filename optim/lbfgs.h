// LBFGS: torch.optim.LBFGS, limited-memory BFGS over all the parameters as one flat vector,
// with torch's optional strong-Wolfe line search.
//
//   optim::LBFGS opt(model->parameters(), {.lr = 1, .line_search_fn = "strong_wolfe"});
//   opt.step([&] {
//     opt.zero_grad();
//     Tensor loss = loss_fn(model->forward(x), y);
//     loss.backward();
//     return loss;
//   });
//
// A step runs up to max_iter iterations; each asks the closure to evaluate the loss and its
// gradients (with grad mode on) at the current parameters. Per iteration, as torch: the search
// direction d from the gradient g and the last history_size curvature pairs (s, y) by the
// two-loop recursion (the first iteration: d = -g), a step length t (lr; on the first iteration
// of all min(1, 1 / sum|g|) * lr; or the strong-Wolfe search's, which evaluates the closure at
// trial points), p += t * d, and the stops of torch: |g|max <= tolerance_grad, max_eval
// evaluations, |t d|max <= tolerance_change, |loss change| < tolerance_change, or a direction
// that no longer descends (g . d > -tolerance_change). The scalars (the curvature products, the
// step length, the line search's values) are computed in double; torch keeps them as 0-dim
// tensors of the parameters' dtype, the same numbers for float64 parameters.
//
// One param group (torch's rule), parameters on one device. The history lives on that device:
// 2 * history_size flat vectors of all the parameters (the pairs), plus the direction and the
// previous gradient; a strong-Wolfe step also holds a copy of the parameters and the trial
// gradients of its bracket. state_dict holds torch's keys for
// parameter 0 ("func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag",
// "prev_flat_grad", "prev_loss"), torch's lists stacked into tensors ([k, n] for the
// directions, [k] for ro); step() without a closure is an error. No scaled step: GradScaler's
// unscale_ and step do not apply (torch's do not either).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "halfgrad/optim/optimizer.h"

namespace hg::optim {

struct LBFGSOptions {
  double lr = 1;
  int64_t max_iter = 20;
  std::optional<int64_t> max_eval = std::nullopt;  // none: max_iter * 5 / 4
  double tolerance_grad = 1e-7;
  double tolerance_change = 1e-9;
  int64_t history_size = 100;
  // "strong_wolfe", or none (a fixed step length).
  std::optional<std::string> line_search_fn = std::nullopt;
  // Maximize the closure's value: the search works on its negation and on the negated
  // gradients (torch 2's maximize).
  bool maximize = false;
};

// The group's options as torch names them, numbers as the other optimizers keep them: max_iter,
// max_eval (max_iter * 5 / 4 when not given, as torch) and history_size whole numbers >= 1, lr,
// tolerance_grad and tolerance_change >= 0, "line_search_fn" 1 for "strong_wolfe" and 0 for
// none, maximize 0 or 1; hg::Error otherwise (constructor, load_state_dict), and for a
// line_search_fn other than "strong_wolfe" (torch's error comes at the step). A second param group
// is an error, and so are parameters of different dtypes or devices (the flat vectors hold them
// all).
class LBFGS : public Optimizer {
 public:
  // Re-evaluates the model: clears and recomputes the gradients and returns the loss (a
  // one-element tensor).
  using Closure = std::function<Tensor()>;

  LBFGS(std::vector<Tensor> params, LBFGSOptions options = {});

  // One optimization step (up to max_iter iterations); returns the loss the closure gave at
  // the parameters the step started from.
  Tensor step(const Closure& closure);
  // An error: LBFGS evaluates the model several times per step and needs a closure.
  void step() override;
  const char* name() const override { return "LBFGS"; }

  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state_dict) override;

 protected:
  void check_options(const std::map<std::string, double>& options) const override;

 private:
  // The value the search minimises from what the closure returned (checked to be one element;
  // negated with maximize).
  double objective(const Tensor& loss) const;
  // The flat gradient of every parameter (zeros for one without a gradient), negated with
  // maximize.
  Tensor gather_flat_grad() const;
  // p += step_size * update (the flat update split over the parameters).
  void add_flat(double step_size, const Tensor& update);
  // The loss and flat gradient at x + t * d; the parameters are back
  // at x afterwards.
  std::pair<double, Tensor> evaluate_along(const Closure& closure, const std::vector<Tensor>& x,
                                           double t, const Tensor& d);
  // torch's _strong_wolfe from the parameters x along d with initial step t, loss f, gradient
  // g and directional derivative gtd; returns the loss, gradient and step length it accepts
  // and the closure evaluations it made (at most max_ls).
  struct LineSearch {
    double loss;
    Tensor grad;
    double t;
    int64_t evals;
  };
  LineSearch strong_wolfe(const Closure& closure, const std::vector<Tensor>& x, double t,
                          const Tensor& d, double f, const Tensor& g, double gtd, int64_t max_ls);

  // What torch keeps in the state of parameter 0.
  struct History {
    int64_t func_evals = 0, n_iter = 0;
    Tensor d, prev_flat_grad;  // flat, on the parameters' device
    double t = 0, h_diag = 1, prev_loss = 0;
    std::deque<Tensor> old_dirs, old_stps;  // the curvature pairs y and s, oldest first
    std::deque<double> ro;                  // 1 / (y . s) of each pair
  };
  History history_;
};

}  // namespace hg::optim
