// lenet: a LeNet-style convolutional classifier of 16x16 grayscale shapes, trained with mixed
// precision on the CPU, written as a PyTorch user writes the same script.
//
// The data (lenet.h's ShapesDataset) are squares, circles, triangles, pluses, crosses and
// rings of random position, size and stroke on a noisy background; a train and a test split
// come from one seed. A shuffling DataLoader feeds the model (conv, batch norm, ReLU, max pool
// twice, then Linear, ReLU, Dropout, Linear), trained with cross entropy and SGD with momentum
// and weight decay under a cosine schedule:
//
//   --dtype fp32   no autocast, no scaling: the reference;
//   --dtype bf16   forward under amp::Autocast(kCPU, kBFloat16), no scaling;
//   --dtype fp16   forward under amp::Autocast(kCPU, kFloat16), loss scaled by a GradScaler.
//
// Each epoch prints its mean loss and the test accuracy; the run ends with the test accuracy and
// exits with 1 when it is below --min-accuracy. --export DIR writes the run's initial weights
// and first batches instead of training (NOTE [LeNet twin file]), from which twin.py trains the
// PyTorch twin; it exits with 2 when it cannot (too few training images for the batches).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "halfgrad/halfgrad.h"
#include "lenet.h"

using namespace hg;
using namespace hg::examples::lenet;

namespace {

// The batches the twin trains on, and so the steps its golden losses cover.
constexpr int64_t kTwinSteps = 20;

// Writes DIR/init.safetensors: the model's first weights and the loader's first kTwinSteps
// batches, with the settings twin.py needs to rebuild the optimizer and the schedule.
void export_twin_start(const std::string& dir, LeNet& model, data::DataLoader& loader,
                       int64_t batch_size, const TrainOptions& options, uint64_t seed) {
  HG_CHECK(loader.dataset().size() >= kTwinSteps * batch_size,
           "lenet --export: expected at least {} training images ({} full batches of {}), got {}",
           kTwinSteps * batch_size, kTwinSteps, batch_size, loader.dataset().size());
  std::vector<Tensor> pixels, labels;
  for (const data::Batch& batch : loader) {
    if (int64_t(pixels.size()) == kTwinSteps) break;
    // Back to the 8-bit pixels: an image holds p / 255 in float32, which rounds back to p.
    pixels.push_back(round(mul(batch[0], 255.0)).to(kUInt8));
    labels.push_back(batch[1]);
  }
  TwinStart start{
      .state = model.state_dict(),
      .pixels = stack(pixels, 0),
      .labels = stack(labels, 0),
      .metadata = {{"seed", std::to_string(seed)},
                   {"lr", fmt::format("{:.17g}", options.lr)},
                   {"momentum", fmt::format("{:.17g}", options.momentum)},
                   {"weight_decay", fmt::format("{:.17g}", options.weight_decay)},
                   {"total_steps", std::to_string(options.total_steps)},
                   {"train_size", std::to_string(loader.dataset().size())},
                   {"batch_size", std::to_string(batch_size)}},
  };
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/init.safetensors";
  save_twin_start(path, start);
  fmt::print("lenet: wrote {} ({} batches of {})\n", path, kTwinSteps, start.pixels.size(1));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lenet: a LeNet classifier of 16x16 shapes, in fp32, bf16 or fp16"};
  std::string dtype_flag = "fp32";
  TrainOptions options;
  uint64_t seed = 0;
  int64_t batch_size = 32;
  int64_t train_size = 960;
  int64_t test_size = 480;
  double dropout = 0.3;
  double min_accuracy = 0.95;
  std::string export_dir;
  app.add_option("--dtype", dtype_flag, "precision of the forward pass")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--steps", options.total_steps, "optimizer steps (the cosine schedule's length)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the data, the weights, the shuffling and the dropout");
  app.add_option("--batch-size", batch_size, "images per batch")->check(CLI::PositiveNumber);
  app.add_option("--train-size", train_size, "training images")->check(CLI::PositiveNumber);
  app.add_option("--test-size", test_size, "test images")->check(CLI::PositiveNumber);
  app.add_option("--lr", options.lr, "the schedule's first learning rate")
      ->check(CLI::PositiveNumber);
  app.add_option("--dropout", dropout, "the classifier's dropout probability")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-accuracy", min_accuracy, "exit with 1 when the test accuracy is below");
  app.add_option("--export", export_dir,
                 "write DIR/init.safetensors (weights and first batches) for twin.py, and stop");
  CLI11_PARSE(app, argc, argv);
  options.precision = parse_precision(dtype_flag);

  manual_seed(seed);  // the weights and the dropout masks
  auto train_set = std::make_shared<ShapesDataset>(train_size, seed, /*split=*/0);
  auto test_set = std::make_shared<ShapesDataset>(test_size, seed, /*split=*/1);
  Generator shuffle_generator(seed);
  data::DataLoader train_loader(
      train_set, {.batch_size = batch_size, .shuffle = true, .generator = &shuffle_generator});
  data::DataLoader test_loader(test_set, {.batch_size = 256});
  auto model = std::make_shared<LeNet>(kClasses, dropout);

  if (!export_dir.empty()) {
    try {
      export_twin_start(export_dir, *model, train_loader, batch_size, options, seed);
    } catch (const Error& error) {
      std::fprintf(stderr, "%s\n", error.what());
      return 2;
    }
    return 0;
  }

  Trainer trainer(model, options);
  std::vector<std::string> class_names;
  for (int64_t label = 0; label < kClasses; ++label) {
    class_names.push_back(shape_name(ShapeClass(label)));
  }
  fmt::print("lenet: {} on the CPU, {} steps of {} images ({} train, {} test; classes {})\n",
             dtype_flag, options.total_steps, batch_size, train_size, test_size,
             fmt::join(class_names, ", "));
  int64_t step = 0, skipped = 0;
  for (int64_t epoch = 1; step < options.total_steps; ++epoch) {
    double loss_sum = 0;
    int64_t batches = 0;
    for (const data::Batch& batch : train_loader) {
      if (step == options.total_steps) break;
      const StepResult result = trainer.step(batch[0], batch[1]);
      ++step;
      loss_sum += result.loss;
      ++batches;
      if (!result.stepped) {
        ++skipped;
        fmt::print("step {:>4}  inf/NaN gradient at scale {}: step skipped\n", step, result.scale);
      }
    }
    std::string line =
        fmt::format("epoch {:>3}  step {:>5}  loss {:.4f}  test accuracy {:.4f}", epoch, step,
                    loss_sum / double(batches), trainer.accuracy(test_loader));
    if (trainer.scaler.is_enabled()) line += fmt::format("  scale {}", trainer.scaler.get_scale());
    fmt::print("{}\n", line);
  }
  if (trainer.scaler.is_enabled()) {
    fmt::print("GradScaler: {} of {} steps skipped\n", skipped, step);
  }
  const double accuracy = trainer.accuracy(test_loader);
  fmt::print("lenet: test accuracy {:.4f} (bar {:.2f})\n", accuracy, min_accuracy);
  if (accuracy < min_accuracy) {
    fmt::print("lenet: FAILED - test accuracy below --min-accuracy {:.2f}\n", min_accuracy);
    return 1;
  }
  return 0;
}
