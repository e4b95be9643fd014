// optim::LBFGS against torch.optim.LBFGS (twin/lbfgs.txt, printed by torch 2): six option sets
// over four steps, with and without the strong-Wolfe search, each step's returned loss, the
// parameters and every state value; float32 parameters; a run resumed from a state dict and from
// a checkpoint file; a gradient already small enough; the errors of a bad closure, a second
// group, bad options and a bad state dict.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "test_util.h"
#include "twin_runs.h"

using namespace hg;
using namespace optim_test;
using Catch::Contains;
using hg::testing::TempFolder;

namespace {

// The twin's problem: x in a Rosenbrock valley, W in a ridge least-squares term, u unused.
const Values kInitialX{-1.2, 1.0, -0.5, 0.8};
const Values kInitialW{0.1, -0.2, 0.3, 0.4, 0.0, -0.6};
const Values kInitialU{0.5, -0.5};

Tensor twin_loss(const Tensor& x, const Tensor& w) {
  const Tensor head = x.narrow(0, 0, 3), tail = x.narrow(0, 1, 3);
  const Tensor valley = sub(tail, mul(head, head));
  const Tensor one_minus = add(neg(head), 1.0);
  const Tensor rosenbrock = sum(add(mul(mul(valley, valley), 10.0), mul(one_minus, one_minus)));
  const Tensor c = make_tensor({1.0, -2.0, 0.5}, w.dtype());
  const Tensor e = make_tensor({0.3, -0.4}, w.dtype());
  const Tensor residual = sub(matmul(w, c), e);
  return add(add(rosenbrock, sum(mul(residual, residual))), mul(sum(mul(w, w)), 0.1));
}

std::vector<Tensor> twin_params(DType dtype) {
  Tensor w = tensor(kInitialW, Shape{2, 3}, dtype);
  w.requires_grad_();
  return {make_param(kInitialX, dtype), w, make_param(kInitialU, dtype)};
}

optim::LBFGSOptions options_of(const std::map<std::string, double>& o) {
  return {.lr = o.at("lr"),
          .max_iter = int64_t(o.at("max_iter")),
          .max_eval = int64_t(o.at("max_eval")),
          .tolerance_grad = o.at("tolerance_grad"),
          .tolerance_change = o.at("tolerance_change"),
          .history_size = int64_t(o.at("history_size")),
          .line_search_fn = o.at("line_search_fn") != 0 ? std::optional<std::string>("strong_wolfe")
                                                        : std::nullopt,
          .maximize = o.at("maximize") != 0};
}

// The closure of the twin: zero_grad, the loss (negated with maximize), backward.
optim::LBFGS::Closure closure_for(optim::LBFGS& opt, const std::vector<Tensor>& params,
                                  bool maximize) {
  return [&opt, &params, maximize] {
    opt.zero_grad();
    Tensor loss = twin_loss(params[0], params[1]);
    if (maximize) loss = neg(loss);
    loss.backward();
    return loss;
  };
}

// A state dict's value as torch's twin prints it: flattened, in float64.
Values state_values(const optim::OptimizerStateDict& dict, const std::string& key) {
  return values_of(dict.state.at(0).at(key).reshape({-1}));
}

std::vector<std::string> state_keys(const optim::OptimizerStateDict& dict) {
  std::vector<std::string> keys;
  if (dict.state.count(0) == 0) return keys;
  for (const auto& [key, value] : dict.state.at(0)) keys.push_back(key);
  return keys;
}

// Replays twin run `name` with `dtype` parameters; the parameters and returned losses (and,
// for float64, every state value) within `tolerance` of torch's (close: relative, absolute
// below 1), the state keys and counts exact.
void follow_lbfgs_run(const std::string& name, DType dtype, double tolerance) {
  INFO(name << " in " << dtype_name(dtype));
  const TwinRun& run = twin_run(name);
  REQUIRE(run.optimizer == "LBFGS");
  std::vector<Tensor> params = twin_params(dtype);
  optim::LBFGS opt(params, options_of(run.options));
  CHECK(opt.param_groups()[0].options == run.options);
  const bool maximize = run.options.at("maximize") != 0;
  const optim::LBFGS::Closure closure = closure_for(opt, params, maximize);
  for (size_t k = 0; k < run.steps.size(); ++k) {
    INFO("step " << k);
    const std::vector<TwinRecord>& records = run.steps[k];
    if (k > 0) {
      const double loss = opt.step(closure).item<double>();
      CHECK(close({loss}, records[0].state.at("loss"), tolerance));
    }
    REQUIRE(records.size() == params.size());
    for (size_t j = 0; j < params.size(); ++j) {
      CHECK(close(values_of(params[j].reshape({-1})), records[j].param, tolerance));
    }
    const optim::OptimizerStateDict dict = opt.state_dict();
    std::vector<std::string> want_keys = records[0].keys;
    std::sort(want_keys.begin(), want_keys.end());
    CHECK(state_keys(dict) == want_keys);
    for (const std::string& key : records[0].keys) {
      INFO(key);
      const Values want = records[0].state.at(key);
      if (key == "func_evals" || key == "n_iter") {
        CHECK(state_values(dict, key) == want);
      } else if (dtype == kFloat64) {
        CHECK(close(state_values(dict, key), want, tolerance));
      }
    }
  }
}

}  // namespace

