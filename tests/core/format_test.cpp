// Printing follows PyTorch's layout: one number style for all shown elements, aligned
// columns, the middle of long dims elided past 1000 elements; halfgrad adds shape and dtype.
#include <catch2/catch.hpp>

#include <sstream>

#include "halfgrad/halfgrad.h"

using namespace hg;

TEST_CASE("dtype device and shape format as text", "[format]") {
  CHECK(fmt::format("{}", kBFloat16) == "bfloat16");
  CHECK(fmt::format("{}", Device(kCUDA, 1)) == "cuda:1");
  CHECK(fmt::format("{}", Device(kCPU)) == "cpu");
  CHECK(fmt::format("{}", Shape{2, 3}) == "[2, 3]");
  CHECK(fmt::format("{}", Shape{}) == "[]");
  CHECK(fmt::format("{:.3f}", Half(0.1f)) == "0.100");
  CHECK(fmt::format("{}", BFloat16(1.5f)) == "1.5");
  std::ostringstream out;
  out << kFloat16 << " " << Device(kCPU) << " " << Shape{4};
  CHECK(out.str() == "float16 cpu [4]");
}

TEST_CASE("Device parses the strings PyTorch uses", "[format]") {
  CHECK(Device::parse("cpu") == Device(kCPU));
  CHECK(Device::parse("cuda") == Device(kCUDA, 0));
  CHECK(Device::parse("cuda:3") == Device(kCUDA, 3));
  CHECK_THROWS_WITH(
      Device::parse("gpu"),
      Catch::Contains("expected a device like \"cpu\", \"cuda\" or \"cuda:1\", got \"gpu\""));
  CHECK_THROWS_AS(Device::parse("cuda:x"), hg::Error);
}

TEST_CASE("tensors print in PyTorch's layout with shape and dtype", "[format]") {
  CHECK(fmt::format("{}", arange(6.0).reshape({2, 3})) ==
        "tensor([[0., 1., 2.],\n"
        "        [3., 4., 5.]], shape=[2, 3], dtype=float32)");
  CHECK(fmt::format("{}", tensor({0.5, -1.25}, kFloat16)) ==
        "tensor([ 0.5000, -1.2500], shape=[2], dtype=float16)");
  CHECK(fmt::format("{}", tensor({1e-5, 1.0})) ==
        "tensor([1.0000e-05, 1.0000e+00], shape=[2], dtype=float32)");
  CHECK(fmt::format("{}", tensor({NAN, INFINITY, -INFINITY, 1.5})) ==
        "tensor([   nan,    inf,   -inf, 1.5000], shape=[4], dtype=float32)");
  CHECK(fmt::format("{}", scalar_tensor(2.5)) == "tensor(2.5000, dtype=float32)");
  CHECK(fmt::format("{}", arange(3)) == "tensor([0, 1, 2], shape=[3], dtype=int64)");
  CHECK(fmt::format("{}", tensor(std::vector<bool>{true, false})) ==
        "tensor([ True, False], shape=[2], dtype=bool)");
  CHECK(fmt::format("{}", zeros({0, 3})) == "tensor([], shape=[0, 3], dtype=float32)");
  CHECK(fmt::format("{}", Tensor()) == "tensor(undefined)");
  CHECK(fmt::format("{}", arange(8.0).reshape({2, 2, 2})) ==
        "tensor([[[0., 1.],\n"
        "         [2., 3.]],\n"
        "\n"
        "        [[4., 5.],\n"
        "         [6., 7.]]], shape=[2, 2, 2], dtype=float32)");
}

TEST_CASE("large tensors are summarised", "[format]") {
  const std::string text = fmt::format("{}", arange(2000).reshape({40, 50}));
  CHECK(text.rfind("tensor([[   0,    1,    2, ...,   47,   48,   49],\n", 0) == 0);
  CHECK(text.find("        ...,\n") != std::string::npos);
  CHECK(text.find("[1950, 1951, 1952, ..., 1997, 1998, 1999]], shape=[40, 50], dtype=int64)") !=
        std::string::npos);
  // Short rows wrap at 80 columns instead of summarising.
  const std::string wrapped = fmt::format("{}", arange(0.0, 30.0, 0.7));
  for (size_t start = 0, end; start < wrapped.size(); start = end + 1) {
    end = wrapped.find('\n', start);
    if (end == std::string::npos) end = wrapped.size();
    if (wrapped.find("shape=", start) < end) break;  // the last line carries the suffix
    CHECK(end - start <= 80);
  }
}
