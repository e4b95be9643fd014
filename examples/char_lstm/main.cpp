// char_lstm: a two-layer LSTM learns a short text one character at a time, in float32,
// bfloat16 autocast or float16 autocast with a GradScaler, then writes some text of its own.
//
//   char_lstm --dtype bf16 --steps 300
//   char_lstm --export examples/char_lstm/golden --steps 20 ...   (the twin's inputs)
//
// The loop is the one a PyTorch user writes: random windows of the text from a shuffling
// DataLoader, cross entropy over every position, Adam, clip_grad_norm_ on the unscaled
// gradients, a cosine lr schedule (char_lstm.h). After training it prints the bits per
// character on the training text and on the held-out last tenth, and samples --sample
// characters after --prompt. With --max-bpc it exits with 1 when the training text's bits per
// character stay above that bar.
//
// --export DIR writes DIR/init.safetensors: the model's initial weights under torch's names,
// the first --steps batches the DataLoader makes ("batch.inputs", "batch.targets",
// [steps, B, T] int64), and the run's settings as metadata, so that twin.py trains the same
// model on the same batches and writes golden/losses.txt.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "char_lstm.h"

using namespace hg;
using namespace char_lstm;

int main(int argc, char** argv) {
  CLI::App app{"char_lstm: a character-level LSTM language model in fp32, bf16 or fp16"};
  std::string dtype = "fp32";
  std::string text_path = "examples/char_lstm/mixed_precision.txt";  // from the repository root
  int64_t steps = 300;
  int64_t batch_size = 32;
  int64_t window = 32;
  ModelConfig config;
  TrainOptions train;
  uint64_t seed = 0;
  int64_t print_every = 50;
  std::string prompt = "The scale ";
  int64_t sample_length = 200;
  double temperature = 0.5;
  double max_bpc = 0;
  std::string export_dir;
  app.add_option("--dtype", dtype, "precision of the forward pass")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--text", text_path, "the text to learn");
  app.add_option("--steps", steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "windows per batch")->check(CLI::PositiveNumber);
  app.add_option("--window", window, "characters per window (T)")->check(CLI::PositiveNumber);
  app.add_option("--embedding-dim", config.embedding_dim, "E")->check(CLI::PositiveNumber);
  app.add_option("--hidden-size", config.hidden_size, "H")->check(CLI::PositiveNumber);
  app.add_option("--dropout", config.dropout, "dropout between the LSTM layers")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--lr", train.lr, "Adam's lr at the start of the cosine schedule")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-grad-norm", train.max_grad_norm, "clip_grad_norm_'s threshold")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the weights, the batches and the dropout");
  app.add_option("--print-every", print_every, "print the loss every K steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--prompt", prompt, "the text the sample starts from");
  app.add_option("--sample", sample_length, "characters to sample after training");
  app.add_option("--temperature", temperature, "sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-bpc", max_bpc,
                 "fail unless the training text's bits per character end below this (0: no bar)");
  app.add_option("--export", export_dir,
                 "write DIR/init.safetensors (weights, batches, settings) for twin.py");
  CLI11_PARSE(app, argc, argv);

  try {
    train.precision = precision_from_name(dtype);
    train.total_steps = steps;
    const std::string text = data::read_text_file(text_path);
    const Vocabulary vocabulary(text);
    config.vocab_size = vocabulary.size();
    const Tensor tokens = vocabulary.encode(text);
    vocabulary.encode(prompt);  // refuses a prompt with characters the text does not have
    HG_CHECK(tokens.size(0) >= 2 * (window + 1),
             "'{}' has {} characters; expected at least {} (a training window and a "
             "held-out window of --window + 1 = {} characters each)",
             text_path, tokens.size(0), 2 * (window + 1), window + 1);
    // The last tenth is held out: the model never trains on it.
    const int64_t held_out = std::max<int64_t>(window + 1, tokens.size(0) / 10);
    const Tensor train_tokens = tokens.narrow(0, 0, tokens.size(0) - held_out);
    const Tensor held_out_tokens = tokens.narrow(0, tokens.size(0) - held_out, held_out);

    manual_seed(seed);  // the weights and the dropout masks
    auto model = std::make_shared<CharLSTM>(config);
    Generator shuffle(seed);
    data::DataLoader loader(
        std::make_shared<Windows>(train_tokens, window),
        {.batch_size = batch_size, .shuffle = true, .drop_last = true, .generator = &shuffle});
    HG_CHECK(loader.size() >= 1,
             "the text has {} training windows of {}; expected "
             "at least --batch-size {}",
             loader.dataset().size(), window, batch_size);

    fmt::print(
        "char_lstm: {} on '{}' ({} characters, {} distinct: uniform guessing costs "
        "{:.2f} bits per character), {} steps of {} windows of {}\n",
        dtype, text_path, text.size(), vocabulary.size(), std::log2(double(vocabulary.size())),
        steps, batch_size, window);
    fmt::print("model: {}\n", model->to_string());

    if (!export_dir.empty()) {
      TensorMap contents = model->state_dict();
      std::vector<Tensor> inputs, targets;
      for (auto it = loader.begin(); int64_t(inputs.size()) < steps; ++it) {
        if (it == loader.end()) it = loader.begin();
        inputs.push_back((*it)[0]);
        targets.push_back((*it)[1]);
      }
      contents["batch.inputs"] = stack(inputs, 0);
      contents["batch.targets"] = stack(targets, 0);
      const std::map<std::string, std::string> settings = {
          {"vocab_size", std::to_string(config.vocab_size)},
          {"embedding_dim", std::to_string(config.embedding_dim)},
          {"hidden_size", std::to_string(config.hidden_size)},
          {"num_layers", std::to_string(config.num_layers)},
          {"dropout", fmt::format("{}", config.dropout)},
          {"lr", fmt::format("{}", train.lr)},
          {"max_grad_norm", fmt::format("{}", train.max_grad_norm)},
          {"steps", std::to_string(steps)}};
      std::filesystem::create_directories(export_dir);
      const std::string path = export_dir + "/init.safetensors";
      save(path, contents, settings);
      fmt::print("wrote {}: the initial weights and {} batches\n", path, steps);
      return 0;
    }

    Trainer trainer(model, train);
    int64_t step = 0, skipped = 0;
    while (step < steps) {
      for (const data::Batch& batch : loader) {
        if (step == steps) break;
        ++step;
        const StepReport report = trainer.step(batch[0], batch[1]);
        if (!report.stepped) ++skipped;
        if (step % print_every != 0 && step != 1 && step != steps && report.stepped) continue;
        std::string line = fmt::format("step {:>5}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}", step,
                                       report.loss, report.grad_norm, report.lr);
        if (train.precision == Precision::kFloat16) line += fmt::format("  scale {}", report.scale);
        if (!report.stepped) line += "  (inf/NaN gradient: step skipped)";
        fmt::print("{}\n", line);
      }
    }
    if (train.precision == Precision::kFloat16) {
      fmt::print("GradScaler: {} of {} steps skipped, final scale {}\n", skipped, steps,
                 trainer.scaler().get_scale());
    }

    const double train_bpc = bits_per_character(*model, train_tokens, window, train.precision);
    const double held_out_bpc =
        bits_per_character(*model, held_out_tokens, window, train.precision);
    fmt::print("bits per character: {:.3f} on the training text, {:.3f} on the held-out tenth\n",
               train_bpc, held_out_bpc);
    Generator sampler(seed);
    fmt::print(
        "sample (temperature {}):\n{}{}\n", temperature, prompt,
        sample(*model, vocabulary, prompt, sample_length, temperature, sampler, train.precision));
    if (max_bpc > 0 && !(train_bpc < max_bpc)) {
      fmt::print("char_lstm: FAILED - {:.3f} bits per character, expected below --max-bpc {}\n",
                 train_bpc, max_bpc);
      return 1;
    }
    return 0;
  } catch (const Error& error) {
    std::fprintf(stderr, "char_lstm: %s\n", error.what());
    return 2;
  }
}