TEST_CASE("LBFGS: every option set against PyTorch step by step", "[optim][lbfgs]") {
  const std::vector<std::string> names = twin_run_names("lbfgs_");
  REQUIRE(names.size() == 6);
  // float64 is exact up to the order of the sums in the dot products.
  for (const std::string& name : names) follow_lbfgs_run(name, kFloat64, 1e-9);
}

TEST_CASE("LBFGS: float32 parameters follow the float64 run", "[optim][lbfgs]") {
  // The scalars are computed in double; the vectors round to float32 at every operation.
  follow_lbfgs_run("lbfgs_fixed_step", kFloat32, 1e-4);
  follow_lbfgs_run("lbfgs_max_eval", kFloat32, 1e-4);
}

TEST_CASE("LBFGS: defaults are torch's", "[optim][lbfgs]") {
  optim::LBFGS opt(twin_params(kFloat64));
  const std::map<std::string, double> want{{"lr", 1},
                                           {"max_iter", 20},
                                           {"max_eval", 25},
                                           {"tolerance_grad", 1e-7},
                                           {"tolerance_change", 1e-9},
                                           {"history_size", 100},
                                           {"line_search_fn", 0},
                                           {"maximize", 0}};
  CHECK(opt.param_groups()[0].options == want);
  CHECK(std::string(opt.name()) == "LBFGS");
  CHECK(optim::LBFGS(twin_params(kFloat64), {.max_iter = 7})
            .param_groups()[0]
            .options.at("max_eval") == 8);  // 7 * 5 / 4, as torch's integer division
}

TEST_CASE("LBFGS: a resumed run continues as the uninterrupted one", "[optim][lbfgs]") {
  const optim::LBFGSOptions options{.history_size = 3, .line_search_fn = "strong_wolfe"};
  std::vector<Tensor> straight = twin_params(kFloat64);
  optim::LBFGS straight_opt(straight, options);
  const optim::LBFGS::Closure straight_closure = closure_for(straight_opt, straight, false);
  for (int k = 0; k < 2; ++k) straight_opt.step(straight_closure);
  const optim::OptimizerStateDict saved = straight_opt.state_dict();
  std::vector<Tensor> resumed;
  for (const Tensor& p : straight) {
    Tensor copy = p.detach().clone();
    copy.requires_grad_();
    resumed.push_back(copy);
  }
  for (int k = 0; k < 2; ++k) straight_opt.step(straight_closure);

  optim::LBFGS resumed_opt(resumed, {});  // options come with the state dict
  resumed_opt.load_state_dict(saved);
  CHECK(resumed_opt.param_groups()[0].options == straight_opt.param_groups()[0].options);
  const optim::LBFGS::Closure resumed_closure = closure_for(resumed_opt, resumed, false);
  for (int k = 0; k < 2; ++k) resumed_opt.step(resumed_closure);
  for (size_t j = 0; j < straight.size(); ++j) {
    CHECK(bytes_of(resumed[j]) == bytes_of(straight[j]));
  }
  const optim::OptimizerStateDict a = straight_opt.state_dict(), b = resumed_opt.state_dict();
  REQUIRE(state_keys(a) == state_keys(b));
  for (const std::string& key : state_keys(a)) {
    INFO(key);
    CHECK(bytes_of(a.state.at(0).at(key)) == bytes_of(b.state.at(0).at(key)));
  }
}

