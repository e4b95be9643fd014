// Checkpoints with named states (NOTE [Checkpoint state protocol], NOTE [All-or-nothing
// resume]): an LR schedule, a shuffled DataLoader mid-epoch, a DistributedSampler, an fp8
// recipe's amax histories, a GradScaler and ReduceLROnPlateau come back where they were, a run
// resumed from the file goes on bit-identically to one never stopped, and a file that does not
// fit what it is loaded into is one error listing every mismatch, changing nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "halfgrad/halfgrad.h"
#include "halfgrad/io/checkpoint.h"
#include "halfgrad/io/safetensors.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Matchers::Contains;

namespace {

// A linear model trained by SGD with momentum under a OneCycleLR, on data drawn from the default
// generator.
struct OneCycleRun {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(6, 3);
  std::unique_ptr<optim::SGD> opt = std::make_unique<optim::SGD>(
      model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  std::unique_ptr<optim::OneCycleLR> schedule = std::make_unique<optim::OneCycleLR>(
      *opt, optim::OneCycleOptions{.max_lr = {0.5}, .total_steps = 20});
  std::vector<double> lrs, momenta;  // after each step

  void step() {
    const Tensor x = randn({8, 6}), y = randn({8, 3});
    opt->zero_grad();
    nn::functional::mse_loss(model->forward(x), y).backward();
    opt->step();
    schedule->step();
    lrs.push_back(opt->param_groups()[0].options.at("lr"));
    momenta.push_back(opt->param_groups()[0].options.at("momentum"));
  }
};

void check_same_parameters(const nn::Module& a, const nn::Module& b) {
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [key, tensor] : sa) {
    INFO("key " << key);
    CHECK(bit_identical(tensor, sb.at(key)));
  }
}

// The dataset 0..n-1 (one int64 field), so a batch is the indices it holds.
std::shared_ptr<data::TensorDataset> indices_dataset(int64_t n) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = i;
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{tensor(values, kInt64)});
}

using Batches = std::vector<std::vector<int64_t>>;

std::vector<int64_t> indices_of(const data::Batch& batch) { return batch[0].to_vector<int64_t>(); }

// A model and an optimizer for checkpoints that are about other states.
struct Bystanders {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(2, 2);
  optim::SGD opt{model->parameters(), {.lr = 0.1}};
};

}  // namespace

TEST_CASE("a OneCycleLR run resumed from a checkpoint continues bit-identically",
          "[io][checkpoint][resume]") {
  const int64_t stop = 7, total = 18;
  manual_seed(11);
  OneCycleRun straight;
  for (int64_t i = 0; i < total; ++i) straight.step();

  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  manual_seed(11);
  std::vector<double> first_lrs;
  {
    OneCycleRun first;
    for (int64_t i = 0; i < stop; ++i) first.step();
    first_lrs = first.lrs;
    io::save_checkpoint(path, *first.model, *first.opt, {{"scheduler", first.schedule.get()}});
  }
  manual_seed(99);  // another process: other weights, another generator state
  OneCycleRun resumed;
  io::load_checkpoint(path, *resumed.model, *resumed.opt, {{"scheduler", resumed.schedule.get()}});
  CHECK(resumed.schedule->last_epoch() == stop);
  CHECK(resumed.schedule->get_last_lr() == std::vector<double>{first_lrs.back()});
  for (int64_t i = stop; i < total; ++i) resumed.step();

  // The lrs and momenta of steps stop..total, and the parameters, bit for bit.
  CHECK(resumed.lrs == std::vector<double>(straight.lrs.begin() + stop, straight.lrs.end()));
  CHECK(resumed.momenta ==
        std::vector<double>(straight.momenta.begin() + stop, straight.momenta.end()));
  check_same_parameters(*straight.model, *resumed.model);
  // Without its state the schedule would have started over at the warmup's first lr.
  OneCycleRun fresh;
  CHECK(fresh.opt->param_groups()[0].options.at("lr") != resumed.lrs.front());
}

