// The MNIST dataset of handwritten digits, as libtorch's torch::data::datasets::MNIST: the four
// IDX files of Yann LeCun's distribution in a folder, read whole into two tensors.
//
//   auto train = std::make_shared<data::datasets::MNIST>("data/mnist", data::MNIST::Mode::kTrain);
//   data::DataLoader loader(train, {.batch_size = 64, .shuffle = true});
//   for (const data::Batch& batch : loader) { /* batch[0] [64, 1, 28, 28], batch[1] [64] */ }
//
// The files are root/train-images-idx3-ubyte and root/train-labels-idx1-ubyte (kTrain), or
// root/t10k-images-idx3-ubyte and root/t10k-labels-idx1-ubyte (kTest), each plain or gzipped
// (the same name with ".gz"; the plain one is used when both are there). The images become
// float32 [N, 1, 28, 28] with values in [0, 1] (each byte divided by 255 in float32, as
// libtorch), the labels int64 [N]. Unlike libtorch, any N is accepted (not only 60000 and
// 10000), so a subset of the files loads as well; the images must be 28 x 28 unsigned bytes
// (IDX magic 0x00000803), the labels unsigned bytes (0x00000801), as many as the images.
#pragma once

#include <string>

#include "halfgrad/data/dataset.h"

namespace hg::data {

class MNIST : public Dataset {
 public:
  enum class Mode { kTrain, kTest };

  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);

  int64_t size() const override;
  // {image float32 [1, 28, 28], target int64 0-d}: views of images() and targets().
  Example get(int64_t index) const override;

  bool is_train() const noexcept { return is_train_; }
  const Tensor& images() const { return images_; }    // float32 [N, 1, 28, 28] in [0, 1]
  const Tensor& targets() const { return targets_; }  // int64 [N]

 private:
  Tensor images_;
  Tensor targets_;
  bool is_train_;
};

// libtorch's spelling: torch::data::datasets::MNIST.
namespace datasets {
using MNIST = data::MNIST;
}  // namespace datasets

}  // namespace hg::data
