// io::save_checkpoint / io::load_checkpoint: a resumed fp16 + GradScaler run continues
// bit-identically, and a bad checkpoint (a corrupted one included) changes nothing.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <catch2/catch.hpp>

#include "halfgrad/cpu/kernel_choices.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/onednn_conv.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/io/checkpoint.h"
#include "halfgrad/io/safetensors.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Matchers::Contains;

namespace {

// A small fp16-autocast training run whose data and dropout masks come from the default
// generator, with an AdamW and a GradScaler that grows every 3 clean steps.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  int64_t skipped = 0;

  explicit Run(int64_t hidden = 16) {
    model = std::make_shared<nn::Sequential>(nn::Linear(8, hidden), nn::GELU(), nn::Dropout(0.2),
                                             nn::Linear(hidden, 4));
    opt = std::make_unique<optim::AdamW>(model->parameters(),
                                         optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.01});
    scaler = std::make_unique<amp::GradScaler>(
        amp::GradScalerOptions{.init_scale = 256.0, .growth_interval = 3});
  }

  // Iteration i: every fifth one (i % 5 == 3) gets an inf gradient and is skipped.
  void iteration(int64_t i) {
    const Tensor x = randn({32, 8});
    const Tensor y = randn({32, 4});
    opt->zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(kCPU, kFloat16);
      loss = nn::functional::mse_loss(model->forward(x), y);
    }
    scaler->scale(loss).backward();
    if (i % 5 == 3) model->parameters()[0].mutable_grad().data_ptr<float>()[0] = INFINITY;
    if (!scaler->step(*opt)) ++skipped;
    scaler->update();
  }
};

// Everything a resume must restore, as tensors and numbers.
struct Snapshot {
  nn::StateDict model;
  optim::OptimizerStateDict optimizer;
  std::map<std::string, double> scaler;
};

Snapshot snapshot(const Run& run) {
  Snapshot s;
  for (const auto& [key, tensor] : run.model->state_dict()) s.model[key] = tensor.clone();
  s.optimizer = run.opt->state_dict();
  s.scaler = run.scaler->state_dict();
  return s;
}

void check_same(const Snapshot& a, const Snapshot& b) {
  REQUIRE(a.model.size() == b.model.size());
  for (const auto& [key, tensor] : a.model) {
    INFO("model key " << key);
    CHECK(bit_identical(tensor, b.model.at(key)));
  }
  REQUIRE(a.optimizer.state.size() == b.optimizer.state.size());
  for (const auto& [index, entries] : a.optimizer.state) {
    for (const auto& [name, tensor] : entries) {
      INFO("optimizer state " << index << "." << name);
      CHECK(bit_identical(tensor, b.optimizer.state.at(index).at(name)));
    }
  }
  CHECK(a.scaler == b.scaler);
}

// The bytes with the digit right after `marker` changed (0 -> 1, ..., 9 -> 0): a value in the
// header edited in place, the file's length unchanged.
std::string with_digit_after(std::string bytes, const std::string& marker) {
  const size_t at = bytes.find(marker);
  REQUIRE(at != std::string::npos);
  char& digit = bytes[at + marker.size()];
  REQUIRE(std::isdigit(static_cast<unsigned char>(digit)));
  digit = char('0' + (digit - '0' + 1) % 10);
  return bytes;
}

// The bytes with the scalar tensor `key` holding `value` instead (same dtype, same length).
std::string with_scalar(std::string bytes, const std::string& key, double value) {
  const std::string entry = "\"" + key + "\":{\"dtype\":\"";
  const size_t at = bytes.find(entry);
  REQUIRE(at != std::string::npos);
  const size_t dtype_begin = at + entry.size();
  const DType dtype = io::dtype_from_safetensors_name(
      bytes.substr(dtype_begin, bytes.find('"', dtype_begin) - dtype_begin));
  const std::string offsets = "\"data_offsets\":[";
  const size_t begin = std::stoull(bytes.substr(bytes.find(offsets, at) + offsets.size()));
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | uint8_t(bytes[size_t(i)]);
  const Tensor replacement = full({}, value, dtype);
  REQUIRE(replacement.nbytes() > 0);
  std::memcpy(bytes.data() + 8 + header_length + begin, replacement.data_ptr(),
              replacement.nbytes());
  return bytes;
}

}  // namespace