TEST_CASE("a shuffled DataLoader resumed mid-epoch yields the rest of the epoch and the next ones",
          "[io][checkpoint][resume]") {
  const auto dataset = indices_dataset(10);  // batches of 3: 4 per epoch, the last of 1
  const int num_workers = GENERATE(0, 2);
  const bool own_generator = GENERATE(true, false);
  CAPTURE(num_workers, own_generator);
  auto options = [&](Generator* generator) {
    return data::DataLoaderOptions{.batch_size = 3,
                                   .shuffle = true,
                                   .num_workers = num_workers,
                                   .generator = own_generator ? generator : nullptr};
  };

  std::vector<Batches> straight(3);
  {
    manual_seed(3);
    Generator generator(5);
    data::DataLoader loader(dataset, options(&generator));
    for (Batches& epoch : straight) {
      for (const data::Batch& batch : loader) epoch.push_back(indices_of(batch));
    }
  }
  REQUIRE(straight[1] != straight[2]);  // a new order each epoch

  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  Bystanders bystanders;
  {
    manual_seed(3);
    Generator generator(5);
    data::DataLoader loader(dataset, options(&generator));
    for (const data::Batch& batch : loader) (void)batch;
    int64_t k = 0;
    for (const data::Batch& batch : loader) {
      CHECK(indices_of(batch) == straight[1][size_t(k)]);
      if (++k == 2) {  // batch 1 trained on: save, and stop
        io::save_checkpoint(path, *bystanders.model, bystanders.opt, {{"loader", &loader}});
        break;
      }
    }
  }
  manual_seed(1234);
  Generator generator(777);
  data::DataLoader loader(dataset, options(&generator));
  io::load_checkpoint(path, *bystanders.model, bystanders.opt, {{"loader", &loader}});
  Batches rest;
  for (const data::Batch& batch : loader) rest.push_back(indices_of(batch));
  CHECK(rest == Batches(straight[1].begin() + 2, straight[1].end()));
  Batches next;
  for (const data::Batch& batch : loader) next.push_back(indices_of(batch));
  CHECK(next == straight[2]);
  // A state saved between passes starts a new one.
  const io::ObjectState between = loader.state_dict();
  CHECK(between.values.at("batches_handed_out") == io::StateValue(int64_t(0)));
  CHECK(between.tensors.empty());
}

TEST_CASE("a DataLoader over a DistributedSampler resumes with the sampler's epoch",
          "[io][checkpoint][resume]") {
  const auto dataset = indices_dataset(11);
  auto make = [&](int64_t rank, std::shared_ptr<data::DistributedSampler>& sampler) {
    sampler = std::make_shared<data::DistributedSampler>(
        *dataset, 2, rank, data::DistributedSamplerOptions{.seed = 9});
    return std::make_unique<data::DataLoader>(
        dataset, data::DataLoaderOptions{.batch_size = 2, .sampler = sampler});
  };
  std::shared_ptr<data::DistributedSampler> sampler;
  auto loader = make(1, sampler);
  sampler->set_epoch(3);
  Batches epoch3;
  for (const data::Batch& batch : *loader) epoch3.push_back(indices_of(batch));
  REQUIRE(epoch3.size() == 3);  // 6 of the 11 (padded to 12) indices

  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  Bystanders bystanders;
  auto it = loader->begin();
  REQUIRE(indices_of(*it) == epoch3[0]);
  io::save_checkpoint(path, *bystanders.model, bystanders.opt, {{"loader", loader.get()}});

  std::shared_ptr<data::DistributedSampler> sampler2;
  auto resumed = make(1, sampler2);
  io::load_checkpoint(path, *bystanders.model, bystanders.opt, {{"loader", resumed.get()}});
  CHECK(sampler2->epoch() == 3);
  Batches rest;
  for (const data::Batch& batch : *resumed) rest.push_back(indices_of(batch));
  CHECK(rest == Batches(epoch3.begin() + 1, epoch3.end()));

  // Another rank's sampler: another share, refused.
  std::shared_ptr<data::DistributedSampler> rank0;
  auto other = make(0, rank0);
  CHECK_THROWS_WITH(
      io::load_checkpoint(path, *bystanders.model, bystanders.opt, {{"loader", other.get()}}),
      Contains("state \"loader\" (DataLoader)") &&
          Contains("DistributedSampler: expected the rank of this sampler, 0, got 1"));
  CHECK(rank0->epoch() == 0);
}

