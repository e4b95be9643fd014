// The MNIST dataset (mnist.h): its four IDX files through io::read_idx, checked and scaled.
#include "halfgrad/data/mnist.h"

#include <filesystem>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/io/idx.h"

namespace hg::data {

namespace {

constexpr int64_t kImageRows = 28;
constexpr int64_t kImageColumns = 28;

// root/name, or root/name.gz when only that one is there.
std::string find_file(const std::string& root, const std::string& name) {
  const std::filesystem::path plain = std::filesystem::path(root) / name;
  std::filesystem::path gzipped = plain;
  gzipped += ".gz";
  std::error_code error;
  if (std::filesystem::exists(plain, error)) return plain.string();
  if (std::filesystem::exists(gzipped, error)) return gzipped.string();
  HG_ERROR("MNIST: expected the file \"{}\" or \"{}\", found neither", plain.string(),
           gzipped.string());
}

}  // namespace

MNIST::MNIST(const std::string& root, Mode mode) : is_train_(mode == Mode::kTrain) {
  const std::string prefix = is_train_ ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte");
  const Tensor images = io::read_idx(images_path);
  const Tensor labels = io::read_idx(labels_path);
  HG_CHECK(images.dtype() == kUInt8 && images.dim() == 3 && images.size(1) == kImageRows &&
               images.size(2) == kImageColumns,
           "MNIST: \"{}\": expected uint8 images of shape [N, {}, {}] (IDX magic 0x00000803), "
           "got {} of shape {}",
           images_path, kImageRows, kImageColumns, dtype_name(images.dtype()), images.sizes());
  HG_CHECK(labels.dtype() == kUInt8 && labels.dim() == 1,
           "MNIST: \"{}\": expected uint8 labels of shape [N] (IDX magic 0x00000801), got {} of "
           "shape {}",
           labels_path, dtype_name(labels.dtype()), labels.sizes());
  HG_CHECK(labels.size(0) == images.size(0),
           "MNIST: expected as many labels as images, got {} images in \"{}\" and {} labels in "
           "\"{}\"",
           images.size(0), images_path, labels.size(0), labels_path);

  const int64_t n = images.size(0);
  images_ = empty({n, 1, kImageRows, kImageColumns}, kFloat32);
  const auto* pixels = images.data_ptr<uint8_t>();
  float* scaled = images_.data_ptr<float>();
  for (int64_t i = 0; i < images.numel(); ++i) scaled[i] = float(pixels[i]) / 255.0f;
  targets_ = empty({n}, kInt64);
  const auto* label_bytes = labels.data_ptr<uint8_t>();
  int64_t* targets = targets_.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) targets[i] = label_bytes[i];
}

int64_t MNIST::size() const { return images_.size(0); }

Example MNIST::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "MNIST: index {} is out of range [0, {})", index, size());
  return {images_.select(0, index), targets_.select(0, index)};
}

}  // namespace hg::data