TEST_CASE("a resumed fp16 GradScaler run continues bit-identically", "[io][checkpoint]") {
  const int64_t n = 7, m = 6;  // skips at iterations 3 (before the save) and 8 (after)
  manual_seed(5);
  Run straight;
  for (int64_t i = 0; i < n + m; ++i) straight.iteration(i);

  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  manual_seed(5);
  {
    Run first;
    for (int64_t i = 0; i < n; ++i) first.iteration(i);
    CHECK(first.skipped == 1);
    io::save_checkpoint(path, *first.model, *first.opt, *first.scaler, {{"iteration", "7"}});
  }
  manual_seed(12345);  // another process: other weights, another generator state
  Run resumed;
  const auto extra = io::load_checkpoint(path, *resumed.model, *resumed.opt, *resumed.scaler);
  CHECK(extra == std::map<std::string, std::string>{{"iteration", "7"}});
  for (int64_t i = std::stoll(extra.at("iteration")); i < n + m; ++i) resumed.iteration(i);

  CHECK(resumed.skipped == 1);
  CHECK(straight.skipped == 2);
  check_same(snapshot(straight), snapshot(resumed));
  CHECK(resumed.scaler->get_scale() == straight.scaler->get_scale());
  CHECK(resumed.opt->state(0, 0).step == n + m - 2);  // the two skipped steps did not count
}

TEST_CASE("the checkpoint is a safetensors file with torch's names", "[io][checkpoint]") {
  manual_seed(1);
  Run run;
  run.iteration(0);
  TempFolder folder;
  io::save_checkpoint(folder.file("c.safetensors"), *run.model, *run.opt, *run.scaler);
  const io::SafetensorsContents contents = io::load_safetensors(folder.file("c.safetensors"));
  CHECK(contents.tensors.count("model.0.weight") == 1);
  CHECK(contents.tensors.count("model.3.bias") == 1);
  CHECK(contents.tensors.count("optimizer.state.0.exp_avg") == 1);
  CHECK(contents.tensors.count("optimizer.state.3.exp_avg_sq") == 1);
  CHECK(contents.tensors.at("optimizer.state.0.step").item<double>() == 1.0);
  CHECK(contents.metadata.at("format") == "halfgrad-checkpoint");
  CHECK_THAT(contents.metadata.at("state.scaler"), Contains("\"kind\":\"GradScaler\"") &&
                                                       Contains("\"scale\":256.0") &&
                                                       Contains("\"_growth_tracker\":1.0"));
  CHECK(contents.metadata.at("version") == "2");
  CHECK_THAT(contents.metadata.at("optimizer.param_groups"),
             Contains("\"lr\":0.01") && Contains("\"params\":[0,1,2,3]"));
}

