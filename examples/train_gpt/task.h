// What train_gpt's trainer asks of a task: batches of token windows and a held-out accuracy.
// Two tasks implement it: AdditionTask (addition_task.h, made in-process) and TextTask
// (text_task.h, any text file).
//
//   B batch, T = block_size() tokens per row, V = vocab_size().
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "halfgrad/halfgrad.h"

namespace hg::examples {

// Targets that the loss skips (cross_entropy's default ignore_index).
inline constexpr int64_t kIgnoreIndex = -100;

struct Batch {
  Tensor x;  // [B, T] int64 input tokens
  Tensor y;  // [B, T] int64 next tokens, kIgnoreIndex where a position is not scored
};

class Task {
 public:
  virtual ~Task() = default;
  // One line for the log, e.g. "addition of 2-digit numbers, answers reversed".
  virtual std::string describe() const = 0;
  virtual int64_t vocab_size() const = 0;
  // T of every batch (the GPT's block_size).
  virtual int64_t block_size() const = 0;
  // A training batch drawn with `rng`, never from the held-out set.
  virtual Batch sample_batch(int64_t batch, std::mt19937_64& rng) const = 0;
  // What accuracy() measures, for the log.
  virtual std::string accuracy_name() const = 0;
  // Accuracy in [0, 1] on the held-out set. The caller holds a NoGradGuard and the autocast
  // region the model trained under.
  virtual double accuracy(nn::GPT& model) const = 0;
};

}  // namespace hg::examples
