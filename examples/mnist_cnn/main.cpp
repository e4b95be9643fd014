// mnist_cnn: the README's CNN, written as a PyTorch user writes it: MNIST's IDX files through
// data::datasets::MNIST and a shuffling DataLoader, two conv -> batch norm -> ReLU -> max-pool
// blocks, AdamW with OneCycleLR, autocast in bfloat16 or float16 (with a GradScaler), accuracy
// with tensor methods, and a checkpoint every epoch from which --resume continues exactly.
//
//   mnist_cnn --root data/mnist --epochs 2 --dtype bf16
//   mnist_cnn --make-synthetic 3000 --root /tmp/digits --epochs 2   # no download needed
//
// --make-synthetic N writes N training and N / 5 test images of the digits 0-9 drawn as
// seven-segment strokes (jittered, with noise) in MNIST's file format first, so the program runs
// where MNIST is not at hand.
//
//   B batch, 28x28 images, 10 classes.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

// ---- the model ---------------------------------------------------------------------------------

// [B, 1, 28, 28] -conv 3x3 pad 1-> [B, 32, 28, 28] -pool-> [B, 32, 14, 14]
//                -conv 3x3 pad 1-> [B, 64, 14, 14] -pool-> [B, 64, 7, 7] -> [B, 10]
std::shared_ptr<nn::Sequential> make_model() {
  auto model = std::make_shared<nn::Sequential>();
  model->append(nn::Conv2d(1, 32, 3, {.padding = 1}));
  model->append(nn::BatchNorm2d(32));
  model->append(nn::ReLU());
  model->append(nn::MaxPool2d(2));
  model->append(nn::Conv2d(32, 64, 3, {.padding = 1}));
  model->append(nn::BatchNorm2d(64));
  model->append(nn::ReLU());
  model->append(nn::MaxPool2d(2));
  model->append(nn::Flatten());
  model->append(nn::Linear(64 * 7 * 7, 10));
  return model;
}

// ---- synthetic digits in MNIST's format ----------------------------------------------------------

void put_be32(std::ofstream& out, uint32_t value) {
  const char bytes[4] = {char(value >> 24), char(value >> 16), char(value >> 8), char(value)};
  out.write(bytes, 4);
}

// Seven segments per digit: a, b, c, d, e, f, g (top, upper right, lower right, bottom, lower
// left, upper left, middle).
constexpr uint8_t kSegments[10] = {0x3F, 0x06, 0x5B, 0x4F, 0x66, 0x6D, 0x7D, 0x07, 0x7F, 0x6F};

void draw_digit(int digit, std::mt19937_64& rng, uint8_t* pixels) {
  std::uniform_real_distribution<double> jitter(-2.5, 2.5);
  std::uniform_real_distribution<double> size(0.8, 1.1);
  std::uniform_real_distribution<double> thickness(1.2, 2.2);
  std::normal_distribution<double> noise(0.0, 20.0);
  const double cx = 14 + jitter(rng), cy = 14 + jitter(rng), s = size(rng), t = thickness(rng);
  const double w = 5 * s, h = 8 * s;  // half width, half height
  // Each segment a line from (x0, y0) to (x1, y1).
  const double lines[7][4] = {{-w, -h, w, -h}, {w, -h, w, 0},  {w, 0, w, h},   {-w, h, w, h},
                              {-w, 0, -w, h},  {-w, -h, -w, 0}, {-w, 0, w, 0}};
  for (int y = 0; y < 28; ++y) {
    for (int x = 0; x < 28; ++x) {
      double ink = 0;
      for (int seg = 0; seg < 7; ++seg) {
        if (!(kSegments[digit] >> seg & 1)) continue;
        const double x0 = cx + lines[seg][0], y0 = cy + lines[seg][1];
        const double x1 = cx + lines[seg][2], y1 = cy + lines[seg][3];
        const double dx = x1 - x0, dy = y1 - y0;
        const double u = std::clamp(((x - x0) * dx + (y - y0) * dy) / (dx * dx + dy * dy), 0.0, 1.0);
        const double distance = std::hypot(x - (x0 + u * dx), y - (y0 + u * dy));
        ink = std::max(ink, std::clamp(t + 0.5 - distance, 0.0, 1.0));
      }
      pixels[y * 28 + x] = uint8_t(std::clamp(ink * 255.0 + noise(rng), 0.0, 255.0));
    }
  }
}