TEST_CASE("fp8 delayed-scaling state round trips and the next steps match",
          "[io][checkpoint][resume]") {
  auto fp8_step = [](nn::Linear& layer, amp::DelayedScaling& recipe, const Tensor& x) {
    Tensor y;
    {
      amp::Fp8Autocast fp8(recipe);
      y = layer.forward(x);
    }
    (y * y).sum().backward();
    return y.detach();
  };
  manual_seed(8);
  auto layer = std::make_shared<nn::Linear>(16, 8);
  amp::DelayedScaling recipe({.amax_history_len = 4});
  for (int s = 0; s < 3; ++s) fp8_step(*layer, recipe, randn({5, 16}) * double(2 + s));

  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  optim::SGD opt(layer->parameters(), {.lr = 0.1});
  io::save_checkpoint(path, *layer, opt, {{"fp8", &recipe}});
  const io::SafetensorsContents contents = io::load_safetensors(path);
  CHECK(contents.tensors.count("state.fp8.weight.amax_history") == 1);
  CHECK_THAT(contents.metadata.at("state.fp8"),
             Contains("\"kind\":\"DelayedScaling\"") && Contains("\"amax_history_len\":4"));

  manual_seed(80);
  auto layer2 = std::make_shared<nn::Linear>(16, 8);
  optim::SGD opt2(layer2->parameters(), {.lr = 0.1});
  amp::DelayedScaling recipe2({.amax_history_len = 4});
  io::load_checkpoint(path, *layer2, opt2, {{"fp8", &recipe2}});
  const auto saved = recipe.find(layer->weight), loaded = recipe2.find(layer2->weight);
  REQUIRE(saved != nullptr);
  REQUIRE(loaded != nullptr);
  CHECK(bit_identical(saved->amax_history, loaded->amax_history));
  CHECK(bit_identical(saved->scale, loaded->scale));
  CHECK(bit_identical(saved->scale_inv, loaded->scale_inv));
  CHECK(loaded->ran == saved->ran);
  // The next steps (each updating the scales from the restored histories) give the same bits.
  for (int s = 0; s < 2; ++s) {
    const Tensor x = randn({5, 16}) * 3.0;
    CHECK(bit_identical(fp8_step(*layer, recipe, x), fp8_step(*layer2, recipe2, x)));
    CHECK(bit_identical(saved->scale, recipe2.find(layer2->weight)->scale));
  }

  // A recipe with another history length does not fit.
  amp::DelayedScaling longer({.amax_history_len = 8});
  CHECK_THROWS_WITH(
      io::load_checkpoint(path, *layer2, opt2, {{"fp8", &longer}}),
      Contains("expected the recipe's amax_history_len 8, the state was saved with 4"));
  CHECK(longer.num_layers() == 0);
}

TEST_CASE("GradScaler and ReduceLROnPlateau states round trip, infinities included",
          "[io][checkpoint][resume]") {
  Bystanders bystanders;
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 7});
  optim::ReduceLROnPlateau fresh_plateau(bystanders.opt, {.patience = 1});  // best is +inf
  optim::ReduceLROnPlateau plateau(bystanders.opt, {.mode = "max", .patience = 1});
  for (double metric : {1.0, 0.5, 0.25}) plateau.step(metric);
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  io::save_checkpoint(path, *bystanders.model, bystanders.opt,
                      {{"scaler", &scaler}, {"fresh", &fresh_plateau}, {"plateau", &plateau}});

  Bystanders target;
  amp::GradScaler scaler2({.growth_interval = 7});
  optim::ReduceLROnPlateau fresh2(target.opt, {.patience = 1});
  optim::ReduceLROnPlateau plateau2(target.opt, {.mode = "max", .patience = 1});
  fresh2.step(0.3);  // best 0.3: the load puts +inf back
  io::load_checkpoint(path, *target.model, target.opt,
                      {{"plateau", &plateau2}, {"scaler", &scaler2}, {"fresh", &fresh2}});
  CHECK(scaler2.state_dict() == scaler.state_dict());
  CHECK(scaler2.get_scale() == 1024.0);
  CHECK(fresh2.best() == std::numeric_limits<double>::infinity());
  CHECK(fresh2.last_epoch() == 0);
  CHECK(plateau2.best() == 1.0);
  CHECK(plateau2.num_bad_epochs() == plateau.num_bad_epochs());
  CHECK(plateau2.last_epoch() == 3);
  CHECK(plateau2.get_last_lr() == plateau.get_last_lr());
}

