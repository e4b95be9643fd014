// The lenet example's parts, shared by its program and its test: the shapes data set, the LeNet
// model, one mixed-precision training step, and the file that hands initial weights and batches
// to the PyTorch twin (twin.py).
//
//   B batch, H = W = kImageSize pixels, K = kClasses.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"

namespace hg::examples::lenet {

inline constexpr int64_t kImageSize = 16;

// The shapes, in label order.
enum class ShapeClass : int64_t { square, circle, triangle, plus, cross, ring };
inline constexpr int64_t kClasses = 6;
inline const char* shape_name(ShapeClass shape) {
  static constexpr const char* kNames[kClasses] = {"square", "circle", "triangle",
                                                   "plus",   "cross",  "ring"};
  return kNames[int64_t(shape)];
}

// ---- data -------------------------------------------------------------------------------------

// Grayscale images of one shape each, as a vision data set ships them: 8-bit pixels, turned into
// float32 in [0, 1] (x / 255, torchvision's ToTensor) when an example is read. Each image draws
// its shape's centre, size and stroke, the foreground and background levels and Gaussian pixel
// noise from a generator seeded with (seed, split), so a split is the same on every run; the
// labels cycle through the classes, so every class has the same share. Edges are antialiased
// (each pixel is the covered fraction of a 4x4 grid of samples), so a shape moved by half a
// pixel gives a different image.
class ShapesDataset : public data::Dataset {
 public:
  ShapesDataset(int64_t size, uint64_t seed, uint64_t split) : size_(size) {
    HG_CHECK(size > 0, "ShapesDataset: expected a positive size, got {}", size);
    std::seed_seq seeds{uint32_t(seed), uint32_t(seed >> 32), uint32_t(split)};
    std::mt19937_64 rng(seeds);
    pixels_.resize(size_t(size * kImageSize * kImageSize));
    labels_.resize(size_t(size));
    for (int64_t i = 0; i < size; ++i) {
      labels_[size_t(i)] = i % kClasses;
      draw(ShapeClass(i % kClasses), rng, &pixels_[size_t(i * kImageSize * kImageSize)]);
    }
  }

  int64_t size() const override { return size_; }

  // {image [1, H, W] float32 in [0, 1], label int64 scalar}.
  data::Example get(int64_t index) const override {
    HG_CHECK(index >= 0 && index < size_, "ShapesDataset: index {} is out of range [0, {})", index,
             size_);
    const uint8_t* image = &pixels_[size_t(index * kImageSize * kImageSize)];
    std::vector<float> values(size_t(kImageSize * kImageSize));
    for (size_t p = 0; p < values.size(); ++p) values[p] = float(image[p]) / 255.0f;
    return {tensor(values, {1, kImageSize, kImageSize}),
            scalar_tensor(labels_[size_t(index)], kInt64)};
  }

 private:
  // Renders one shape into H * W pixels.
  static void draw(ShapeClass shape, std::mt19937_64& rng, uint8_t* pixels) {
    std::uniform_real_distribution<double> radius_dist(3.5, 6.5);
    const double radius = radius_dist(rng);
    // The centre keeps the shape inside the image (pixel centres are at i + 0.5).
    std::uniform_real_distribution<double> centre_dist(radius + 0.5,
                                                       double(kImageSize) - radius - 0.5);
    const double cx = centre_dist(rng), cy = centre_dist(rng);
    const double stroke = std::uniform_real_distribution<double>(0.2, 0.35)(rng) * radius;
    const double foreground = std::uniform_real_distribution<double>(0.55, 1.0)(rng);
    const double background = std::uniform_real_distribution<double>(0.0, 0.25)(rng);
    std::normal_distribution<double> noise(0.0, 0.08);

    // Whether the point (dx, dy) from the centre (y pointing down) is inside the shape.
    auto inside = [&](double dx, double dy) {
      const double r = radius;
      switch (shape) {
        case ShapeClass::square:
          return std::abs(dx) <= 0.8 * r && std::abs(dy) <= 0.8 * r;
        case ShapeClass::circle:
          return dx * dx + dy * dy <= r * r;
        case ShapeClass::triangle: {                // apex up, base down, as wide as it is tall
          const double depth = (dy + r) / (2 * r);  // 0 at the apex, 1 at the base
          return depth >= 0 && depth <= 1 && std::abs(dx) <= depth * r;
        }
        case ShapeClass::plus:
          return (std::abs(dx) <= stroke / 2 && std::abs(dy) <= r) ||
                 (std::abs(dy) <= stroke / 2 && std::abs(dx) <= r);
        case ShapeClass::cross: {  // the plus turned by 45 degrees
          const double u = (dx + dy) / std::numbers::sqrt2, v = (dx - dy) / std::numbers::sqrt2;
          return (std::abs(u) <= stroke / 2 && std::abs(v) <= r) ||
                 (std::abs(v) <= stroke / 2 && std::abs(u) <= r);
        }
        case ShapeClass::ring: {
          const double distance = std::sqrt(dx * dx + dy * dy);
          return distance <= r && distance >= r - stroke;
        }
      }
      return false;
    };

    constexpr int kSamples = 4;  // per pixel and axis
    for (int64_t y = 0; y < kImageSize; ++y) {
      for (int64_t x = 0; x < kImageSize; ++x) {
        int covered = 0;
        for (int sy = 0; sy < kSamples; ++sy) {
          for (int sx = 0; sx < kSamples; ++sx) {
            const double px = double(x) + (sx + 0.5) / kSamples;
            const double py = double(y) + (sy + 0.5) / kSamples;
            covered += inside(px - cx, py - cy) ? 1 : 0;
          }
        }
        const double coverage = double(covered) / (kSamples * kSamples);
        const double level = background + (foreground - background) * coverage + noise(rng);
        pixels[y * kImageSize + x] = uint8_t(std::lround(std::clamp(level, 0.0, 1.0) * 255.0));
      }
    }
  }

