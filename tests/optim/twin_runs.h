// Shared by the RMSprop, Adagrad, Adamax, Adadelta, RAdam, NAdam and LBFGS tests: reads the runs
// the twins printed with torch 1.13 (twin/rmsprop_adagrad.txt, twin/adamax_adadelta_radam.txt)
// and torch 2 (twin/nadam.txt, twin/lbfgs.txt) and replays one with a halfgrad optimizer,
// comparing the parameters, the state keys and every state value after construction and after
// each step (LBFGS, stepped with a closure, replays its runs in lbfgs_test.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "reference.h"

namespace optim_test {

// What torch printed for one parameter at one step.
struct TwinRecord {
  Values grad;   // the gradient the step used (none at step 0)
  Values param;  // after the step
  std::vector<std::string> keys;
  std::map<std::string, Values> state;
};

struct TwinRun {
  std::string optimizer;  // torch's class name
  std::map<std::string, double> options;
  std::vector<std::vector<TwinRecord>> steps;  // [step][param]; step 0: after construction
};

// Adds the runs of one twin file (the format of twin/rmsprop_adagrad.py) to `runs`.
inline void read_twin_file(std::istream& file, std::map<std::string, TwinRun>& runs) {
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string name, step_word;
    in >> name >> step_word;
    TwinRun& run = runs[name];
    if (step_word == "options") {
      in >> run.optimizer;
      std::string key;
      double value = 0;
      while (in >> key >> value) run.options[key] = value;
      continue;
    }
    const size_t step = std::stoul(step_word);
    size_t param = 0;
    std::string key;
    in >> param >> key;
    if (run.steps.size() <= step) run.steps.resize(step + 1);
    if (run.steps[step].size() <= param) run.steps[step].resize(param + 1);
    TwinRecord& record = run.steps[step][param];
    std::vector<std::string> words;
    for (std::string word; in >> word;) words.push_back(word);
    if (key == "keys") {
      if (words != std::vector<std::string>{"-"}) record.keys = words;
      continue;
    }
    Values values;
    for (const std::string& word : words) values.push_back(std::stod(word));
    if (key == "grad") {
      record.grad = values;
    } else if (key == "param") {
      record.param = values;
    } else {
      record.state[key] = values;
    }
  }
}

// The runs of every twin file (run names are unique across them).
inline std::map<std::string, TwinRun> read_twin_runs() {
  std::map<std::string, TwinRun> runs;
  for (const char* name :
       {"rmsprop_adagrad.txt", "adamax_adadelta_radam.txt", "nadam.txt", "lbfgs.txt"}) {
    std::ifstream file(std::string(HG_TESTS_SOURCE_DIR) + "/optim/twin/" + name);
    REQUIRE(file.good());
    read_twin_file(file, runs);
  }
  return runs;
}

inline const std::map<std::string, TwinRun>& twin_runs() {
  static const std::map<std::string, TwinRun> runs = read_twin_runs();
  return runs;
}

inline const TwinRun& twin_run(const std::string& name) {
  auto found = twin_runs().find(name);
  REQUIRE(found != twin_runs().end());
  return found->second;
}

// The twin's run names starting with `prefix`.
inline std::vector<std::string> twin_run_names(const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& [name, run] : twin_runs()) {
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

// |got - want| <= tolerance * max |want| element by element: relative to the size of the
// tensor, so that small state values (square averages of 1e-3) are held as tightly as the
// parameters, and elements near zero (a gradient average crossing zero) are not held to a
// relative error they cannot meet. A tensor of zeros must match exactly.
inline bool close_to_scale(const Values& got, const Values& want, double tolerance) {
  if (got.size() != want.size()) return false;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tolerance * scale)) return false;
  }
  return true;
}

using MakeOptimizer =
    std::function<std::unique_ptr<hg::optim::Optimizer>(std::vector<hg::optim::ParamGroup>)>;

// Replays run `name` with `dtype` parameters made by `make` (one group holding the run's
// parameters and options): after construction and after each step, every parameter and state
// value is within `tolerance` of torch's (close_to_scale), the state keys are torch's, and
// "step" is exact.
inline void follow_twin_run(const std::string& name, hg::DType dtype, double tolerance,
                            const MakeOptimizer& make) {
  const TwinRun& run = twin_run(name);
  REQUIRE(run.steps.size() > 1);
  std::vector<hg::Tensor> params;
  for (const TwinRecord& record : run.steps[0]) params.push_back(make_param(record.param, dtype));
  auto opt = make({hg::optim::ParamGroup{params, run.options}});
  for (size_t k = 0; k < run.steps.size(); ++k) {
    const std::vector<TwinRecord>& records = run.steps[k];
    REQUIRE(records.size() == params.size());
    if (k > 0) {
      for (size_t j = 0; j < params.size(); ++j) set_grad(params[j], records[j].grad);
      opt->step();
    }
    const hg::optim::OptimizerStateDict state = opt->state_dict();
    for (size_t j = 0; j < params.size(); ++j) {
      INFO(name << " " << hg::dtype_name(dtype) << " step " << k << " parameter " << j);
      const TwinRecord& want = records[j];
      CHECK(close_to_scale(values_of(params[j]), want.param, tolerance));
      std::vector<std::string> keys;
      auto entry = state.state.find(int64_t(j));
      if (entry != state.state.end()) {
        for (const auto& [key, value] : entry->second) keys.push_back(key);
      }
      REQUIRE(keys == want.keys);  // both sorted
      for (const auto& [key, values] : want.state) {
        INFO(key);
        const Values got = values_of(entry->second.at(key));
        if (key == "step") {
          CHECK(got == values);
        } else {
          CHECK(close_to_scale(got, values, tolerance));
        }
      }
    }
  }
}

// Replays every run whose name starts with `prefix` (at least `at_least` of them, each of
// `optimizer`, torch's class name) in float64 to 1e-12 and in float32 to 1e-5: float32 rounds
// the inputs and every stored value (6e-8 relative), and torch's own float32 runs are within
// 1.4e-6 of each float64 tensor's size (RMSprop centered with momentum the farthest), so 1e-5
// leaves room for a different rounding here and there.
inline void follow_twin_runs(const std::string& prefix, const std::string& optimizer,
                             size_t at_least, const MakeOptimizer& make) {
  const std::vector<std::string> names = twin_run_names(prefix);
  REQUIRE(names.size() >= at_least);
  for (const std::string& name : names) {
    REQUIRE(twin_run(name).optimizer == optimizer);
    follow_twin_run(name, hg::kFloat64, 1e-12, make);
    follow_twin_run(name, hg::kFloat32, 1e-5, make);
  }
}

}  // namespace optim_test