TEST_CASE("a state of another kind or a missing one is one clear error that changes nothing",
          "[io][checkpoint][resume][errors]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  const auto dataset = indices_dataset(10);
  manual_seed(4);
  {
    OneCycleRun run;
    for (int i = 0; i < 3; ++i) run.step();
    Generator generator(1);
    data::DataLoader loader(dataset, {.batch_size = 3, .shuffle = true, .generator = &generator});
    auto it = loader.begin();
    io::save_checkpoint(path, *run.model, *run.opt,
                        {{"scheduler", run.schedule.get()}, {"loader", &loader}});
  }

  manual_seed(5);
  OneCycleRun target;
  target.step();
  optim::CosineAnnealingLR cosine(*target.opt, 10);
  cosine.step();
  Generator generator(2);
  data::DataLoader loader(dataset, {.batch_size = 3, .shuffle = true, .generator = &generator});
  data::DataLoader smaller_batches(dataset,
                                   {.batch_size = 2, .shuffle = true, .generator = &generator});
  const nn::StateDict params_before = target.model->state_dict();
  std::vector<Tensor> params_copy;
  for (const auto& [key, tensor] : params_before) params_copy.push_back(tensor.clone());
  const auto options_before = target.opt->param_groups()[0].options;
  std::vector<Tensor> momentum_before;
  for (const auto& [index, entries] : target.opt->state_dict().state) {
    for (const auto& [name, tensor] : entries) momentum_before.push_back(tensor.clone());
  }
  REQUIRE(!momentum_before.empty());
  const Generator::State rng_before = default_generator().get_state();
  const Generator::State generator_before = generator.get_state();
  auto check_unchanged = [&] {
    size_t i = 0;
    for (const auto& [key, tensor] : target.model->state_dict()) {
      CHECK(bit_identical(tensor, params_copy[i++]));
    }
    CHECK(target.opt->param_groups()[0].options == options_before);
    size_t j = 0;
    for (const auto& [index, entries] : target.opt->state_dict().state) {
      for (const auto& [name, tensor] : entries) CHECK(bit_identical(tensor, momentum_before[j++]));
    }
    CHECK(cosine.last_epoch() == 1);
    CHECK(target.schedule->last_epoch() == 1);
    CHECK(default_generator().get_state().offset == rng_before.offset);
    CHECK(generator.get_state().offset == generator_before.offset);
    CHECK(loader.state_dict().values.at("batches_handed_out") == io::StateValue(int64_t(0)));
  };

  SECTION("another kind of scheduler") {
    CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, *target.opt,
                                          {{"scheduler", &cosine}, {"loader", &loader}}),
                      Contains("1 mismatch):") &&
                          Contains("state \"scheduler\": expected a CosineAnnealingLR, the "
                                   "checkpoint holds a OneCycleLR"));
  }
  SECTION("a state missing and one not given, listed together") {
    CHECK_THROWS_WITH(
        io::load_checkpoint(path, *target.model, *target.opt,
                            {{"schedule", target.schedule.get()}, {"loader", &loader}}),
        Contains("2 mismatches):") &&
            Contains(
                "missing state \"schedule\" (a OneCycleLR; the checkpoint does not hold it)") &&
            Contains("unexpected state \"scheduler\" (a OneCycleLR; nothing was given to load it "
                     "into)"));
  }
  SECTION("a DataLoader with another batch size") {
    CHECK_THROWS_WITH(
        io::load_checkpoint(path, *target.model, *target.opt,
                            {{"scheduler", target.schedule.get()}, {"loader", &smaller_batches}}),
        Contains("state \"loader\" (DataLoader): DataLoader: expected the batch_size of this "
                 "loader, 2, got 3"));
  }
  SECTION("the old signature, which names only the scaler") {
    amp::GradScaler scaler;
    const auto scaler_before = scaler.state_dict();
    CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, *target.opt, scaler),
                      Contains("3 mismatches):") && Contains("missing state \"scaler\"") &&
                          Contains("unexpected state \"loader\" (a DataLoader"));
    CHECK(scaler.state_dict() == scaler_before);
  }
  SECTION("bad state names") {
    CHECK_THROWS_WITH(
        io::load_checkpoint(path, *target.model, *target.opt, {{"a.b", &loader}}),
        Contains("expected a state name of letters, digits, '_' and '-', got \"a.b\""));
    CHECK_THROWS_WITH(
        io::save_checkpoint(path, *target.model, *target.opt, {{"x", &loader}, {"x", &cosine}}),
        Contains("expected different state names, got \"x\" twice"));
  }
  check_unchanged();
}

