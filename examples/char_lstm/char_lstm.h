// char_lstm: a two-layer LSTM language model of characters, the pieces shared by the program
// (main.cpp) and its test (tests/examples/char_lstm_twin_test.cpp).
//
//   V vocabulary size, E embedding size, H hidden size, B batch, T window length.
//
// The text becomes token ids through a vocabulary of the characters it holds (sorted, as
// `sorted(set(text))` in Python). A training example is a window of T characters and the T that
// follow it one position later; the DataLoader shuffles the windows with a seeded generator.
// The model is Embedding(V, E) -> LSTM(E, H, 2 layers, batch_first) -> Linear(H, V), trained
// with Adam, gradients clipped by norm, the lr on a cosine schedule, in one of three precisions
// (Precision below).
#pragma once

#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "halfgrad/halfgrad.h"

namespace char_lstm {

using hg::Tensor;

// ---- data -------------------------------------------------------------------------------------

// The characters of a text (bytes), sorted; a character's token id is its place in that order.
class Vocabulary {
 public:
  explicit Vocabulary(std::string_view text) {
    std::array<bool, 256> present{};
    for (char c : text) present[static_cast<unsigned char>(c)] = true;
    id_of_.fill(-1);
    for (int byte = 0; byte < 256; ++byte) {
      if (!present[size_t(byte)]) continue;
      id_of_[size_t(byte)] = int64_t(chars_.size());
      chars_.push_back(char(byte));
    }
  }

  int64_t size() const { return int64_t(chars_.size()); }
  const std::string& chars() const { return chars_; }

  // The ids of `text` as an int64 tensor [len]; a character outside the vocabulary is an
  // hg::Error naming it.
  Tensor encode(std::string_view text) const {
    std::vector<int64_t> ids;
    ids.reserve(text.size());
    for (char c : text) {
      const int64_t id = id_of_[static_cast<unsigned char>(c)];
      const unsigned char byte = static_cast<unsigned char>(c);
      HG_CHECK(id >= 0,
               "Vocabulary: expected one of the {} characters of the training text, got byte {}{}",
               chars_.size(), int(byte),
               std::isprint(byte) ? fmt::format(" ('{}')", c) : std::string());
      ids.push_back(id);
    }
    return hg::tensor(ids, {int64_t(ids.size())});
  }
  char decode(int64_t id) const {
    HG_CHECK(id >= 0 && id < size(), "Vocabulary: expected an id in [0, {}), got {}", size(), id);
    return chars_[size_t(id)];
  }

 private:
  std::string chars_;
  std::array<int64_t, 256> id_of_{};
};

// Example i: (tokens[i : i + T], tokens[i + 1 : i + T + 1]), each [T] int64, views of tokens.
class Windows : public hg::data::Dataset {
 public:
  Windows(Tensor tokens, int64_t window) : tokens_(std::move(tokens)), window_(window) {
    HG_CHECK(tokens_.dim() == 1, "Windows: expected 1-d token ids, got {} dims", tokens_.dim());
    HG_CHECK(window_ >= 1 && tokens_.size(0) > window_,
             "Windows: expected a window in [1, {}) for {} tokens, got {}", tokens_.size(0),
             tokens_.size(0), window_);
  }
  int64_t size() const override { return tokens_.size(0) - window_; }
  hg::data::Example get(int64_t index) const override {
    return {tokens_.narrow(0, index, window_), tokens_.narrow(0, index + 1, window_)};
  }

 private:
  Tensor tokens_;
  int64_t window_;
};

// ---- model ------------------------------------------------------------------------------------

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t embedding_dim = 32;
  int64_t hidden_size = 128;
  int64_t num_layers = 2;
  double dropout = 0.1;  // between the LSTM's layers, while training
};

// The parameters are named as the twin's torch module names them: embedding.weight,
// lstm.weight_ih_l0 ... lstm.bias_hh_l1, head.weight, head.bias.
class CharLSTM : public hg::nn::CustomForward<CharLSTM> {
 public:
  using State = std::tuple<Tensor, Tensor>;  // (h, c), each [L, B, H]

  explicit CharLSTM(const ModelConfig& config) : config(config) {
    embedding = register_module(
        "embedding", std::make_shared<hg::nn::Embedding>(config.vocab_size, config.embedding_dim));
    lstm = register_module(
        "lstm", std::make_shared<hg::nn::LSTM>(config.embedding_dim, config.hidden_size,
                                               hg::nn::RNNOptions{.num_layers = config.num_layers,
                                                                  .batch_first = true,
                                                                  .dropout = config.dropout}));
    head = register_module("head",
                           std::make_shared<hg::nn::Linear>(config.hidden_size, config.vocab_size));
  }
  std::string name() const override { return "CharLSTM"; }

  // tokens [B, T] int64 -> logits [B, T, V] and the final state.
  std::tuple<Tensor, State> forward(const Tensor& tokens,
                                    const std::optional<State>& state = std::nullopt) {
    auto [output, final_state] = (*lstm)((*embedding)(tokens), state);  // [B, T, H]
    return {(*head)(output), final_state};
  }

  ModelConfig config;
  std::shared_ptr<hg::nn::Embedding> embedding;
  std::shared_ptr<hg::nn::LSTM> lstm;
  std::shared_ptr<hg::nn::Linear> head;
};

// ---- training ---------------------------------------------------------------------------------

// fp32: no autocast. bf16: autocast to bfloat16, no loss scaling (bfloat16 has float32's
// exponent range). fp16: autocast to float16 and a GradScaler. The parameters and Adam's state
// stay float32 in every mode.
enum class Precision { kFloat32, kBFloat16, kFloat16 };

