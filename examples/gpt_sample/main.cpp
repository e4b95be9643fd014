// gpt_sample: trains a character GPT on a text and writes new text with it, sampling with a
// temperature and top-k, as nanoGPT's train.py and sample.py do (gpt_sample.h has the model,
// the step and the sampler; twin.py is the same program in PyTorch).
//
//   gpt_sample --text examples/gpt_sample/text.txt --dtype bf16 --steps 300
//   gpt_sample --text ... --export DIR     the initial weights and the window starts of the
//                                          first --export-steps steps, for twin.py
//
// It prints the loss as it trains, the held-out loss at the end and --chars sampled
// characters after --prompt. With --max-val-loss it exits with 1 when the held-out loss is
// above that bar, so a smoke test checks that the model learned.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "gpt_sample.h"

using namespace hg;
using namespace hg::examples::gpt_sample;

namespace {

// The held-out loss: the mean over kValBatches batches of windows from the last tenth of the
// text, drawn from a generator of its own so every run scores the same windows.
constexpr int64_t kValBatches = 8;

double val_loss(Trainer& trainer, const CharText& text, const Options& options) {
  Generator generator(1234);
  NoGradGuard no_grad;
  trainer.model.eval();
  double total = 0.0;
  for (int64_t i = 0; i < kValBatches; ++i) {
    const Tensor starts = text.random_starts(options.batch, options.block, generator, true);
    total += trainer.loss_of(text.batch(starts, options.block)).item<double>();
  }
  trainer.model.train();
  return total / double(kValBatches);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpt_sample: train a character GPT on a text and sample from it"};
  std::string text_path, dtype_name = "fp32", prompt = "The ", export_dir;
  Options options;
  uint64_t seed = 0;
  int64_t chars = 200, top_k = 10, export_steps = 20, print_every = 50;
  double temperature = 0.8, max_val_loss = 0.0;
  app.add_option("--text", text_path, "the text to learn")->required();
  app.add_option("--dtype", dtype_name, "fp32, bf16 (autocast) or fp16 (autocast + GradScaler)");
  app.add_option("--steps", options.steps, "training steps (the cosine schedule's length)");
  app.add_option("--seed", seed, "of the initial weights, the batches and the samples");
  app.add_option("--prompt", prompt, "the text sampling starts from");
  app.add_option("--chars", chars, "characters to sample");
  app.add_option("--temperature", temperature, "divides the logits before softmax");
  app.add_option("--top-k", top_k, "sample among the k most likely characters (0: all)");
  app.add_option("--max-val-loss", max_val_loss, "exit with 1 above this held-out loss");
  app.add_option("--print-every", print_every, "steps between loss lines");
  app.add_option("--export", export_dir, "write DIR/init.safetensors for twin.py and exit");
  app.add_option("--export-steps", export_steps, "steps of window starts --export writes");
  CLI11_PARSE(app, argc, argv);

  try {
    options.dtype = parse_dtype(dtype_name);
    const CharText text(data::read_text_file(text_path));
    manual_seed(seed);
    Trainer trainer(text.vocab_size(), options);
    Generator batches(seed);

    if (!export_dir.empty()) {
      TensorMap out = trainer.model.state_dict();
      std::vector<Tensor> starts;
      for (int64_t i = 0; i < export_steps; ++i) {
        starts.push_back(text.random_starts(options.batch, options.block, batches));
      }
      out["starts"] = stack(starts);  // [export_steps, batch]
      save(export_dir + "/init.safetensors", out);
      fmt::print("wrote {}/init.safetensors ({} steps of window starts)\n", export_dir,
                 export_steps);
      return 0;
    }

    fmt::print("{} characters, vocabulary {}, GPT {} layers x {} wide, {} steps in {}\n",
               text.size(), text.vocab_size(), options.n_layer, options.n_embd, options.steps,
               dtype_name);
    for (int64_t step = 1; step <= options.steps; ++step) {
      const Tensor starts = text.random_starts(options.batch, options.block, batches);
      const double loss = trainer.step(text.batch(starts, options.block));
      if (step % print_every == 0 || step == 1) {
        fmt::print("step {:4d}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}{}\n", step, loss,
                   trainer.last_grad_norm, trainer.opt.param_groups()[0].options.at("lr"),
                   options.dtype == kFloat16
                       ? fmt::format("  scale {:g}", trainer.scaler.get_scale())
                       : std::string());
      }
    }
    const double held_out = val_loss(trainer, text, options);
    fmt::print("held-out loss {:.4f} (uniform guessing: {:.4f})\n", held_out,
               std::log(double(text.vocab_size())));

    trainer.model.eval();
    Generator sampler(seed + 1);
    const Tensor ids =
        generate(trainer.model, text.encode(prompt), chars, temperature, top_k, &sampler);
    fmt::print("sample (temperature {}, top-k {}):\n{}\n", temperature, top_k, text.decode(ids));
    if (max_val_loss > 0 && !(held_out <= max_val_loss)) {
      fmt::print("FAILED: held-out loss {:.4f} above the bar {:.4f}\n", held_out, max_val_loss);
      return 1;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt_sample: %s\n", e.what());
    return 2;
  }
  return 0;
}
