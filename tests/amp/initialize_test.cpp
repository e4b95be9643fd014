// amp::initialize: Apex's opt levels (their properties as Apex documents them), each level's
// training step against the same step written by hand with halfgrad's parts, the dynamic
// scale's skip and backoff, and the errors. Scales are powers of two, so the steps written by
// hand and through the handle agree bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "halfgrad/amp/initialize.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/io/checkpoint.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

std::shared_ptr<nn::Sequential> small_model(uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(4, 8));
  model->push_back(std::make_shared<nn::LayerNorm>(8));
  model->push_back(std::make_shared<nn::Linear>(8, 3));
  return model;
}

std::vector<float> floats(const Tensor& t) { return t.detach().to(kFloat32).to_vector<float>(); }

std::vector<std::vector<float>> all_floats(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : tensors) out.push_back(floats(t));
  return out;
}

}  // namespace

TEST_CASE("the opt levels resolve to Apex's properties", "[amp][initialize]") {
  const amp::AmpProperties o0 = amp::resolve_opt_level(amp::OptLevel::O0);
  CHECK(o0.cast_model_type == kFloat32);
  CHECK_FALSE(o0.patch_torch_functions);
  CHECK_FALSE(o0.keep_batchnorm_fp32.has_value());
  CHECK_FALSE(o0.master_weights);
  CHECK_FALSE(o0.loss_scale.is_dynamic());
  CHECK(o0.loss_scale.value() == 1.0);

  const amp::AmpProperties o1 = amp::resolve_opt_level(amp::OptLevel::O1);
  CHECK_FALSE(o1.cast_model_type.has_value());
  CHECK(o1.patch_torch_functions);
  CHECK_FALSE(o1.master_weights);
  CHECK(o1.loss_scale.is_dynamic());

  const amp::AmpProperties o2 = amp::resolve_opt_level(amp::OptLevel::O2);
  CHECK(o2.cast_model_type == kFloat16);
  CHECK_FALSE(o2.patch_torch_functions);
  CHECK(o2.keep_batchnorm_fp32 == true);
  CHECK(o2.master_weights);
  CHECK(o2.loss_scale.is_dynamic());
  CHECK(o2.cast_model_outputs == kFloat32);

  const amp::AmpProperties o3 = amp::resolve_opt_level(amp::OptLevel::O3);
  CHECK(o3.cast_model_type == kFloat16);
  CHECK(o3.keep_batchnorm_fp32 == false);
  CHECK_FALSE(o3.master_weights);
  CHECK(o3.loss_scale.value() == 1.0);

  // Apex's keyword overrides, and halfgrad's bfloat16.
  const amp::AmpProperties o2_static =
      amp::resolve_opt_level(amp::OptLevel::O2, {.loss_scale = 128.0, .half_dtype = kBFloat16});
  CHECK(o2_static.cast_model_type == kBFloat16);
  CHECK_FALSE(o2_static.loss_scale.is_dynamic());
  CHECK(o2_static.loss_scale.value() == 128.0);
  const amp::AmpProperties o3_dynamic =
      amp::resolve_opt_level(amp::OptLevel::O3, {.keep_batchnorm_fp32 = true, .loss_scale = "dynamic"});
  CHECK(o3_dynamic.keep_batchnorm_fp32 == true);
  CHECK(o3_dynamic.loss_scale.is_dynamic());
  CHECK(amp::opt_level_from_string("O2") == amp::OptLevel::O2);
  CHECK(amp::opt_level_name(amp::OptLevel::O3) == "O3");
}