// Writes <prefix>-images-idx3-ubyte and <prefix>-labels-idx1-ubyte under root.
void write_split(const std::filesystem::path& root, const std::string& prefix, int64_t count,
                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> pixels(size_t(count) * 28 * 28);
  std::vector<uint8_t> labels(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    labels[size_t(i)] = uint8_t(i % 10);
    draw_digit(int(i % 10), rng, &pixels[size_t(i) * 28 * 28]);
  }
  std::ofstream images(root / (prefix + "-images-idx3-ubyte"), std::ios::binary);
  put_be32(images, 0x00000803);  // unsigned bytes, 3 dimensions
  put_be32(images, uint32_t(count));
  put_be32(images, 28);
  put_be32(images, 28);
  images.write(reinterpret_cast<const char*>(pixels.data()), std::streamsize(pixels.size()));
  std::ofstream label_file(root / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
  put_be32(label_file, 0x00000801);
  put_be32(label_file, uint32_t(count));
  label_file.write(reinterpret_cast<const char*>(labels.data()), std::streamsize(labels.size()));
  HG_CHECK(images.good() && label_file.good(), "mnist_cnn: could not write the digits under {}",
           root.string());
}

// ---- evaluation --------------------------------------------------------------------------------

double accuracy(nn::Module& model, data::DataLoader& loader, std::optional<DType> dtype) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, seen = 0;
  for (const data::Batch& batch : loader) {
    const Tensor& x = batch[0];
    const Tensor& y = batch[1];
    Tensor logits;
    {
      amp::Autocast autocast(kCPU, dtype, /*enabled=*/dtype.has_value());
      logits = model(x);
    }
    correct += (logits.argmax(1) == y).sum().item<int64_t>();
    seen += y.numel();
  }
  model.train();
  return double(correct) / double(seen);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mnist_cnn: a CNN on MNIST's files with AdamW, OneCycleLR and autocast"};
  std::string root = "data/mnist", dtype_name = "bf16", checkpoint;
  int64_t epochs = 2, batch_size = 64, make_synthetic = 0, stop_after = 0;
  double max_lr = 3e-3, min_accuracy = 0.0;
  bool resume = false, keep_checkpoints = false;
  app.add_option("--root", root, "the folder of MNIST's IDX files (gzipped or not)");
  app.add_option("--dtype", dtype_name, "fp32, bf16 or fp16 (autocast; fp16 with a GradScaler)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--epochs", epochs, "passes over the training images")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch_size, "images per step")->check(CLI::PositiveNumber);
  app.add_option("--max-lr", max_lr, "OneCycleLR's peak learning rate");
  app.add_option("--make-synthetic", make_synthetic,
                 "write this many synthetic training digits (and a fifth as many test digits) "
                 "in MNIST's format under --root first");
  app.add_option("--checkpoint", checkpoint, "save a checkpoint here after every epoch");
  app.add_flag("--keep-checkpoints", keep_checkpoints,
               "also keep each epoch's checkpoint, as <checkpoint>.epoch<N>");
  app.add_flag("--resume", resume, "continue from --checkpoint");
  app.add_option("--stop-after", stop_after,
                 "stop after this many epochs, as an interrupted run would (0: never)");
  app.add_option("--min-accuracy", min_accuracy, "fail when the test accuracy ends below this");
  CLI11_PARSE(app, argc, argv);

  if (make_synthetic > 0) {
    std::filesystem::create_directories(root);
    write_split(root, "train", make_synthetic, 1);
    write_split(root, "t10k", std::max<int64_t>(make_synthetic / 5, 10), 2);
  }
  std::optional<DType> dtype;
  if (dtype_name == "bf16") dtype = kBFloat16;
  if (dtype_name == "fp16") dtype = kFloat16;

  manual_seed(0);
  auto train_set = std::make_shared<data::datasets::MNIST>(root, data::datasets::MNIST::Mode::kTrain);
  auto test_set = std::make_shared<data::datasets::MNIST>(root, data::datasets::MNIST::Mode::kTest);
  Generator shuffle(42);
  data::DataLoader train_loader(train_set, {.batch_size = batch_size, .shuffle = true,
                                            .generator = &shuffle});
  data::DataLoader test_loader(test_set, {.batch_size = 256});

  auto model = make_model();
  optim::AdamW optimizer(model->parameters(), {.lr = max_lr, .weight_decay = 1e-4});
  optim::OneCycleLR schedule(optimizer, {.max_lr = {max_lr},
                                         .epochs = epochs,
                                         .steps_per_epoch = train_loader.size()});
  amp::GradScaler scaler({.enabled = dtype == kFloat16});
  nn::CrossEntropyLoss criterion;

  int64_t first_epoch = 0;
  if (resume) {
    const auto extra = io::load_checkpoint(checkpoint, *model, optimizer,
                                           {{"scaler", &scaler},
                                            {"schedule", &schedule},
                                            {"loader", &train_loader}});
    first_epoch = std::stoll(extra.at("epoch"));
    fmt::print("mnist_cnn: resumed at epoch {}\n", first_epoch);
  }

  for (int64_t epoch = first_epoch; epoch < epochs; ++epoch) {
    double loss_sum = 0;
    int64_t steps = 0;
    for (const data::Batch& batch : train_loader) {
      optimizer.zero_grad();
      Tensor loss;
      {
        amp::Autocast autocast(kCPU, dtype, /*enabled=*/dtype.has_value());
        loss = criterion(model->forward(batch[0]), batch[1]);
      }
      scaler.scale(loss).backward();
      scaler.step(optimizer);
      scaler.update();
      schedule.step();
      loss_sum += loss.item<double>();
      ++steps;
    }
    const double test_accuracy = accuracy(*model, test_loader, dtype);
    fmt::print("mnist_cnn: epoch {} loss {:.4f} test accuracy {:.4f}\n", epoch + 1,
               loss_sum / double(steps), test_accuracy);
    if (!checkpoint.empty()) {
      io::save_checkpoint(checkpoint, *model, optimizer,
                          {{"scaler", &scaler}, {"schedule", &schedule}, {"loader", &train_loader}},
                          {{"epoch", std::to_string(epoch + 1)}});
      if (keep_checkpoints) {
        std::filesystem::copy_file(checkpoint, fmt::format("{}.epoch{}", checkpoint, epoch + 1),
                                   std::filesystem::copy_options::overwrite_existing);
      }
    }
    if (epoch + 1 == stop_after) {
      fmt::print("mnist_cnn: stopped after epoch {}\n", stop_after);
      return 0;
    }
    if (epoch + 1 == epochs && test_accuracy < min_accuracy) {
      fmt::print("mnist_cnn: FAILED - test accuracy {:.4f} below --min-accuracy {}\n",
                 test_accuracy, min_accuracy);
      return 1;
    }
  }
  // The sum of every parameter in float64: a resumed run prints the uninterrupted run's.
  double parameter_sum = 0;
  for (const Tensor& p : model->parameters()) parameter_sum += p.to(kFloat64).sum().item<double>();
  fmt::print("mnist_cnn: parameter sum {:.17g}\n", parameter_sum);
  return 0;
}
