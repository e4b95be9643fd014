// examples/gpt_sample against its PyTorch twin (examples/gpt_sample/twin.py, Debian's torch
// 1.13): from the same initial weights and window starts (golden/init.safetensors), the loss of
// each of 20 steps and the norm clipping saw, in fp32, bf16 autocast and fp16 + GradScaler, and
// the top-k sampling distribution after training; then multinomial sampling from it.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../examples/gpt_sample/gpt_sample.h"

using namespace hg;
using namespace hg::examples::gpt_sample;

namespace {

const std::string kDir = std::string(HG_TESTS_SOURCE_DIR) + "/../examples/gpt_sample";
constexpr int64_t kSteps = 20;
constexpr double kTemperature = 0.8;
constexpr int64_t kTopK = 10;

struct Golden {
  std::map<std::string, std::vector<double>> loss, grad_norm;  // by mode, per step
  std::vector<int64_t> prompt;
  std::map<int64_t, double> probs;  // the kept characters' probabilities
};

Golden read_golden() {
  std::ifstream in(kDir + "/golden/losses.txt");
  REQUIRE(in.good());
  Golden golden;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "loss") {
      std::string mode;
      int64_t step = 0;
      double loss = 0, norm = 0;
      fields >> mode >> step >> loss >> norm;
      REQUIRE(step == int64_t(golden.loss[mode].size()) + 1);
      golden.loss[mode].push_back(loss);
      golden.grad_norm[mode].push_back(norm);
    } else if (kind == "probs") {
      std::string token;
      while (fields >> token && token != ":") golden.prompt.push_back(std::stoll(token));
      while (fields >> token) {
        const size_t colon = token.find(':');
        golden.probs[std::stoll(token.substr(0, colon))] = std::stod(token.substr(colon + 1));
      }
    }
  }
  return golden;
}

struct Run {
  std::unique_ptr<Trainer> trainer;  // as trained
  std::vector<double> loss, grad_norm;
  int64_t skipped = 0;
};

// Trains kSteps steps from golden/init.safetensors in `dtype`, with the schedule's length the
// twin's.
Run train_from_init(DType dtype) {
  const CharText text(data::read_text_file(kDir + "/text.txt"));
  TensorMap init = load(kDir + "/golden/init.safetensors");
  const Tensor starts = init.at("starts");
  init.erase("starts");
  Run run;
  run.trainer =
      std::make_unique<Trainer>(text.vocab_size(), Options{.dtype = dtype, .steps = kSteps});
  run.trainer->model.load_state_dict(init);
  for (int64_t step = 0; step < kSteps; ++step) {
    run.loss.push_back(run.trainer->step(text.batch(starts.select(0, step), Options{}.block)));
    run.grad_norm.push_back(run.trainer->last_grad_norm);
    run.skipped += run.trainer->scaler.last_step_skipped();
  }
  return run;
}

double relative(double a, double b) { return std::abs(a - b) / std::abs(b); }

}  // namespace

TEST_CASE("gpt_sample fp32 follows the PyTorch twin step by step", "[examples][gpt_sample]") {
  const Golden golden = read_golden();
  REQUIRE(golden.loss.at("fp32").size() == size_t(kSteps));
  const Run run = train_from_init(kFloat32);
  Trainer* trainer = run.trainer.get();
  for (int64_t i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1 << ": halfgrad " << run.loss[size_t(i)] << ", torch "
                 << golden.loss.at("fp32")[size_t(i)]);
    CHECK(relative(run.loss[size_t(i)], golden.loss.at("fp32")[size_t(i)]) < 1e-5);
    CHECK(relative(run.grad_norm[size_t(i)], golden.grad_norm.at("fp32")[size_t(i)]) < 1e-4);
  }
  // The model learned in those steps: the last loss is well below the first.
  CHECK(run.loss.back() < run.loss.front() - 0.5);

  // The sampling distribution after training: temperature, top-k, softmax, as the twin's.
  const CharText text(data::read_text_file(kDir + "/text.txt"));
  const Tensor prompt = text.encode("The ");
  CHECK(prompt.to_vector<int64_t>() == golden.prompt);
  trainer->model.eval();
  const std::vector<double> probs =
      next_char_probs(trainer->model, prompt, kTemperature, kTopK).to_vector<double>();
  REQUIRE(golden.probs.size() == size_t(kTopK));
  for (size_t c = 0; c < probs.size(); ++c) {
    const auto kept = golden.probs.find(int64_t(c));
    if (kept == golden.probs.end()) {
      CHECK(probs[c] == 0.0);
    } else {
      CHECK(std::abs(probs[c] - kept->second) < 1e-5);
    }
  }

  // Sampling: only kept characters, at their probabilities (binomial bounds: 5 sigma).
  Generator generator(7);
  constexpr int64_t kDraws = 20000;
  const Tensor draws =
      multinomial(tensor(probs, {int64_t(probs.size())}).to(kFloat32), kDraws, true, &generator);
  std::vector<int64_t> counts(probs.size(), 0);
  for (int64_t id : draws.to_vector<int64_t>()) counts[size_t(id)]++;
  for (size_t c = 0; c < probs.size(); ++c) {
    const double expected = probs[c] * double(kDraws);
    const double sigma = std::sqrt(double(kDraws) * probs[c] * (1 - probs[c]));
    INFO("character " << c << ": " << counts[c] << " draws, expected " << expected);
    CHECK(std::abs(double(counts[c]) - expected) <= 5 * sigma + 1e-9);
  }
  const Tensor generated = generate(trainer->model, prompt, 40, kTemperature, kTopK, &generator);
  CHECK(generated.size(1) == prompt.size(1) + 40);
  CHECK(text.decode(generated).substr(0, 4) == "The ");
}

TEST_CASE("gpt_sample bf16 autocast follows the twin's bf16 autocast", "[examples][gpt_sample]") {
  const Golden golden = read_golden();
  const Run run = train_from_init(kBFloat16);
  for (int64_t i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1 << ": halfgrad " << run.loss[size_t(i)] << ", torch "
                 << golden.loss.at("bf16")[size_t(i)]);
    CHECK(relative(run.loss[size_t(i)], golden.loss.at("bf16")[size_t(i)]) < 2e-3);
  }
}

TEST_CASE("gpt_sample fp16 with GradScaler follows the twin's fp32", "[examples][gpt_sample]") {
  // torch 1.13 has neither float16 autocast nor a GradScaler on the CPU, so the twin has no
  // fp16 run: the fp16 + GradScaler losses are held to the fp32 ones.
  const Golden golden = read_golden();
  const Run run = train_from_init(kFloat16);
  for (int64_t i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1 << ": halfgrad fp16 " << run.loss[size_t(i)] << ", torch fp32 "
                 << golden.loss.at("fp32")[size_t(i)]);
    CHECK(relative(run.loss[size_t(i)], golden.loss.at("fp32")[size_t(i)]) < 2e-3);
  }
  // A GradScaler starting at 2^16 overflows on no step of this model.
  CHECK(run.skipped == 0);
}