TEST_CASE("LBFGS: a checkpoint resumes the run bit for bit", "[optim][lbfgs]") {
  // save_checkpoint and load_checkpoint reach LBFGS's own state_dict and load_state_dict: the
  // stacked history, the 0-dim counts and scalars go through the safetensors file.
  manual_seed(3);
  const Tensor x = randn({8, 4}, kFloat64), y = randn({8, 1}, kFloat64);
  auto make_model = [] {
    manual_seed(4);
    auto model = std::make_shared<nn::Linear>(4, 1);
    model->to(kFloat64);
    return model;
  };
  auto closure_for_model = [&](nn::Linear& model, optim::LBFGS& opt) -> optim::LBFGS::Closure {
    return [&] {
      opt.zero_grad();
      Tensor loss = mse_loss(model.forward(x), y);
      loss.backward();
      return loss;
    };
  };
  const optim::LBFGSOptions options{
      .max_iter = 4, .history_size = 3, .line_search_fn = "strong_wolfe"};
  auto saved = make_model();
  optim::LBFGS saved_opt(saved->parameters(), options);
  const optim::LBFGS::Closure saved_closure = closure_for_model(*saved, saved_opt);
  saved_opt.step(saved_closure);
  TempFolder folder;
  const std::string path = folder.file("lbfgs.safetensors");
  io::save_checkpoint(path, *saved, saved_opt, std::vector<io::NamedState>{});

  auto resumed = make_model();
  optim::LBFGS resumed_opt(resumed->parameters(), {});
  io::load_checkpoint(path, *resumed, resumed_opt, std::vector<io::NamedState>{});
  CHECK(resumed_opt.param_groups()[0].options == saved_opt.param_groups()[0].options);
  const optim::LBFGS::Closure resumed_closure = closure_for_model(*resumed, resumed_opt);
  for (int k = 0; k < 2; ++k) {
    CHECK(bytes_of(resumed_opt.step(resumed_closure)) == bytes_of(saved_opt.step(saved_closure)));
  }
  const std::vector<Tensor> a = saved->parameters(), b = resumed->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(bytes_of(a[i]) == bytes_of(b[i]));
}

TEST_CASE("LBFGS: a gradient already within tolerance_grad returns at once", "[optim][lbfgs]") {
  std::vector<Tensor> params = twin_params(kFloat64);
  optim::LBFGS opt(params, {.tolerance_grad = 1e3});
  int calls = 0;
  const Tensor loss = opt.step([&] {
    ++calls;
    opt.zero_grad();
    Tensor l = twin_loss(params[0], params[1]);
    l.backward();
    return l;
  });
  CHECK(calls == 1);
  CHECK(loss.item<double>() == Approx(34.9895).epsilon(1e-12));  // the twin's first loss
  CHECK(values_of(params[0]) == kInitialX);
  const optim::OptimizerStateDict dict = opt.state_dict();
  CHECK(state_keys(dict) == std::vector<std::string>{"func_evals", "n_iter"});
  CHECK(state_values(dict, "func_evals") == Values{1});
  CHECK(state_values(dict, "n_iter") == Values{0});
}

TEST_CASE("LBFGS: a closure it cannot use is an error that changes nothing", "[optim][lbfgs]") {
  std::vector<Tensor> params = twin_params(kFloat64);
  optim::LBFGS opt(params);
  CHECK_THROWS_WITH(opt.step(), Contains("LBFGS: expected step(closure), got step()"));
  CHECK_FALSE(opt.supports_scaled_step());
  CHECK_THROWS_WITH(
      opt.step_scaled(Tensor(), Tensor()),
      Contains("expected an optimizer that supports the scaled step (SGD, Adam, "
               "AdamW, RMSprop, Adagrad, Adamax, Adadelta, RAdam, NAdam), got LBFGS"));
  CHECK_THROWS_WITH(opt.step(optim::LBFGS::Closure()), Contains("expected a closure"));
  CHECK_THROWS_WITH(opt.step([&] {
    opt.zero_grad();
    Tensor l = mul(params[0], 2.0);
    sum(l).backward();
    return l;
  }),
                    Contains("expected the closure to return the loss, a one-element tensor, got "
                             "shape [4]"));
  CHECK_THROWS_WITH(opt.step([] { return Tensor(); }), Contains("got an undefined tensor"));
  CHECK(values_of(params[0]) == kInitialX);
  CHECK(opt.state_dict().state.count(0) == 0);
}

