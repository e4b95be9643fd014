// gpt_sample: a character GPT trained on a text and sampled with temperature and top-k, written
// as a PyTorch user writes nanoGPT's train.py and sample.py. Shared by main.cpp and by
// tests/examples/gpt_sample_twin_test.cpp; twin.py beside it is the same program in PyTorch.
//
//   CharText text(data::read_text_file("text.txt"));
//   Trainer trainer(text.vocab_size(), {.dtype = kBFloat16});
//   double loss = trainer.step(text.batch(starts, options.block));
//   Tensor out = generate(trainer.model, text.encode("The "), 200, 0.8, 10, &generator);
//
// One training step, the same in every precision (docs/design.md §7's loop): zero_grad,
// forward and cross_entropy under autocast (none for fp32), scaler.scale(loss).backward(),
// scaler.unscale_, clip_grad_norm_(1.0), scaler.step, scaler.update, then the cosine schedule,
// which does not advance on a skipped step. AdamW decays matrices and embeddings, not biases
// and LayerNorm parameters, as nanoGPT does. The GradScaler is on for fp16 only.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/halfgrad.h"

namespace hg::examples::gpt_sample {

struct Options {
  DType dtype = kFloat32;  // of the forward; kFloat32 turns autocast off
  int64_t block = 32;
  int64_t batch = 16;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_embd = 48;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t steps = 300;  // the cosine schedule's length
  double weight_decay = 0.1;
  double clip_norm = 1.0;
};

// "fp32", "bf16", "fp16" -> the autocast dtype (kFloat32: none).
inline DType parse_dtype(std::string_view name) {
  if (name == "fp32") return kFloat32;
  if (name == "bf16") return kBFloat16;
  if (name == "fp16") return kFloat16;
  HG_ERROR("gpt_sample: expected --dtype fp32, bf16 or fp16, got '{}'", name);
}

struct Batch {
  Tensor x;  // [B, T] int64 characters
  Tensor y;  // [B, T] int64 the characters that follow
};

// The text as character ids: the vocabulary is the sorted set of bytes it holds; the last
// tenth is held out for validation, as nanoGPT's shakespeare_char splits it.
class CharText {
 public:
  explicit CharText(const std::string& text) {
    HG_CHECK(text.size() >= 64, "gpt_sample: expected a text of at least 64 characters, got {}",
             text.size());
    std::array<bool, 256> present{};
    for (char c : text) present[static_cast<unsigned char>(c)] = true;
    id_of_.fill(-1);
    for (int byte = 0; byte < 256; ++byte) {
      if (present[size_t(byte)]) {
        id_of_[size_t(byte)] = int64_t(chars_.size());
        chars_.push_back(char(byte));
      }
    }
    ids_.reserve(text.size());
    for (char c : text) ids_.push_back(id_of_[static_cast<unsigned char>(c)]);
    train_length_ = int64_t(ids_.size()) - int64_t(ids_.size()) / 10;
  }

  int64_t vocab_size() const { return int64_t(chars_.size()); }
  int64_t train_length() const { return train_length_; }
  int64_t size() const { return int64_t(ids_.size()); }

  // Characters outside the vocabulary are an hg::Error naming them.
  Tensor encode(std::string_view text) const {
    std::vector<int64_t> ids;
    for (char c : text) {
      const int64_t id = id_of_[static_cast<unsigned char>(c)];
      HG_CHECK(id >= 0, "gpt_sample: the character '{}' is not in the text's vocabulary", c);
      ids.push_back(id);
    }
    return tensor(ids, {1, int64_t(ids.size())});
  }
  std::string decode(const Tensor& ids) const {
    std::string out;
    for (int64_t id : ids.to_vector<int64_t>()) out += chars_.at(size_t(id));
    return out;
  }

  // torch.randint(len(data) - block, (batch,)) over the training part (or, with val, the held-out
  // part, as offsets into the whole text).
  Tensor random_starts(int64_t batch, int64_t block, Generator& generator, bool val = false) const {
    const int64_t low = val ? train_length_ : 0;
    const int64_t high = (val ? size() : train_length_) - block;
    HG_CHECK(high > low, "gpt_sample: the text is too short for windows of {} characters", block);
    return randint(low, high, {batch}, {.dtype = kInt64}, &generator);
  }
  // The windows ids[s, s + block) and ids[s + 1, s + block + 1) for every start s.
  Batch batch(const Tensor& starts, int64_t block) const {
    std::vector<int64_t> x, y;
    for (int64_t s : starts.to_vector<int64_t>()) {
      HG_CHECK(s >= 0 && s + block + 1 <= size(),
               "gpt_sample: expected window starts in [0, {}], got {}", size() - block - 1, s);
      x.insert(x.end(), ids_.begin() + s, ids_.begin() + s + block);
      y.insert(y.end(), ids_.begin() + s + 1, ids_.begin() + s + block + 1);
    }
    const int64_t B = starts.numel();
    return {tensor(x, {B, block}), tensor(y, {B, block})};
  }