TEST_CASE("amp::initialize refuses options Apex refuses, naming them", "[amp][initialize][errors]") {
  CHECK_THROWS_WITH(amp::opt_level_from_string("02"),
                    Contains("got \"02\"") && Contains("letter O, not the digit zero"));
  CHECK_THROWS_WITH(amp::opt_level_from_string("O4"), Contains("expected an opt level"));
  CHECK_THROWS_WITH(amp::resolve_opt_level(amp::OptLevel::O1, {.master_weights = true}),
                    Contains("expected master_weights only with a 16-bit cast_model_type"));
  CHECK_THROWS_WITH(amp::resolve_opt_level(amp::OptLevel::O2, {.patch_torch_functions = true}),
                    Contains("expected either patch_torch_functions"));
  CHECK_THROWS_WITH(amp::resolve_opt_level(amp::OptLevel::O2, {.cast_model_type = kFloat64}),
                    Contains("expected cast_model_type float32, float16 or bfloat16, got float64"));
  CHECK_THROWS_WITH(amp::resolve_opt_level(amp::OptLevel::O0, {.half_dtype = kFloat32}),
                    Contains("expected half_dtype float16 or bfloat16, got float32"));
  CHECK_THROWS_WITH(amp::LossScale("static"), Contains("expected loss_scale \"dynamic\""));
  CHECK_THROWS_WITH(amp::LossScale(0.0), Contains("expected loss_scale finite and > 0"));

  // An optimizer that has stepped (its momentum buffers exist): nothing converted.
  auto model = small_model(1);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  (*model)(randn({2, 4})).sum().backward();
  opt.step();
  CHECK_THROWS_WITH(amp::initialize(*model, opt, "O2"),
                    Contains("expected an optimizer that has not stepped yet"));
  for (const Tensor& p : model->parameters()) CHECK(p.dtype() == kFloat32);
}

TEST_CASE("O0 trains as plain float32 does", "[amp][initialize]") {
  auto model = small_model(7);
  auto twin = small_model(7);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  optim::SGD twin_opt(twin->parameters(), {.lr = 0.1});
  auto handle = amp::initialize(*model, opt, "O0");
  CHECK(handle.loss_scale() == 1.0);
  manual_seed(3);
  const Tensor x = randn({5, 4});
  const Tensor y = randn({5, 3});
  for (int step = 0; step < 3; ++step) {
    handle.zero_grad();
    handle.backward(mse_loss((*model)(x), y));
    CHECK(handle.step());
    twin_opt.zero_grad();
    mse_loss((*twin)(x), y).backward();
    twin_opt.step();
  }
  CHECK(all_floats(model->parameters()) == all_floats(twin->parameters()));
}

TEST_CASE("O1 autocasts while the handle lives and scales the loss dynamically",
          "[amp][initialize]") {
  auto model = small_model(11);
  auto twin = small_model(11);
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  optim::SGD twin_opt(twin->parameters(), {.lr = 0.05});
  manual_seed(5);
  const Tensor x = randn({6, 4});
  const Tensor y = randn({6, 3});
  {
    auto handle = amp::initialize(*model, opt, "O1");
    CHECK(amp::is_autocast_enabled(kCPU));
    CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
    CHECK(handle.loss_scale() == 65536.0);
    CHECK(handle.master_weight_counts().empty());  // O1 keeps no masters
    for (int step = 0; step < 3; ++step) {
      handle.zero_grad();
      const Tensor out = (*model)(x);
      CHECK(out.dtype() == kFloat16);  // the last linear ran in float16
      handle.backward(mse_loss(out, y));
      CHECK(amp::weight_cast_cache_size() == 0);  // dropped before the weights change
      CHECK(handle.step());

      // The same step by hand: autocast in float16, the loss scaled by 2^16, grads unscaled.
      twin_opt.zero_grad();
      Tensor twin_loss;
      {
        amp::Autocast autocast(kCPU, kFloat16);
        twin_loss = mse_loss((*twin)(x), y);
      }
      (twin_loss.to(kFloat32) * 65536.0).backward();
      {
        NoGradGuard no_grad;
        for (const Tensor& p : twin->parameters()) {
          Tensor grad = p.grad();
          grad.mul_(1.0 / 65536.0);
        }
      }
      twin_opt.step();
    }
    // The parameters stayed float32 (O1 casts per op, not the model).
    for (const Tensor& p : model->parameters()) CHECK(p.dtype() == kFloat32);
  }
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
  CHECK(all_floats(model->parameters()) == all_floats(twin->parameters()));
}