TEST_CASE("LBFGS: bad options and groups are errors", "[optim][lbfgs]") {
  auto made = [](optim::LBFGSOptions options) { optim::LBFGS opt(twin_params(kFloat64), options); };
  CHECK_THROWS_WITH(made({.lr = -1}), Contains("LBFGS: expected lr >= 0, got -1"));
  CHECK_THROWS_WITH(made({.max_iter = 0, .max_eval = 3}),
                    Contains("LBFGS: max_iter: expected a whole number in [1, "));
  CHECK_THROWS_WITH(made({.max_eval = 0}), Contains("LBFGS: max_eval: expected a whole number"));
  CHECK_THROWS_WITH(made({.history_size = -3}),
                    Contains("LBFGS: history_size: expected a whole number"));
  CHECK_THROWS_WITH(made({.tolerance_grad = std::nan("")}),
                    Contains("LBFGS: expected tolerance_grad >= 0, got nan"));
  CHECK_THROWS_WITH(made({.line_search_fn = "backtracking"}),
                    Contains("expected line_search_fn \"strong_wolfe\" or none, got "
                             "\"backtracking\""));
  CHECK_THROWS_WITH(optim::LBFGS(std::vector<Tensor>{}), Contains("at least one parameter"));
  CHECK_THROWS_WITH(optim::LBFGS({make_param({1, 2}, kFloat64), make_param({1}, kFloat32)}),
                    Contains("expected every parameter with the dtype and device of the first "
                             "(float64 on cpu), got float32 on cpu for parameter 1"));

  optim::LBFGS opt(twin_params(kFloat64));
  CHECK_THROWS_WITH(opt.add_param_group({{make_param({1.0}, kFloat64)}, {}}),
                    Contains("LBFGS: expected one param group"));
  CHECK(opt.param_groups().size() == 1);
}

TEST_CASE("LBFGS: a bad state dict is an error that changes nothing", "[optim][lbfgs]") {
  std::vector<Tensor> params = twin_params(kFloat64);
  optim::LBFGS opt(params, {.history_size = 3, .line_search_fn = "strong_wolfe"});
  const optim::LBFGS::Closure closure = closure_for(opt, params, false);
  opt.step(closure);
  const optim::OptimizerStateDict good = opt.state_dict();
  const int64_t pairs = good.state.at(0).at("old_dirs").size(0);
  REQUIRE(pairs == 3);  // a full history: the checks below see one

  auto refused = [&](const std::function<void(optim::OptimizerStateDict&)>& change,
                     const std::string& message) {
    optim::OptimizerStateDict bad = good;
    change(bad);
    CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains(message));
    const optim::OptimizerStateDict now = opt.state_dict();
    REQUIRE(state_keys(now) == state_keys(good));
    for (const std::string& key : state_keys(good)) {
      CHECK(bytes_of(now.state.at(0).at(key)) == bytes_of(good.state.at(0).at(key)));
    }
    CHECK(now.param_groups[0].options == good.param_groups[0].options);
  };
  refused([](auto& d) { d.state.at(0)["al"] = zeros({3}, kFloat64); },
          "expected state keys func_evals, n_iter, d, t, old_dirs, old_stps, ro, H_diag, "
          "prev_flat_grad, prev_loss, got \"al\"");
  refused([](auto& d) { d.state[1] = d.state.at(0); }, "expected state only for parameter 0");
  refused([](auto& d) { d.state.at(0)["n_iter"] = scalar_tensor(-1.0, kFloat64); },
          "\"n_iter\": expected a whole number in [0, ");
  refused([](auto& d) { d.state.at(0).erase("ro"); }, "expected \"ro\" in the state with n_iter");
  refused([](auto& d) { d.state.at(0)["d"] = zeros({5}, kFloat64); },
          "expected \"d\" to be a floating tensor of shape [12], got float64 [5]");
  refused([](auto& d) { d.state.at(0)["ro"] = zeros({2}, kFloat64); },
          "expected floating \"old_dirs\" and \"old_stps\" of shape [k, 12] and \"ro\" of shape "
          "[k] with k <= history_size (3), got [3, 12], [3, 12] and [2]");
  refused([](auto& d) { d.param_groups[0].options["history_size"] = 2; },
          "with k <= history_size (2)");
  refused([](auto& d) { d.param_groups[0].options["max_iter"] = 0.5; },
          "load_state_dict: param group 0: LBFGS: max_iter: expected a whole number");
  refused([](auto& d) { d.state.at(0)["t"] = zeros({2}, kFloat64); },
          "expected \"t\" to be a one-element floating tensor, got float64 [2]");
}
