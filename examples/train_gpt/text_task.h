// train_gpt --text FILE: a character-level language model of any text file.
//
// The vocabulary is the set of bytes the file holds (a byte is a character, as in nanoGPT's
// shakespeare_char). The last tenth of the file (at least block_size + 1 characters) is held
// out; training batches are random windows of block_size + 1 characters from the rest, every
// position scored. accuracy() is the teacher-forced next-character accuracy on the held-out
// tail: the argmax of the logits against the character that follows, over consecutive
// windows of the tail (at most kMaxEvalWindows of them).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "task.h"

namespace hg::examples {

class TextTask : public Task {
 public:
  static constexpr int64_t kMaxEvalWindows = 64;

  // Reads the file; an unreadable file, or one too short for a training window and a held-out
  // window of block_size + 1 characters each, is an hg::Error naming the file.
  TextTask(const std::string& path, int64_t block_size) : path_(path), block_size_(block_size) {
    HG_CHECK(block_size >= 1, "--text: expected a block size of at least 1, got {}", block_size);
    std::ifstream in(path, std::ios::binary);
    HG_CHECK(in.good(), "--text: cannot open '{}' (expected a readable text file)", path);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    HG_CHECK(!in.bad(), "--text: reading '{}' failed", path);
    const int64_t window = block_size + 1;
    HG_CHECK(int64_t(text.size()) >= 2 * window,
             "--text: '{}' has {} characters; expected at least {} (a training window and a "
             "held-out window of block_size + 1 = {} characters each)",
             path, text.size(), 2 * window, window);

    std::array<bool, 256> present{};
    for (char c : text) present[static_cast<unsigned char>(c)] = true;
    token_of_.fill(-1);
    for (int byte = 0; byte < 256; ++byte) {
      if (present[size_t(byte)]) {
        token_of_[size_t(byte)] = int64_t(chars_.size());
        chars_.push_back(char(byte));
      }
    }
    tokens_.reserve(text.size());
    for (char c : text) tokens_.push_back(token_of_[static_cast<unsigned char>(c)]);
    const int64_t held_out = std::max(window, int64_t(text.size()) / 10);
    train_length_ = int64_t(text.size()) - held_out;
  }

  std::string describe() const override {
    return fmt::format("characters of '{}' ({} characters, {} distinct, last {} held out)", path_,
                       tokens_.size(), chars_.size(), int64_t(tokens_.size()) - train_length_);
  }
  int64_t vocab_size() const override { return int64_t(chars_.size()); }
  int64_t block_size() const override { return block_size_; }
  std::string accuracy_name() const override {
    return "next-character accuracy on the held-out tail";
  }
  // The characters of the vocabulary, in token order.
  const std::string& chars() const { return chars_; }
  int64_t train_length() const { return train_length_; }

  Batch sample_batch(int64_t batch, std::mt19937_64& rng) const override {
    HG_CHECK(batch >= 1, "TextTask: expected a batch of at least 1, got {}", batch);
    std::uniform_int_distribution<int64_t> pick(0, train_length_ - block_size_ - 1);
    std::vector<int64_t> starts(static_cast<size_t>(batch));
    for (int64_t& start : starts) start = pick(rng);
    return windows(starts);
  }

  double accuracy(nn::GPT& model) const override {
    std::vector<int64_t> starts;
    const int64_t end = int64_t(tokens_.size());
    for (int64_t start = train_length_;
         start + block_size_ + 1 <= end && int64_t(starts.size()) < kMaxEvalWindows;
         start += block_size_) {
      starts.push_back(start);
    }
    const Batch batch = windows(starts);
    const Tensor predicted = argmax(model.forward(batch.x), 2);  // [B, T]
    return mean(eq(predicted, batch.y).to(kFloat32)).item<double>();
  }

 private:
  // The windows tokens_[start, start + T] as inputs [B, T] and next characters [B, T].
  Batch windows(const std::vector<int64_t>& starts) const {
    const int64_t B = int64_t(starts.size()), T = block_size_;
    std::vector<int64_t> x, y;
    x.reserve(size_t(B * T));
    y.reserve(size_t(B * T));
    for (int64_t start : starts) {
      x.insert(x.end(), tokens_.begin() + start, tokens_.begin() + start + T);
      y.insert(y.end(), tokens_.begin() + start + 1, tokens_.begin() + start + T + 1);
    }
    return {tensor(x, {B, T}), tensor(y, {B, T})};
  }

  std::string path_;
  int64_t block_size_;
  std::string chars_;
  std::array<int64_t, 256> token_of_;
  std::vector<int64_t> tokens_;
  int64_t train_length_ = 0;
};

}  // namespace hg::examples