TEST_CASE("O2 keeps float32 masters and a 16-bit model with float32 norm layers",
          "[amp][initialize]") {
  auto model = small_model(13);
  const std::vector<Tensor> params = model->parameters();  // linear, norm, linear
  optim::SGD opt(params, {.lr = 0.1});
  manual_seed(9);
  const Tensor x = randn({4, 4});
  const Tensor y = randn({4, 3});
  {
    auto handle = amp::initialize(*model, opt, amp::OptLevel::O2);
    const auto named = model->named_parameters();
    for (const auto& [name, p] : named) {
      INFO(name);
      CHECK(p.dtype() == (name.rfind("1.", 0) == 0 ? kFloat32 : kFloat16));
    }
    // The optimizer now steps float32 masters.
    for (const Tensor& p : handle.optimizer().param_groups()[0].params) CHECK(p.dtype() == kFloat32);
    // A float32 input is cast in, the output cast out to float32.
    const Tensor out = (*model)(x);
    CHECK(out.dtype() == kFloat32);
    handle.zero_grad();
    handle.backward(mse_loss(out, y));
    CHECK(handle.step());
    // The model holds the masters rounded to its dtypes.
    const auto& masters = handle.optimizer().param_groups()[0].params;
    for (size_t i = 0; i < params.size(); ++i) {
      CHECK(floats(params[i]) == floats(masters[i].to(params[i].dtype())));
    }
    // A gradient that is not finite: the step is skipped and the scale backs off.
    const std::vector<std::vector<float>> before = all_floats(masters);
    handle.zero_grad();
    handle.backward(mse_loss((*model)(x), y) * std::numeric_limits<float>::infinity());
    CHECK_FALSE(handle.step());
    CHECK(handle.loss_scale() == 32768.0);
    CHECK(all_floats(masters) == before);
  }
  // Without the handle the hooks are gone: a 16-bit input gives a 16-bit output.
  CHECK((*model)(x.to(kFloat16)).dtype() == kFloat16);
}

TEST_CASE("O3 steps the 16-bit weights with loss scale 1", "[amp][initialize]") {
  auto model = small_model(17);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  auto handle = amp::initialize(*model, opt, "O3");
  for (const Tensor& p : model->parameters()) CHECK(p.dtype() == kFloat16);
  for (const Tensor& p : handle.optimizer().param_groups()[0].params) CHECK(p.dtype() == kFloat16);
  CHECK(handle.loss_scale() == 1.0);
  manual_seed(2);
  const Tensor x = randn({3, 4});
  const Tensor y = randn({3, 3});
  const std::vector<std::vector<float>> before = all_floats(model->parameters());
  handle.zero_grad();
  handle.backward(mse_loss((*model)(x), y));
  const std::vector<Tensor> grads = [&] {
    std::vector<Tensor> g;
    for (const Tensor& p : model->parameters()) g.push_back(p.grad().detach().clone());
    return g;
  }();
  CHECK(handle.step());
  // p - 0.1 g in float64, within float16's rounding of the result.
  const std::vector<Tensor> params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> got = floats(params[i]);
    const std::vector<float> g = floats(grads[i]);
    for (size_t k = 0; k < got.size(); ++k) {
      const double expected = double(before[i][k]) - 0.1 * double(g[k]);
      CHECK(std::abs(got[k] - expected) <= std::abs(expected) * 0x1p-10 + 0x1p-24);
    }
  }
  CHECK(handle.state_dict().at("cur_scale") == 1.0);
}

TEST_CASE("the README's O2 loop trains with BatchNorm1d kept in float32",
          "[amp][initialize][readme]") {
  manual_seed(21);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(16, 32));
  model->push_back(std::make_shared<nn::BatchNorm1d>(32));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(32, 4));
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  auto handle = amp::initialize(*model, opt, "O2");
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == (name.rfind("1.", 0) == 0 ? kFloat32 : kFloat16));
  }
  // Four classes, each a direction in the input space.
  const Tensor x = randn({64, 16});
  const Tensor y = argmax(matmul(x, randn({16, 4})), 1);
  double first = 0.0;
  double last = 0.0;
  for (int step = 0; step < 30; ++step) {
    handle.zero_grad();
    const Tensor logits = (*model)(x);
    REQUIRE(logits.dtype() == kFloat32);
    const Tensor loss = cross_entropy(logits, y);
    (step == 0 ? first : last) = loss.item<double>();
    handle.backward(loss);
    handle.step();
  }
  CHECK(std::isfinite(last));
  CHECK(last < 0.5 * first);
}

