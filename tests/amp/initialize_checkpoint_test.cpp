// amp::initialize's handle in checkpoints (io::NamedState, NOTE [Checkpoint state protocol]): an
// Apex-style run stopped, saved, and resumed in a fresh model, optimizer and handle continues
// bit for bit as the run never stopped, at O1 (the dynamic scaler's state) and O2 (the scaler and
// the float32 masters, which neither the 16-bit model nor the optimizer's state holds); a state
// that does not fit the handle is refused before anything changes.
#include <catch2/catch.hpp>

#include <limits>
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