inline Precision precision_from_name(const std::string& name) {
  if (name == "fp32") return Precision::kFloat32;
  if (name == "bf16") return Precision::kBFloat16;
  if (name == "fp16") return Precision::kFloat16;
  HG_ERROR("char_lstm: expected a precision fp32, bf16 or fp16, got '{}'", name);
}

// The autocast guard of a precision (disabled for fp32).
inline hg::amp::Autocast autocast_for(Precision precision) {
  return hg::amp::Autocast(hg::kCPU,
                           precision == Precision::kFloat16 ? hg::kFloat16 : hg::kBFloat16,
                           /*enabled=*/precision != Precision::kFloat32);
}

struct TrainOptions {
  double lr = 5e-3;
  double max_grad_norm = 0.25;  // clip_grad_norm_'s threshold
  int64_t total_steps = 1;      // the cosine schedule's T_max
  Precision precision = Precision::kFloat32;
};

struct StepReport {
  double loss = 0;       // the step's mean cross entropy, in nats
  double grad_norm = 0;  // clip_grad_norm_'s total norm of the unscaled gradients, before clipping
  double lr = 0;         // the lr the step ran with
  double scale = 1;      // the GradScaler's scale the backward ran with (1 unless fp16)
  bool stepped = true;   // false when the GradScaler skipped the step
};

// The optimizer, schedule and scaler of one run, and its training step.
class Trainer {
 public:
  Trainer(std::shared_ptr<CharLSTM> model, const TrainOptions& options)
      : model_(std::move(model)),
        options_(options),
        optimizer_(model_->parameters(), hg::optim::AdamOptions{.lr = options.lr}),
        scheduler_(optimizer_, options.total_steps),
        scaler_(hg::amp::GradScalerOptions{.enabled = options.precision == Precision::kFloat16}) {}

  // One step on inputs and targets [B, T] int64.
  StepReport step(const Tensor& inputs, const Tensor& targets) {
    StepReport report;
    report.lr = scheduler_.get_last_lr()[0];
    optimizer_.zero_grad();
    Tensor loss;
    {
      auto autocast = autocast_for(options_.precision);
      auto [logits, state] = (*model_)(inputs);
      const int64_t vocab = logits.size(-1);
      loss = hg::nn::functional::cross_entropy(logits.reshape({-1, vocab}), targets.reshape({-1}));
    }
    scaler_.scale(loss).backward();
    // Unscaled first, so that the threshold applies to the true gradients (torch.amp's recipe).
    scaler_.unscale_(optimizer_);
    report.grad_norm =
        hg::nn::utils::clip_grad_norm_(model_->parameters(), options_.max_grad_norm).item<double>();
    report.scale = scaler_.get_scale();
    report.stepped = scaler_.step(optimizer_);
    scaler_.update();
    scheduler_.step();
    report.loss = loss.item<double>();
    return report;
  }

  const hg::amp::GradScaler& scaler() const { return scaler_; }

 private:
  std::shared_ptr<CharLSTM> model_;
  TrainOptions options_;
  hg::optim::Adam optimizer_;
  hg::optim::CosineAnnealingLR scheduler_;
  hg::amp::GradScaler scaler_;
};

// ---- evaluation and sampling ------------------------------------------------------------------

// The model's mean cross entropy on `tokens` in bits per character: the text cut into
// consecutive windows of `window` characters, each predicted from the state the previous one
// left (truncated backpropagation's view of the text, without the backpropagation), in eval
// mode.
inline double bits_per_character(CharLSTM& model, const Tensor& tokens, int64_t window,
                                 Precision precision) {
  hg::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::optional<CharLSTM::State> state;
  double nats = 0;
  int64_t count = 0;
  for (int64_t start = 0; start + 1 < tokens.size(0); start += window) {
    const int64_t length = std::min(window, tokens.size(0) - 1 - start);
    const Tensor inputs = tokens.narrow(0, start, length).unsqueeze(0);  // [1, length]
    const Tensor targets = tokens.narrow(0, start + 1, length);
    auto autocast = autocast_for(precision);
    auto [logits, next_state] = model(inputs, state);
    state = next_state;
    nats += hg::nn::functional::cross_entropy(logits.squeeze(0), targets, {}, -100, "sum")
                .item<double>();
    count += length;
  }
  model.train(was_training);
  return nats / double(count) / std::numbers::ln2;
}

// `length` characters written by the model after `prompt`: each drawn from the softmax of the
// logits divided by `temperature` (0: the most likely character), fed back as the next input.
inline std::string sample(CharLSTM& model, const Vocabulary& vocabulary, const std::string& prompt,
                          int64_t length, double temperature, hg::Generator& generator,
                          Precision precision) {
  HG_CHECK(!prompt.empty(), "sample: expected a prompt of at least one character");
  HG_CHECK(temperature >= 0, "sample: expected a temperature >= 0, got {}", temperature);
  hg::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  auto autocast = autocast_for(precision);
  auto [logits, state] = model(vocabulary.encode(prompt).unsqueeze(0));  // [1, len, V]
  std::string text;
  for (int64_t i = 0; i < length; ++i) {
    const Tensor last = logits.select(1, logits.size(1) - 1).squeeze(0).to(hg::kFloat32);  // [V]
    const int64_t next =
        temperature == 0 ? hg::argmax(last, 0).item<int64_t>()
                         : hg::multinomial(hg::softmax(last / temperature, 0), 1, false, &generator)
                               .item<int64_t>();
    text.push_back(vocabulary.decode(next));
    std::tie(logits, state) = model(hg::tensor(std::vector<int64_t>{next}, {1, 1}), state);
  }
  model.train(was_training);
  return text;
}

}  // namespace char_lstm