namespace {

// One step whose scaled gradients stay finite at any scale up to 2^24 (the loss is 2^-20 of
// mse_loss, so a scaled gradient is at most ~2^4 times the mse's): every step is clean.
void clean_step(amp::AmpHandle& handle, nn::Module& model) {
  const Tensor x = randn({4, 4});
  const Tensor y = randn({4, 3});
  handle.zero_grad();
  handle.backward(mse_loss(model(x), y) * 0x1p-20);
  CHECK(handle.step());
}

// The dynamic scaler's state one clean step before its next growth (Apex's window of 2000).
std::map<std::string, double> before_growth(double scale, double iteration) {
  return {{"cur_scale", scale},
          {"cur_iter", iteration},
          {"last_overflow_iter", -1.0},
          {"scale_factor", 2.0},
          {"scale_window", 2000.0}};
}

}  // namespace

TEST_CASE("dynamic scaling grows up to Apex's max_loss_scale of 2^24 and no further",
          "[amp][initialize][max_loss_scale]") {
  for (const char* level : {"O1", "O2"}) {
    INFO("opt level " << level);
    auto model = small_model(23);
    optim::SGD opt(model->parameters(), {.lr = 0.01});
    auto handle = amp::initialize(*model, opt, level);
    CHECK(handle.properties().max_loss_scale == 0x1p24);
    CHECK(handle.loss_scale() == 0x1p16);
    // 2^23 grows to 2^24 after the 2000th clean step ...
    handle.load_state_dict(before_growth(0x1p23, 1999));
    clean_step(handle, *model);
    CHECK(handle.loss_scale() == 0x1p24);
    // ... and 2^24 stays 2^24 where Apex's fp16_utils scaler (and GradScaler) would double it.
    handle.load_state_dict(before_growth(0x1p24, 3999));
    clean_step(handle, *model);
    CHECK(handle.loss_scale() == 0x1p24);
    CHECK(handle.state_dict().at("cur_iter") == 4000.0);
  }
}

TEST_CASE("a custom max_loss_scale is the ceiling and caps the initial scale",
          "[amp][initialize][max_loss_scale]") {
  for (const char* level : {"O1", "O2", "O3"}) {
    INFO("opt level " << level);
    auto model = small_model(29);
    optim::SGD opt(model->parameters(), {.lr = 0.01});
    auto handle = amp::initialize(
        *model, opt, level, {.loss_scale = amp::LossScale::dynamic(), .max_loss_scale = 0x1p17});
    CHECK(handle.loss_scale() == 0x1p16);
    handle.load_state_dict(before_growth(0x1p16, 1999));
    clean_step(handle, *model);
    CHECK(handle.loss_scale() == 0x1p17);
    handle.load_state_dict(before_growth(0x1p17, 3999));
    clean_step(handle, *model);
    CHECK(handle.loss_scale() == 0x1p17);
  }
  // Below 2^16 the scale starts at the ceiling, as Apex's min(2^16, max_loss_scale).
  auto model = small_model(31);
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  auto handle = amp::initialize(*model, opt, "O1", {.max_loss_scale = 1024.0});
  CHECK(handle.loss_scale() == 1024.0);
  handle.load_state_dict(before_growth(1024.0, 1999));
  clean_step(handle, *model);
  CHECK(handle.loss_scale() == 1024.0);
}

TEST_CASE("max_loss_scale must be positive", "[amp][initialize][max_loss_scale][errors]") {
  CHECK_THROWS_WITH(amp::resolve_opt_level(amp::OptLevel::O1, {.max_loss_scale = 0.0}),
                    Contains("expected max_loss_scale > 0, got 0"));
  CHECK_THROWS_WITH(
      amp::resolve_opt_level(amp::OptLevel::O2,
                             {.max_loss_scale = std::numeric_limits<double>::quiet_NaN()}),
      Contains("expected max_loss_scale > 0, got nan"));
}