 private:
  std::string chars_;
  std::array<int64_t, 256> id_of_{};
  std::vector<int64_t> ids_;
  int64_t train_length_ = 0;
};

inline std::vector<optim::ParamGroup> adamw_groups(nn::Module& model, double weight_decay) {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  return {{.params = decay, .options = {{"weight_decay", weight_decay}}},
          {.params = no_decay, .options = {{"weight_decay", 0.0}}}};
}

// The model, its optimizer, schedule and scaler, and the step.
class Trainer {
 public:
  Trainer(int64_t vocab_size, const Options& options)
      : options_(options),
        model(vocab_size, options.block, options.n_layer, options.n_head, options.n_embd),
        opt(adamw_groups(model, options.weight_decay),
            {.lr = options.lr, .beta1 = 0.9, .beta2 = 0.99}),
        schedule(opt, options.steps, options.min_lr),
        scaler({.enabled = options.dtype == kFloat16}) {
    HG_CHECK(options.dtype == kFloat32 || options.dtype == kBFloat16 || options.dtype == kFloat16,
             "gpt_sample: expected the dtype float32, bfloat16 or float16, got {}", options.dtype);
  }

  // The mean cross entropy of the batch's next characters.
  Tensor loss_of(const Batch& batch) {
    const bool autocast_on = options_.dtype != kFloat32;
    amp::Autocast autocast(kCPU, autocast_on ? options_.dtype : kBFloat16, autocast_on);
    const Tensor logits = model(batch.x);  // [B, T, V]
    return nn::functional::cross_entropy(logits.reshape({-1, model.vocab_size}),
                                         batch.y.reshape({-1}));
  }

  // One step; returns the loss (before the update) and records the gradient norm clipping saw.
  double step(const Batch& batch) {
    opt.zero_grad();
    const Tensor loss = loss_of(batch);
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    last_grad_norm =
        nn::utils::clip_grad_norm_(model.parameters(), options_.clip_norm).item<double>();
    scaler.step(opt);
    scaler.update();
    schedule.step(/*optimizer_stepped=*/!scaler.last_step_skipped());
    return loss.item<double>();
  }

 private:
  Options options_;

 public:
  nn::GPT model;
  optim::AdamW opt;
  optim::CosineAnnealingLR schedule;
  amp::GradScaler scaler;
  double last_grad_norm = 0.0;
};

// nanoGPT's sampling distribution of the next character after idx [1, t]: the last position's
// logits (of at most the last block characters) divided by the temperature, every logit below
// the top_k-th largest set to -inf (top_k 0: all kept), softmax. [1, V] float32.
inline Tensor next_char_probs(nn::GPT& model, const Tensor& idx, double temperature,
                              int64_t top_k) {
  HG_CHECK(temperature > 0, "gpt_sample: expected a temperature > 0, got {}", temperature);
  HG_CHECK(top_k >= 0 && top_k <= model.vocab_size, "gpt_sample: expected top_k in [0, {}], got {}",
           model.vocab_size, top_k);
  NoGradGuard no_grad;
  const int64_t t = idx.size(1);
  const Tensor context =
      t > model.block_size ? idx.narrow(1, t - model.block_size, model.block_size) : idx;
  Tensor logits = model(context).select(1, -1).to(kFloat32) / temperature;  // [1, V]
  if (top_k > 0) {
    const auto [values, indices] = topk(logits, top_k);
    logits = masked_fill(logits, lt(logits, values.narrow(1, top_k - 1, 1)),
                         -std::numeric_limits<double>::infinity());
  }
  return softmax(logits, -1);
}

// Appends new_chars sampled characters to idx [1, t] (multinomial over next_char_probs).
inline Tensor generate(nn::GPT& model, Tensor idx, int64_t new_chars, double temperature,
                       int64_t top_k, Generator* generator) {
  for (int64_t i = 0; i < new_chars; ++i) {
    const Tensor probs = next_char_probs(model, idx, temperature, top_k);
    idx = cat({idx, multinomial(probs, 1, false, generator)}, 1);
  }
  return idx;
}

}  // namespace hg::examples::gpt_sample