TEST_CASE("load_checkpoint lists every model mismatch in one error", "[io][checkpoint][errors]") {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  manual_seed(6);
  auto saved = std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));
  optim::SGD opt(saved->parameters(), {.lr = 0.1});
  io::save_checkpoint(path, *saved, opt, std::vector<io::NamedState>{});

  // 0.weight and 0.bias: another shape; 1.*: not in the file; 2.*: not in the model.
  auto other = std::make_shared<nn::Sequential>(nn::Linear(4, 5), nn::Linear(8, 2));
  optim::SGD other_opt(other->parameters(), {.lr = 0.1});
  const nn::StateDict before = other->state_dict();
  std::vector<Tensor> copies;
  for (const auto& [key, tensor] : before) copies.push_back(tensor.clone());
  CHECK_THROWS_WITH(
      io::load_checkpoint(path, *other, other_opt, std::vector<io::NamedState>{}),
      Contains("ckpt.safetensors") && Contains("(6 mismatches):") &&
          Contains("key \"model.0.weight\": expected float32 of shape [5, 4], got float32 of "
                   "shape [8, 4]") &&
          Contains("key \"model.0.bias\": expected float32 of shape [5], got float32 of shape "
                   "[8]") &&
          Contains("missing key \"model.1.weight\"") && Contains("missing key \"model.1.bias\"") &&
          Contains("unexpected key \"model.2.weight\"") &&
          Contains("unexpected key \"model.2.bias\""));
  size_t i = 0;
  for (const auto& [key, tensor] : other->state_dict()) CHECK(bit_identical(tensor, copies[i++]));

  // And a dtype.
  auto half = std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));
  half->to(kBFloat16);
  optim::SGD half_opt(half->parameters(), {.lr = 0.1});
  CHECK_THROWS_WITH(io::load_checkpoint(path, *half, half_opt, std::vector<io::NamedState>{}),
                    Contains("(4 mismatches):") &&
                        Contains("key \"model.2.bias\": expected bfloat16 of shape [2], got "
                                 "float32 of shape [2]"));
}

TEST_CASE("a version 1 checkpoint still loads, its scaler as the state \"scaler\"",
          "[io][checkpoint]") {
  TempFolder folder;
  const std::string path = folder.file("v1.safetensors");
  Bystanders saved;
  amp::GradScaler scaler({.init_scale = 512.0, .growth_interval = 5});
  io::save_checkpoint(path, *saved.model, saved.opt, scaler, {{"step", "3"}});
  // The file an older halfgrad wrote: version 1, the scaler's values as metadata "scaler".
  io::SafetensorsContents contents = io::load_safetensors(path);
  const std::string state = contents.metadata.at("state.scaler");
  const std::string values_key = "\"values\":";
  const size_t values = state.find(values_key);
  REQUIRE(values != std::string::npos);
  REQUIRE(state.back() == '}');
  contents.metadata.erase("state.scaler");
  contents.metadata.insert_or_assign("version", std::string(1, '1'));
  contents.metadata["scaler"] =
      std::string(state.begin() + std::ptrdiff_t(values + values_key.size()), state.end() - 1);
  CHECK_THAT(contents.metadata["scaler"], Contains("\"scale\":512.0"));
  save(path, contents.tensors, contents.metadata);

  Bystanders target;
  amp::GradScaler scaler2;
  const auto extra = io::load_checkpoint(path, *target.model, target.opt, scaler2);
  CHECK(extra.at("step") == "3");
  CHECK(scaler2.get_scale() == 512.0);
  check_same_parameters(*saved.model, *target.model);
  // A version 1 file holds no other state.
  optim::StepLR schedule(target.opt, 2);
  CHECK_THROWS_WITH(io::load_checkpoint(path, *target.model, target.opt,
                                        {{"scaler", &scaler2}, {"schedule", &schedule}}),
                    Contains("missing state \"schedule\""));
}