TEST_CASE("O1's handle is an autocast region: it restores the state it replaced as the guard does",
          "[amp][initialize][autocast]") {
  auto model = small_model(37);
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  {
    amp::Autocast outer(kCPU, kBFloat16);
    {
      auto handle = amp::initialize(*model, opt, "O1");
      CHECK(amp::is_autocast_enabled(kCPU));
      CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
      // Changed inside the region, put back when it ends (amp::Autocast's rule).
      amp::set_autocast_cache_enabled(false);
      amp::set_autocast_dtype(kCPU, kBFloat16);
    }
    CHECK(amp::is_autocast_enabled(kCPU));
    CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
    CHECK(amp::is_autocast_cache_enabled());
    // The outer region is still open: its casts of the weights are cached.
    (void)(*model)(randn({2, 4}));
    CHECK(amp::weight_cast_cache_size() > 0);
  }
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  CHECK(amp::weight_cast_cache_size() == 0);
}

// amp::initialize's handle in checkpoints (io::NamedState, NOTE [Checkpoint state protocol]): an
// Apex-style run stopped, saved, and resumed in a fresh model, optimizer and handle continues
// bit for bit as the run never stopped, at O1 (the dynamic scaler's state) and O2 (the scaler and
// the float32 masters, which neither the 16-bit model nor the optimizer's state holds); a state
// that does not fit the handle is refused before anything changes.

namespace {

// A model, its Adam (whose moments and step counts the checkpoint carries) and the handle.
struct ApexRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<amp::AmpHandle> handle;

  ApexRun(uint64_t seed, const char* opt_level) : model(small_model(seed)) {
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-2});
    handle = std::make_unique<amp::AmpHandle>(
        *model, *opt, amp::resolve_opt_level(amp::opt_level_from_string(opt_level)));
  }

  // Step `step` on data drawn from the default generator. The loss is 2^-8 of the mse, so its
  // gradients times 2^16 stay within float16; step 3 overflows (the step is skipped and the
  // scale backs off, so the scaler's state is not its initial one).
  void step(int step) {
    const Tensor x = randn({6, 4}), y = randn({6, 3});
    handle->zero_grad();
    Tensor loss = nn::functional::mse_loss((*model)(x), y) * 0x1p-8;
    if (step == 3) loss = loss * std::numeric_limits<float>::infinity();
    handle->backward(loss);
    CHECK(handle->step() == (step != 3));
  }
};

void check_same_run(const ApexRun& a, const ApexRun& b) {
  const nn::StateDict sa = a.model->state_dict(), sb = b.model->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [key, tensor] : sa) {
    INFO("model key " << key);
    CHECK(bit_identical(tensor, sb.at(key)));
  }
  // The optimizer's parameters: the masters at O2, the model's own at O1.
  const std::vector<Tensor>& pa = a.opt->param_groups()[0].params;
  const std::vector<Tensor>& pb = b.opt->param_groups()[0].params;
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO("optimizer param " << i);
    CHECK(pa[i].dtype() == kFloat32);
    CHECK(bit_identical(pa[i], pb[i]));
  }
  CHECK(a.handle->state_dict() == b.handle->state_dict());
}

}  // namespace

TEST_CASE("an AmpHandle run resumed from a checkpoint continues bit-identically",
          "[amp][initialize][checkpoint]") {
  const int stop = 5, total = 9;
  for (const char* level : {"O1", "O2"}) {
    INFO("opt level " << level);
    manual_seed(100);
    ApexRun straight(7, level);
    for (int i = 0; i < total; ++i) straight.step(i);
    // The overflow backed the scale off once; the run did not stand still.
    CHECK(straight.handle->loss_scale() == 32768.0);

    TempFolder folder;
    const std::string path = folder.file("apex.safetensors");
    manual_seed(100);
    {
      ApexRun first(7, level);
      for (int i = 0; i < stop; ++i) first.step(i);
      io::save_checkpoint(path, *first.model, *first.opt, {{"amp", first.handle.get()}});
    }
    // Another seed: everything the resumed run uses must come from the file.
    ApexRun resumed(8, level);
    io::load_checkpoint(path, *resumed.model, *resumed.opt, {{"amp", resumed.handle.get()}});
    for (int i = stop; i < total; ++i) resumed.step(i);
    check_same_run(straight, resumed);
  }
}