TEST_CASE("a bad checkpoint leaves model optimizer and scaler unchanged",
          "[io][checkpoint][errors]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  manual_seed(2);
  Run saved;
  for (int64_t i = 0; i < 4; ++i) saved.iteration(i);
  io::save_checkpoint(path, *saved.model, *saved.opt, *saved.scaler);

  manual_seed(3);
  Run target;
  target.iteration(0);
  const Snapshot before = snapshot(target);
  auto check_unchanged = [&] { check_same(before, snapshot(target)); };

  SECTION("truncated") {
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
    CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, *target.opt, *target.scaler),
                      Contains("ckpt.safetensors") && Contains("truncated"));
    check_unchanged();
  }
  SECTION("another model shape") {
    Run wider(32);
    wider.iteration(0);
    const Snapshot wider_before = snapshot(wider);
    CHECK_THROWS_WITH(
        io::load_checkpoint(path, *wider.model, *wider.opt, *wider.scaler),
        Contains("key \"model.0.bias\"") && Contains("shape [32]") && Contains("shape [16]"));
    check_same(wider_before, snapshot(wider));
  }
  SECTION("another model dtype") {
    target.model->to(kBFloat16);
    const Snapshot bf16_before = snapshot(target);
    CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, *target.opt, *target.scaler),
                      Contains("expected bfloat16") && Contains("got float32"));
    check_same(bf16_before, snapshot(target));
  }
  SECTION("another optimizer") {
    // SGD's options are not AdamW's: the optimizer refuses after the scaler was loaded, and
    // the scaler is put back.
    optim::SGD sgd(target.model->parameters(), {.lr = 0.1, .momentum = 0.9});
    const std::map<std::string, double> scaler_before = target.scaler->state_dict();
    CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, sgd, *target.scaler),
                      Contains("optimizer") && Contains("unknown option"));
    CHECK(target.scaler->state_dict() == scaler_before);
    check_unchanged();
  }
  SECTION("values out of range") {
    // The file rewritten with one value changed (and without entries other than the
    // checkpoint's own, e.g. a checksum, which the change would contradict).
    auto rewrite = [&](auto edit) {
      io::SafetensorsContents contents = io::load_safetensors(path);
      std::erase_if(contents.metadata, [](const auto& entry) {
        return entry.first != "format" && entry.first != "version" &&
               entry.first != "optimizer.param_groups" && entry.first != "state.scaler" &&
               entry.first != "rng.cpu";
      });
      edit(contents);
      save(path, contents.tensors, contents.metadata);
    };
    auto replace_in = [](std::string& text, const std::string& from, const std::string& to) {
      const size_t at = text.find(from);
      REQUIRE(at != std::string::npos);
      text.replace(at, from.size(), to);
    };
    SECTION("an optimizer option") {
      rewrite([&](io::SafetensorsContents& c) {
        replace_in(c.metadata.at("optimizer.param_groups"), "\"beta2\":0.999", "\"beta2\":8.999");
      });
      CHECK_THROWS_WITH(
          io::load_checkpoint(path, *target.model, *target.opt, *target.scaler),
          Contains("ckpt.safetensors") && Contains("AdamW: expected beta2 in [0, 1), got 8.999"));
    }
    SECTION("a scaler value") {
      rewrite([&](io::SafetensorsContents& c) {
        replace_in(c.metadata.at("state.scaler"), "\"backoff_factor\":0.5",
                   "\"backoff_factor\":8.5");
      });
      CHECK_THROWS_WITH(
          io::load_checkpoint(path, *target.model, *target.opt, *target.scaler),
          Contains("ckpt.safetensors") && Contains("\"backoff_factor\"") && Contains("got 8.5"));
    }
    SECTION("a step count of 1e20") {
      rewrite([&](io::SafetensorsContents& c) {
        c.tensors.at("optimizer.state.0.step") = scalar_tensor(1e20, kFloat32);
      });
      CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, *target.opt, *target.scaler),
                        Contains("ckpt.safetensors") && Contains("\"step\" of parameter 0") &&
                            Contains("got 1.0000000200408773e+20"));
    }
    check_unchanged();
  }
  SECTION("not a checkpoint") {
    save(path, {{"w", ones({2})}});
    CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, *target.opt, *target.scaler),
                      Contains("expected a halfgrad checkpoint"));
    check_unchanged();
  }
  SECTION("a write that fails keeps the previous checkpoint") {
    {
      io::testing::WriteFaultGuard fault(300);
      CHECK_THROWS_WITH(io::save_checkpoint(path, *target.model, *target.opt, *target.scaler),
                        Contains("No space left on device"));
    }
    Run reloaded;
    io::load_checkpoint(path, *reloaded.model, *reloaded.opt, *reloaded.scaler);
    check_same(snapshot(saved), snapshot(reloaded));
  }
}

