// The record of a process's GEMM and conv2d path choices (cpu/kernel_choices.h, NOTE [Kernel
// choices across processes]): what it holds, that restoring it makes the recorded paths the
// ones that run (not measured again), and what it refuses or leaves alone.
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/cpu/kernel_choices.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/onednn.h"
#include "halfgrad/cpu/onednn_conv.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Matchers::Contains;
using cpu::GemmPath;

namespace {

void clear_all() {
  cpu::detail::clear_gemm_choices();
  cpu::detail::clear_conv_choices();
}

// One bfloat16 product of a 48 x 40 x 56 class; returns its output.
Tensor product(const Tensor& a, const Tensor& b) {
  const Tensor out = empty({1, 48, 56}, kBFloat16);
  cpu::linalg_kernels.gemm(a, b, out, 1.0, 0.0);
  return out;
}

// The record with every GEMM path named `from` replaced by `to` (conv2d's paths have other
// names).
std::string with_gemm_path(std::string record, GemmPath from, GemmPath to) {
  const std::string old_text = "\"path\":\"" + std::string(cpu::gemm_path_name(from)) + "\"";
  const std::string new_text = "\"path\":\"" + std::string(cpu::gemm_path_name(to)) + "\"";
  size_t at = record.find(old_text);
  REQUIRE(at != std::string::npos);
  for (; at != std::string::npos; at = record.find(old_text, at + new_text.size())) {
    record.replace(at, old_text.size(), new_text);
  }
  return record;
}

}  // namespace

TEST_CASE("a record of the kernel choices holds the measured classes and this machine",
          "[gemm][kernel_choices]") {
  clear_all();
  manual_seed(3);
  product(randn({1, 48, 40}, kBFloat16), randn({1, 40, 56}, kBFloat16));
  const std::string record = cpu::save_kernel_choices();
  CHECK_THAT(record, Contains("\"machine\":\"" + cpu::kernel_machine() + "\""));
  CHECK_THAT(record, Contains("\"class\":\"B 1, M <= 64, N <= 64, K <= 64\""));
  const GemmPath chosen = cpu::gemm_choices().back().path;
  CHECK_THAT(record, Contains("\"path\":\"" + std::string(cpu::gemm_path_name(chosen)) + "\""));
  // The machine names the CPU and the builds whose paths it times.
  CHECK_THAT(cpu::kernel_machine(), Contains("family") && Contains("oneDNN") &&
                                        Contains(std::string("halfgrad ") + HALFGRAD_VERSION));
  // Set paths are not measured, and not recorded.
  clear_all();
  cpu::set_gemm_path(kBFloat16, GemmPath::Tiles);
  product(randn({1, 48, 40}, kBFloat16), randn({1, 40, 56}, kBFloat16));
  cpu::set_gemm_path(kBFloat16, GemmPath::Auto);
  CHECK_THAT(cpu::save_kernel_choices(), Contains("\"gemm\":[]"));
}

TEST_CASE("restored kernel choices run in place of a new measurement", "[gemm][kernel_choices]") {
  clear_all();
  manual_seed(4);
  const Tensor a = randn({1, 48, 40}, kBFloat16), b = randn({1, 40, 56}, kBFloat16);
  product(a, b);
  const GemmPath measured = cpu::gemm_choices().back().path;
  // A record that names another path than the one measured here: the restored process must
  // run that path, which it would not have chosen itself.
  const std::vector<GemmPath> paths = cpu::gemm_paths(kBFloat16);
  REQUIRE(paths.size() >= 2);
  const GemmPath other = paths[0] == measured ? paths[1] : paths[0];
  const std::string record = with_gemm_path(cpu::save_kernel_choices(), measured, other);

  clear_all();
  const cpu::RestoredKernelChoices restored = cpu::restore_kernel_choices(record);
  CHECK(restored.skipped.empty());
  CHECK(restored.gemm == 1);
  std::vector<cpu::GemmChoice> choices = cpu::gemm_choices();
  REQUIRE(choices.size() == 1);
  CHECK(choices[0].path == other);
  CHECK(choices[0].restored);
  CHECK_FALSE(choices[0].measured);
  CHECK(choices[0].threads == omp_get_max_threads());
  CHECK(choices[0].calls == 0);
  CHECK_THAT(cpu::describe(choices[0]), Contains("(restored)"));
  // The product runs on the restored path, with its bits, and measures nothing.
  const Tensor out = product(a, b);
  const Tensor on_path = empty({1, 48, 56}, kBFloat16);
  cpu::gemm_on(other, a, b, on_path);
  CHECK(std::memcmp(out.data_ptr(), on_path.data_ptr(), out.nbytes()) == 0);
  choices = cpu::gemm_choices();
  REQUIRE(choices.size() == 1);
  CHECK(choices[0].calls == 1);
  CHECK_FALSE(choices[0].measured);
  // Restoring replaces a choice this process made for the same class; the record of a
  // restored choice holds it again.
  clear_all();
  product(a, b);
  CHECK(cpu::restore_kernel_choices(record).gemm == 1);
  REQUIRE(cpu::gemm_choices().size() == 1);
  CHECK(cpu::gemm_choices()[0].path == other);
  CHECK(cpu::save_kernel_choices() == record);
  clear_all();
}