  int64_t size_;
  std::vector<uint8_t> pixels_;  // [size, H, W]
  std::vector<int64_t> labels_;  // [size]
};

// ---- model ------------------------------------------------------------------------------------

// LeNet-5 with batch norm, for 16x16 images:
//   [B, 1, 16, 16] -conv 5x5 pad 2-> [B, 6, 16, 16] -pool-> [B, 6, 8, 8]
//                  -conv 5x5------> [B, 16, 4, 4]  -pool-> [B, 16, 2, 2] -> [B, 64] -> [B, 84]
//                  -> [B, K] logits.
// The convolutions have no bias, as is usual before a batch norm: the norm subtracts each
// channel's mean, so a bias would change nothing and its gradient would be rounding noise.
// Keys follow the PyTorch twin's module ("features.0.weight", "features.1.running_mean", ...).
class LeNet : public nn::Module {
 public:
  explicit LeNet(int64_t classes = kClasses, double dropout = 0.5) {
    // One append per statement: each module draws its initial weights in this order with every
    // compiler. Passed as the arguments of one call (make_shared<Sequential>(a, b, ...)), they
    // would be made in the order the compiler picks (GCC: last first), and so would the draws.
    features = register_module("features", std::make_shared<nn::Sequential>());
    features->append(nn::Conv2d(1, 6, 5, {.padding = {2, 2}, .bias = false}));  // [B, 6, 16, 16]
    features->append(nn::BatchNorm2d(6));
    features->append(nn::ReLU());
    features->append(nn::MaxPool2d(2));                     // [B, 6, 8, 8]
    features->append(nn::Conv2d(6, 16, 5, {.bias = false}));  // [B, 16, 4, 4]
    features->append(nn::BatchNorm2d(16));
    features->append(nn::ReLU());
    features->append(nn::MaxPool2d(2));  // [B, 16, 2, 2]
    classifier = register_module("classifier", std::make_shared<nn::Sequential>());
    classifier->append(nn::Flatten());               // [B, 64]
    classifier->append(nn::Linear(16 * 2 * 2, 84));  // [B, 84]
    classifier->append(nn::ReLU());
    classifier->append(nn::Dropout(dropout));
    classifier->append(nn::Linear(84, classes));  // [B, K]
  }
  std::string name() const override { return "LeNet"; }
  Tensor forward(const Tensor& images) override { return (*classifier)((*features)(images)); }

  std::shared_ptr<nn::Sequential> features, classifier;
};

// The names of the batch norms' running statistics, in the state dict's spelling.
inline const std::vector<std::string>& running_stat_names() {
  static const std::vector<std::string> names = {
      "features.1.running_mean", "features.1.running_var", "features.5.running_mean",
      "features.5.running_var"};
  return names;
}

// ---- training ---------------------------------------------------------------------------------

// --dtype: fp32 (no autocast), bf16 (autocast to bfloat16) or fp16 (autocast to float16 and a
// GradScaler). Parameters, optimizer state and the loss stay float32 in every mode.
enum class Precision { fp32, bf16, fp16 };

inline Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  HG_ERROR("lenet: expected a precision fp32, bf16 or fp16, got '{}'", name);
}

inline const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
  }
  return "?";
}

struct TrainOptions {
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  int64_t total_steps = 300;  // the cosine schedule's length (T_max), stepped once per batch
  Precision precision = Precision::fp32;
};