TEST_CASE("a corrupted checkpoint is refused and changes nothing", "[io][checkpoint][checksum]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  manual_seed(4);
  Run saved;
  for (int64_t i = 0; i < 5; ++i) saved.iteration(i);  // iteration 3 is skipped: step 4
  REQUIRE(saved.opt->state(0, 0).step == 4);
  io::save_checkpoint(path, *saved.model, *saved.opt, *saved.scaler, {{"step", "4"}});
  const std::string good = read_file(path);

  manual_seed(3);
  Run target;
  target.iteration(0);
  const Snapshot before = snapshot(target);
  const Generator::State rng_before = default_generator().get_state();
  auto check_refused = [&](const std::string& bytes, const std::string& part) {
    write_file(path, bytes);
    CHECK_THROWS_WITH(
        io::load_checkpoint(path, *target.model, *target.opt, *target.scaler),
        Contains("ckpt.safetensors") && Contains("the " + part + " does not match its checksum"));
    check_same(before, snapshot(target));
    CHECK(default_generator().get_state().seed == rng_before.seed);
    CHECK(default_generator().get_state().offset == rng_before.offset);
  };

  SECTION("the optimizer's step 4 -> 5 in the data") {
    check_refused(with_scalar(good, "optimizer.state.0.step", 5.0), "data");
  }
  SECTION("a single bit of a weight") {
    std::string flipped = good;
    flipped[good.size() - 3] = char(flipped[good.size() - 3] ^ 0x01);
    check_refused(flipped, "data");
  }
  SECTION("amsgrad 0 -> 1") { check_refused(with_digit_after(good, R"(\"amsgrad\":)"), "header"); }
  SECTION("the lr") { check_refused(with_digit_after(good, R"(\"lr\":0.0)"), "header"); }
  SECTION("the generator's offset") {
    check_refused(with_digit_after(good, R"(\"offset\":)"), "header");
  }
  SECTION("the scaler's scale") {
    check_refused(with_digit_after(good, R"(\"scale\":)"), "header");
  }
  SECTION("an extra string, step 4 -> 5") {
    check_refused(with_digit_after(good, R"("extra.step":")"), "header");
  }
  SECTION("intact, it loads") {
    Run reloaded;
    io::load_checkpoint(path, *reloaded.model, *reloaded.opt, *reloaded.scaler,
                        {.require_checksum = true});
    check_same(snapshot(saved), snapshot(reloaded));
  }
}

TEST_CASE("a checkpoint without checksums loads unless they are required",
          "[io][checkpoint][checksum]") {
  TempFolder folder;
  const std::string path = folder.file("old.safetensors");
  manual_seed(6);
  Run saved;
  for (int64_t i = 0; i < 3; ++i) saved.iteration(i);
  io::save_checkpoint(path, *saved.model, *saved.opt, *saved.scaler);
  // The file an older halfgrad wrote: the checksum entries blanked out (JSON whitespace).
  std::string old = read_file(path);
  const size_t entries = old.find(fmt::format(R"("{}":")", io::kDataChecksumKey));
  REQUIRE(entries != std::string::npos);
  const size_t length =
      fmt::format(R"("{}":"{}","{}":"{}",)", io::kDataChecksumKey, std::string(16, '0'),
                  io::kHeaderChecksumKey, std::string(16, '0'))
          .size();
  REQUIRE(old.substr(entries + length - 2, 3) == "\",\"");  // the next key follows
  old.replace(entries, length, std::string(length, ' '));
  write_file(path, old);
  REQUIRE_FALSE(io::load_safetensors(path).verified);

  Run target;
  target.iteration(0);
  const Snapshot before = snapshot(target);
  CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, *target.opt, *target.scaler,
                                        {.require_checksum = true}),
                    Contains("old.safetensors") && Contains("require_checksum"));
  check_same(before, snapshot(target));
  io::load_checkpoint(path, *target.model, *target.opt, *target.scaler);
  check_same(snapshot(saved), snapshot(target));
}

TEST_CASE("a checkpoint carries the GEMM paths its process chose to the one that loads it",
          "[io][checkpoint][kernel_choices]") {
  cpu::detail::clear_gemm_choices();
  cpu::detail::clear_conv_choices();
  manual_seed(8);
  Run run;
  run.iteration(0);  // measures the classes of the run's products
  const std::vector<cpu::GemmChoice> chosen = cpu::gemm_choices();
  REQUIRE_FALSE(chosen.empty());
  TempFolder folder;
  const std::string path = folder.file("c.safetensors");
  io::save_checkpoint(path, *run.model, *run.opt, *run.scaler);
  CHECK_THAT(io::load_safetensors(path).metadata.at("kernel_choices"),
             Contains(cpu::kernel_machine()) && Contains(chosen[0].shape_class));

  // Another process (its choices forgotten) loads it: every measured class comes back, with
  // its path, and is not measured again.
  cpu::detail::clear_gemm_choices();
  Run resumed;
  io::load_checkpoint(path, *resumed.model, *resumed.opt, *resumed.scaler);
  std::vector<cpu::GemmChoice> restored = cpu::gemm_choices();
  int64_t measured = 0;
  for (const cpu::GemmChoice& choice : chosen) measured += choice.measured ? 1 : 0;
  REQUIRE(int64_t(restored.size()) == measured);
  for (const cpu::GemmChoice& choice : restored) {
    INFO(cpu::describe(choice));
    CHECK(choice.restored);
    const auto same = std::find_if(chosen.begin(), chosen.end(), [&](const cpu::GemmChoice& c) {
      return c.shape_class == choice.shape_class && c.dtype == choice.dtype;
    });
    REQUIRE(same != chosen.end());
    CHECK(same->path == choice.path);
  }
  resumed.iteration(1);
  for (const cpu::GemmChoice& choice : cpu::gemm_choices()) {
    INFO(cpu::describe(choice));
    CHECK_FALSE(choice.measured);
  }

  // Asked not to, load_checkpoint leaves the choices alone.
  cpu::detail::clear_gemm_choices();
  io::load_checkpoint(path, *resumed.model, *resumed.opt, *resumed.scaler,
                      {.restore_kernel_choices = false});
  CHECK(cpu::gemm_choices().empty());
}