TEST_CASE("conv2d choices travel in the record too", "[conv2d][kernel_choices]") {
  if (!cpu::onednn_enabled()) return;  // conv2d chooses between paths only with oneDNN
  cpu::set_conv_path(cpu::ConvPath::Auto);
  clear_all();
  manual_seed(5);
  const Tensor x = randn({2, 3, 9, 9}), w = randn({4, 3, 3, 3});
  const kernel::Conv2dParams p{.padding = {1, 1}};
  cpu::conv_kernels.conv2d(x, w, Tensor(), p);
  std::vector<cpu::ConvChoice> before = cpu::conv_choices();
  REQUIRE(before.size() == 1);
  REQUIRE(before[0].measured);
  const std::string record = cpu::save_kernel_choices();
  clear_all();
  CHECK(cpu::restore_kernel_choices(record).conv == 1);
  std::vector<cpu::ConvChoice> after = cpu::conv_choices();
  REQUIRE(after.size() == 1);
  CHECK(after[0].restored);
  CHECK(after[0].path == before[0].path);
  CHECK(after[0].direction == cpu::ConvDirection::Forward);
  CHECK(after[0].shape_class == before[0].shape_class);
  cpu::conv_kernels.conv2d(x, w, Tensor(), p);
  after = cpu::conv_choices();
  REQUIRE(after.size() == 1);
  CHECK(after[0].calls == 1);
  CHECK_FALSE(after[0].measured);
  // A set path wins over the record.
  clear_all();
  cpu::set_conv_path(cpu::ConvPath::Im2col);
  CHECK(cpu::restore_kernel_choices(record).conv == 0);
  CHECK(cpu::conv_choices().empty());
  cpu::set_conv_path(cpu::ConvPath::Auto);
  clear_all();
}

TEST_CASE("a record from another machine or with set paths changes nothing",
          "[gemm][kernel_choices]") {
  clear_all();
  manual_seed(6);
  product(randn({1, 48, 40}, kBFloat16), randn({1, 40, 56}, kBFloat16));
  std::string record = cpu::save_kernel_choices();
  clear_all();
  // Another machine: nothing taken, and the reason names both.
  std::string elsewhere = record;
  const std::string machine = cpu::kernel_machine();
  elsewhere.replace(elsewhere.find(machine), machine.size(), "another CPU");
  const cpu::RestoredKernelChoices skipped = cpu::restore_kernel_choices(elsewhere);
  CHECK(skipped.gemm == 0);
  CHECK(skipped.conv == 0);
  CHECK_THAT(skipped.skipped, Contains("made on another CPU") && Contains(machine));
  CHECK(cpu::gemm_choices().empty());
  // A dtype whose path is set keeps it.
  cpu::set_gemm_path(kBFloat16, GemmPath::Tiles);
  CHECK(cpu::restore_kernel_choices(record).gemm == 0);
  CHECK(cpu::gemm_choices().empty());
  cpu::set_gemm_path(kBFloat16, GemmPath::Auto);
  // A path this build does not know is left out, the rest taken.
  std::string unknown = record;
  const size_t path = unknown.find("\"path\":\"");
  REQUIRE(path != std::string::npos);
  unknown.insert(path + 8, "warp");
  CHECK(cpu::restore_kernel_choices(unknown).gemm == 0);
  CHECK(cpu::gemm_choices().empty());
  clear_all();
}

TEST_CASE("a malformed record of kernel choices is refused", "[kernel_choices][errors]") {
  clear_all();
  CHECK_THROWS_WITH(cpu::check_kernel_choices("{\"machine\""),
                    Contains("expected a JSON object") && Contains("not JSON"));
  CHECK_THROWS_WITH(cpu::restore_kernel_choices("{\"machine\": \"x\", \"gemm\": []}"),
                    Contains("\"conv\"") && Contains("got {\"gemm\":[],\"machine\":\"x\"}"));
  CHECK_THROWS_WITH(
      cpu::check_kernel_choices(
          "{\"machine\": \"x\", \"gemm\": [{\"key\": \"one\", \"path\": \"native\", "
          "\"class\": \"\"}], \"conv\": []}"),
      Contains("a choice is not one"));
  CHECK(cpu::gemm_choices().empty());
}