// What one training step reports.
struct StepResult {
  double loss = 0;      // the unscaled float32 loss of the batch
  bool stepped = true;  // false when the GradScaler skipped an overflowing step
  double scale = 1;     // the scale this step's backward ran with (1 without a scaler)
};

// The loop's state: loss, SGD with momentum and weight decay, a cosine learning-rate schedule
// over the run, and a GradScaler that is enabled for fp16 only (disabled, each of its calls
// passes through, as torch.cuda.amp.GradScaler(enabled=...) does).
class Trainer {
 public:
  Trainer(std::shared_ptr<LeNet> model, TrainOptions options)
      : model(std::move(model)),
        options(options),
        optimizer(
            this->model->parameters(),
            {.lr = options.lr, .momentum = options.momentum, .weight_decay = options.weight_decay}),
        scheduler(optimizer, options.total_steps),
        scaler({.enabled = options.precision == Precision::fp16}) {}

  // One step on a batch: images [B, 1, H, W] float32, labels [B] int64.
  StepResult step(const Tensor& images, const Tensor& labels) {
    model->train();
    optimizer.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(kCPU, autocast_dtype(), options.precision != Precision::fp32);
      loss = criterion(model->forward(images), labels);  // cross_entropy autocasts to float32
    }
    scaler.scale(loss).backward();
    const double scale = scaler.get_scale();
    const bool stepped = scaler.step(optimizer);
    scaler.update();
    scheduler.step();
    return {.loss = loss.item<double>(), .stepped = stepped, .scale = scale};
  }

  // The fraction of the loader's examples whose largest logit is their label, in eval mode
  // (dropout off, the batch norms' running statistics) under the training precision.
  double accuracy(data::DataLoader& loader) {
    NoGradGuard no_grad;
    model->eval();
    int64_t correct = 0, total = 0;
    for (const data::Batch& batch : loader) {
      amp::Autocast autocast(kCPU, autocast_dtype(), options.precision != Precision::fp32);
      const Tensor predicted = argmax(model->forward(batch[0]), 1);
      correct += sum(eq(predicted, batch[1]).to(kInt64)).item<int64_t>();
      total += batch[1].size(0);
    }
    model->train();
    return double(correct) / double(total);
  }

  DType autocast_dtype() const {
    return options.precision == Precision::fp16 ? kFloat16 : kBFloat16;
  }

  std::shared_ptr<LeNet> model;
  TrainOptions options;
  nn::CrossEntropyLoss criterion;
  optim::SGD optimizer;
  optim::CosineAnnealingLR scheduler;
  amp::GradScaler scaler;
};

// ---- the twin's starting point ----------------------------------------------------------------

// NOTE [LeNet twin file] `lenet --export DIR` writes DIR/init.safetensors, the start that
// twin.py and tests/examples/lenet_twin_test.cpp share: the model's state dict under "model.",
// the first batches the shuffling DataLoader gave, images as their 8-bit pixels under
// "batches.pixels" [S, B, 1, H, W] uint8 (a quarter of float32's bytes, and exact: both sides
// divide by 255 in float32) and labels under "batches.labels" [S, B] int64, and the run's
// settings as metadata strings. Neither side needs the other's random generator.
struct TwinStart {
  nn::StateDict state;
  Tensor pixels;  // [S, B, 1, H, W] uint8
  Tensor labels;  // [S, B] int64
  std::map<std::string, std::string> metadata;

  int64_t steps() const { return pixels.size(0); }
  // Step s's images, [B, 1, H, W] float32: the pixels / 255, as ShapesDataset::get makes them.
  Tensor images(int64_t step) const { return div(pixels.select(0, step).to(kFloat32), 255.0); }
  Tensor batch_labels(int64_t step) const { return labels.select(0, step).contiguous(); }
};

inline void save_twin_start(const std::string& path, const TwinStart& start) {
  TensorMap tensors;
  for (const auto& [key, value] : start.state) tensors["model." + key] = value;
  tensors["batches.pixels"] = start.pixels;
  tensors["batches.labels"] = start.labels;
  save(path, tensors, start.metadata);
}

inline TwinStart load_twin_start(const std::string& path) {
  io::SafetensorsContents contents = io::load_safetensors(path, {.require_checksum = true});
  TwinStart start;
  for (auto& [key, value] : contents.tensors) {
    if (key.starts_with("model.")) start.state[key.substr(6)] = value;
  }
  HG_CHECK(
      contents.tensors.contains("batches.pixels") && contents.tensors.contains("batches.labels"),
      "lenet: expected batches.pixels and batches.labels in '{}'", path);
  start.pixels = contents.tensors.at("batches.pixels");
  start.labels = contents.tensors.at("batches.labels");
  start.metadata = std::move(contents.metadata);
  return start;
}

}  // namespace hg::examples::lenet
