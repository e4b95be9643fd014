// The in-process task of train_gpt: character-level addition of two D-digit numbers.
//
// Every problem is one line of 3D + 4 characters: a and b zero-padded to D digits, then the
// D + 1 digits of a + b written backwards, then the end token '.':
//
//   D = 2, 7 + 45 = 52:   "07+45=250."
//
// NOTE [Reversed answers] The answer is written least significant digit first, the order in
// which a person adds: each digit then depends only on the two operand digits at that place
// and on the carry out of the digit just written. Written the usual way round, the first digit
// depends on every carry to its right, and a small GPT needs many more steps to learn it.
//
// A batch row is the line without its last character as input and the line shifted by one as
// target; only the targets that are answer characters (the D + 1 digits and '.') are scored,
// the others are kIgnoreIndex, because the operands are random and cannot be predicted.
//
// A held-out set of problems (drawn once from the seed) never appears in a training batch.
// accuracy() is the exact-match accuracy of greedy decoding on it: the model reads "a+b=",
// writes D + 2 tokens one at a time, each the argmax of its logits, and a problem counts only
// when every one of them is right.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "task.h"

namespace hg::examples {

class AdditionTask : public Task {
 public:
  // Tokens 0-9 are the digits.
  static constexpr int64_t kPlus = 10, kEquals = 11, kEnd = 12, kVocabSize = 13;
  static constexpr int64_t kMaxDigits = 6;  // 10^(2 D) problems must fit in an int64

  // digits: D in [1, kMaxDigits]. held_out: the size of the held-out set, at most a fifth of
  // the 10^(2 D) problems (fewer are held out when D is small).
  AdditionTask(int64_t digits, uint64_t seed, int64_t held_out = 500) : digits_(digits) {
    HG_CHECK(digits >= 1 && digits <= kMaxDigits,
             "AdditionTask: expected digits in [1, {}], got {}", kMaxDigits, digits);
    HG_CHECK(held_out >= 1, "AdditionTask: expected a held-out set of at least 1, got {}",
             held_out);
    base_ = 1;
    for (int64_t i = 0; i < digits; ++i) base_ *= 10;
    const int64_t problems = base_ * base_;
    const int64_t count = std::min(held_out, problems / 5);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> pick(0, problems - 1);
    while (int64_t(held_out_set_.size()) < count) {
      const int64_t problem = pick(rng);
      if (held_out_set_.insert(problem).second) {
        held_out_.emplace_back(problem / base_, problem % base_);
      }
    }
  }

  std::string describe() const override {
    return fmt::format("addition of {}-digit numbers, answers reversed (\"{}\")", digits_,
                       decode(encode(base_ / 3, base_ - 1)));
  }
  int64_t vocab_size() const override { return kVocabSize; }
  int64_t block_size() const override { return line_length() - 1; }
  std::string accuracy_name() const override {
    return fmt::format("exact match of greedy answers on {} held-out problems", held_out_.size());
  }

  int64_t digits() const { return digits_; }
  // "a+b=" is the prompt; the answer is D + 1 digits and '.'.
  int64_t prompt_length() const { return 2 * digits_ + 2; }
  int64_t answer_length() const { return digits_ + 2; }
  int64_t line_length() const { return prompt_length() + answer_length(); }
  const std::vector<std::pair<int64_t, int64_t>>& held_out() const { return held_out_; }
  bool is_held_out(int64_t a, int64_t b) const { return held_out_set_.contains(a * base_ + b); }

  // The tokens of the line "a+b=c." (line_length() of them).
  std::vector<int64_t> encode(int64_t a, int64_t b) const {
    HG_CHECK(a >= 0 && a < base_ && b >= 0 && b < base_,
             "AdditionTask: expected operands in [0, {}), got {} and {}", base_, a, b);
    std::vector<int64_t> line;
    line.reserve(size_t(line_length()));
    append_digits(line, a, digits_, /*reversed=*/false);
    line.push_back(kPlus);
    append_digits(line, b, digits_, /*reversed=*/false);
    line.push_back(kEquals);
    append_digits(line, a + b, digits_ + 1, /*reversed=*/true);
    line.push_back(kEnd);
    return line;
  }

  // Tokens back to characters ('?' for a token outside the vocabulary).
  static std::string decode(const std::vector<int64_t>& tokens) {
    std::string text;
    for (int64_t token : tokens) {
      if (token >= 0 && token <= 9) {
        text.push_back(char('0' + token));
      } else {
        text.push_back(token == kPlus ? '+' : token == kEquals ? '=' : token == kEnd ? '.' : '?');
      }
    }
    return text;
  }

  Batch sample_batch(int64_t batch, std::mt19937_64& rng) const override {
    HG_CHECK(batch >= 1, "AdditionTask: expected a batch of at least 1, got {}", batch);
    const int64_t T = block_size();
    std::vector<int64_t> x, y;
    x.reserve(size_t(batch * T));
    y.reserve(size_t(batch * T));
    std::uniform_int_distribution<int64_t> pick(0, base_ * base_ - 1);
    for (int64_t row = 0; row < batch; ++row) {
      int64_t problem = pick(rng);
      while (held_out_set_.contains(problem)) problem = pick(rng);
      const std::vector<int64_t> line = encode(problem / base_, problem % base_);
      for (int64_t t = 0; t < T; ++t) {
        x.push_back(line[size_t(t)]);
        // Target t is line[t + 1]; it is an answer character from t + 1 = prompt_length() on.
        y.push_back(t + 1 >= prompt_length() ? line[size_t(t + 1)] : kIgnoreIndex);
      }
    }
    return {tensor(x, {batch, T}), tensor(y, {batch, T})};
  }

  double accuracy(nn::GPT& model) const override {
    const int64_t n = int64_t(held_out_.size()), P = prompt_length(), A = answer_length();
    std::vector<int64_t> prompts, answers;
    for (const auto& [a, b] : held_out_) {
      const std::vector<int64_t> line = encode(a, b);
      prompts.insert(prompts.end(), line.begin(), line.begin() + P);
      answers.insert(answers.end(), line.begin() + P, line.end());
    }
    Tensor idx = tensor(prompts, {n, P});  // [n, P], grows by one column per token
    for (int64_t i = 0; i < A; ++i) {
      const Tensor logits = model.forward(idx);                          // [n, t, V]
      const Tensor next = argmax(logits.select(1, idx.size(1) - 1), 1);  // [n]
      idx = cat({idx, next.unsqueeze(1)}, 1);
    }
    const std::vector<int64_t> written = idx.narrow(1, P, A).contiguous().to_vector<int64_t>();
    int64_t correct = 0;
    for (int64_t row = 0; row < n; ++row) {
      correct += std::equal(written.begin() + row * A, written.begin() + (row + 1) * A,
                            answers.begin() + row * A);
    }
    return double(correct) / double(n);
  }

 private:
  // Appends `width` decimal digits of value (zero-padded), most significant first unless
  // reversed.
  static void append_digits(std::vector<int64_t>& line, int64_t value, int64_t width,
                            bool reversed) {
    std::vector<int64_t> digits(static_cast<size_t>(width));
    for (int64_t i = width - 1; i >= 0; --i, value /= 10) digits[size_t(i)] = value % 10;
    if (reversed) std::reverse(digits.begin(), digits.end());
    line.insert(line.end(), digits.begin(), digits.end());
  }

  int64_t digits_;
  int64_t base_;  // 10^D
  std::vector<std::pair<int64_t, int64_t>> held_out_;
  std::unordered_set<int64_t> held_out_set_;
};

}  // namespace hg::examples