TEST_CASE("O2's float32 masters travel in the AmpHandle's state, not rounded to the model's",
          "[amp][initialize][checkpoint]") {
  manual_seed(4);
  ApexRun run(3, "O2");
  for (int i = 0; i < 2; ++i) run.step(i);
  const amp::AmpHandleState state = run.handle->checkpoint_state();
  REQUIRE(state.master_weights.size() == 1);
  // The two Linears' weights and biases are float16 in the model (LayerNorm stays float32 and
  // is its own master).
  REQUIRE(state.master_weights[0].size() == 4);
  // The layout alone, as a checkpoint's load reads it, without the copies.
  CHECK(run.handle->master_weight_counts() == std::vector<size_t>{4});
  const std::vector<Tensor>& masters = run.opt->param_groups()[0].params;
  bool some_master_finer_than_float16 = false;
  for (const Tensor& saved : state.master_weights[0]) {
    CHECK(saved.dtype() == kFloat32);
    some_master_finer_than_float16 =
        some_master_finer_than_float16 || !bit_identical(saved, saved.to(kFloat16).to(kFloat32));
  }
  // Adam's updates of 1e-2 leave the masters off float16's grid: the model alone would lose them.
  CHECK(some_master_finer_than_float16);
  CHECK(bit_identical(state.master_weights[0][0], masters[0]));
  CHECK(state.loss_scaler == run.handle->state_dict());
  CHECK(state.opt_level == amp::OptLevel::O2);
}

TEST_CASE("an AmpHandle refuses a state that does not fit it, changing nothing",
          "[amp][initialize][checkpoint][errors]") {
  TempFolder folder;
  const std::string path = folder.file("o1.safetensors");
  {
    manual_seed(6);
    ApexRun o1(1, "O1");
    o1.step(0);
    io::save_checkpoint(path, *o1.model, *o1.opt, {{"amp", o1.handle.get()}});
  }
  {
    // Another opt level over the same float32 model: named, before the model, the optimizer or
    // the handle change.
    ApexRun o0(2, "O0");
    const std::map<std::string, double> before = o0.handle->state_dict();
    const Tensor weight_before = o0.model->parameters()[0].detach().clone();
    CHECK_THROWS_WITH(io::load_checkpoint(path, *o0.model, *o0.opt, {{"amp", o0.handle.get()}}),
                      Contains("state \"amp\" (AmpHandle)") &&
                          Contains("expected the state of an O0 handle, got one saved at O1"));
    CHECK(o0.handle->state_dict() == before);
    CHECK(bit_identical(o0.model->parameters()[0], weight_before));
  }

  // Directly: masters of another shape, and a static scaler's state for a dynamic handle.
  manual_seed(6);
  ApexRun o2(1, "O2");
  o2.step(0);
  const std::map<std::string, double> before = o2.handle->state_dict();
  amp::AmpHandleState state = o2.handle->checkpoint_state();
  state.master_weights[0][0] = zeros({2, 2});
  CHECK_THROWS_WITH(o2.handle->check_checkpoint_state(state),
                    Contains("expected master 0 of group 0 of shape"));
  CHECK_THROWS_WITH(o2.handle->load_checkpoint_state(state),
                    Contains("expected master 0 of group 0 of shape"));
  state = o2.handle->checkpoint_state();
  state.loss_scaler = {{"cur_scale", 8.0}, {"cur_iter", 1.0}};
  CHECK_THROWS_WITH(o2.handle->load_checkpoint_state(state), Contains("last_overflow_iter"));
  CHECK(o2.handle->state_dict() == before);
}
