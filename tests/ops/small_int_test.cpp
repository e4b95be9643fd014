// uint8, int8 and int16 through the ops: arithmetic that wraps modulo 2^n, torch's promotion
// between them and with numbers, reductions into int64, sorting of bytes above 127, division
// and remainder by divisors whose bits look like -1, the errors torch gives, and safetensors.
// The expected values are the ones PyTorch prints for the same expressions.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

Tensor of(std::vector<int64_t> values, DType dtype) { return tensor(values).to(dtype); }

std::vector<int64_t> values(const Tensor& t) { return t.to(kInt64).to_vector<int64_t>(); }

using V = std::vector<int64_t>;

}  // namespace

TEST_CASE("arithmetic on uint8 int8 and int16 wraps modulo 2^n", "[ops][dtype]") {
  // torch.tensor([200, 3], dtype=torch.uint8) + torch.tensor([100, 5], dtype=torch.uint8)
  CHECK(values(of({200, 3}, kUInt8) + of({100, 5}, kUInt8)) == V{44, 8});
  CHECK(values(of({3, 0}, kUInt8) - of({5, 1}, kUInt8)) == V{254, 255});
  CHECK(values(of({100, -100}, kInt8) + of({100, -100}, kInt8)) == V{-56, 56});
  CHECK(values(of({300, -300}, kInt16) * of({300, 300}, kInt16)) == V{24464, -24464});
  CHECK(values(of({16, 255}, kUInt8) * of({16, 255}, kUInt8)) == V{0, 1});
  CHECK(values(neg(of({1, 0, 255}, kUInt8))) == V{255, 0, 1});
  CHECK(values(neg(of({-128, 5}, kInt8))) == V{-128, -5});
  CHECK(values(abs(of({-128, -5, 7}, kInt8))) == V{-128, 5, 7});
  CHECK(values(abs(of({200, 0}, kUInt8))) == V{200, 0});
  CHECK(values(sign(of({200, 0}, kUInt8))) == V{1, 0});
  CHECK(values(sign(of({-3, 0, 9}, kInt16))) == V{-1, 0, 1});
  CHECK(values(pow(of({3, 2}, kUInt8), of({5, 9}, kUInt8))) == V{243, 0});
  CHECK(values(pow(of({2, -2}, kInt8), 7)) == V{-128, -128});
  CHECK(values(square(of({20, 16}, kUInt8))) == V{144, 0});
  CHECK(values(clamp(of({5, 200, 90}, kUInt8), 10, 100)) == V{10, 100, 90});
  CHECK(values(maximum(of({5, 200}, kUInt8), of({6, 3}, kUInt8))) == V{6, 200});
  CHECK(values(relu(of({-5, 7}, kInt8))) == V{0, 7});
  for (DType dtype : {kUInt8, kInt8, kInt16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor sum = of({1, 2}, dtype) + of({3, 4}, dtype);
    CHECK(sum.dtype() == dtype);
    CHECK(values(sum) == V{4, 6});
  }
}

TEST_CASE("uint8 divisors above 127 are not taken for -1", "[ops][dtype]") {
  // The bits of 255 as int8 are -1: a kernel that tests for -1 in the wrong type negates.
  const Tensor a = of({10, 255, 254, 0}, kUInt8), b = of({255, 255, 255, 255}, kUInt8);
  CHECK(values(floor_divide(a, b)) == V{0, 1, 0, 0});
  CHECK(values(div(a, b, "trunc")) == V{0, 1, 0, 0});
  CHECK(values(remainder(a, b)) == V{10, 0, 254, 0});
  CHECK(values(fmod(a, b)) == V{10, 0, 254, 0});
  CHECK(values(floor_divide(of({200, 7}, kUInt8), 3)) == V{66, 2});
  // int8 with torch's signs: remainder takes the divisor's sign, fmod the dividend's.
  const Tensor x = of({-7, 7, -128}, kInt8), y = of({3, -3, -1}, kInt8);
  CHECK(values(remainder(x, y)) == V{2, -2, 0});
  CHECK(values(fmod(x, y)) == V{-1, 1, 0});
  CHECK(values(floor_divide(x, y)) == V{-3, -3, -128});  // -128 // -1 wraps, as torch
  CHECK_THROWS_WITH(floor_divide(x, 0), Contains("divisor of 0"));
}

TEST_CASE("the 8- and 16-bit integers promote as torch", "[ops][dtype]") {
  // Between tensors: uint8 with int8 meets at int16 (200 + -1 is 199, not a wrapped byte).
  const Tensor u = of({200, 1}, kUInt8), s = of({-1, -2}, kInt8);
  const Tensor mixed = u + s;
  CHECK(mixed.dtype() == kInt16);
  CHECK(values(mixed) == V{199, -1});
  CHECK((u + of({1, 0}, kBool)).dtype() == kUInt8);
  CHECK((s + of({1, 0}, kInt16)).dtype() == kInt16);
  CHECK((u + of({1, 0}, kInt32)).dtype() == kInt32);
  CHECK((u * tensor({0.5f, 2.0f})).dtype() == kFloat32);
  CHECK((s + tensor({1.0, 1.0}, kFloat16)).dtype() == kFloat16);
  // Comparisons in the promoted type: 200 (uint8) is above -1 (int8).
  CHECK(gt(u, s).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(eq(of({255}, kUInt8), of({-1}, kInt8)).item<bool>() == false);
  // A number of a higher category decides; an integer number keeps the tensor's dtype.
  const Tensor plus_one = u + 1;
  CHECK(plus_one.dtype() == kUInt8);
  CHECK(values(plus_one) == V{201, 2});
  CHECK(values(u - 1) == V{199, 0});
  CHECK(values(u + (-1)) == V{199, 0});  // -1 wraps to 255: the same bytes as x - 1
  const Tensor scaled = u * 0.5;
  CHECK(scaled.dtype() == kFloat32);
  CHECK(scaled.to_vector<double>() == std::vector<double>{100.0, 0.5});
  // True division and the float-only ops give float32.
  const Tensor quotient = div(of({7, 200}, kUInt8), of({2, 3}, kUInt8));
  CHECK(quotient.dtype() == kFloat32);
  CHECK(quotient.to_vector<float>() == std::vector<float>{3.5f, 200.0f / 3.0f});
  CHECK(exp(of({0}, kInt8)).dtype() == kFloat32);
  CHECK(sqrt(of({144}, kUInt8)).item<float>() == 12.0f);
  // A number outside the dtype is an error, as torch's "cannot be converted ... without
  // overflow"; the tensor is untouched.
  CHECK_THROWS_WITH(u + 300, Contains("300 cannot be converted to uint8"));
  CHECK_THROWS_WITH(s * 128, Contains("128 cannot be converted to int8"));
  CHECK(values(u) == V{200, 1});
}

TEST_CASE("reductions and scans of small integers accumulate in int64", "[ops][dtype]") {
  const Tensor bytes = of({200, 200, 100}, kUInt8);
  const Tensor total = sum(bytes);
  CHECK(total.dtype() == kInt64);
  CHECK(total.item<int64_t>() == 500);
  CHECK(values(cumsum(of({100, 100, -100}, kInt8), 0)) == V{100, 200, 100});
  CHECK(cumsum(bytes, 0).dtype() == kInt64);
  CHECK(values(prod(of({100, 100}, kInt16))) == V{10000});
  CHECK(prod(of({100, 100}, kInt16)).dtype() == kInt64);
  CHECK(amax(bytes).item<uint8_t>() == 200);
  CHECK(amax(bytes).dtype() == kUInt8);
  CHECK(amin(of({-5, 3, -128}, kInt8)).item<int8_t>() == -128);
  CHECK(argmax(of({3, 250, 7}, kUInt8)).item<int64_t>() == 1);
  CHECK(argmin(of({3, -2, 7}, kInt16)).item<int64_t>() == 1);
  CHECK(any(of({0, 0, 4}, kUInt8)).item<bool>());
  CHECK_FALSE(all(of({0, 3}, kInt8)).item<bool>());
  CHECK_THROWS_WITH(mean(bytes), Contains("uint8"));
}

TEST_CASE("sorting bytes above 127 and negative int8 keeps numeric order", "[ops][dtype]") {
  const Tensor bytes = of({200, 3, 130, 0, 127, 255}, kUInt8);
  auto [ascending, order] = sort(bytes);
  CHECK(values(ascending) == V{0, 3, 127, 130, 200, 255});
  CHECK(values(order) == V{3, 1, 4, 2, 0, 5});
  auto [descending, down] = sort(bytes, 0, true);
  CHECK(values(descending) == V{255, 200, 130, 127, 3, 0});
  CHECK(values(argsort(of({-1, 5, -128, 127, 0}, kInt8))) == V{2, 0, 4, 1, 3});
  CHECK(values(argsort(of({-300, 300, 0, -32768}, kInt16), 0, true)) == V{1, 2, 0, 3});
  auto [top, where] = topk(bytes, 2);
  CHECK(values(top) == V{255, 200});
  CHECK(values(where) == V{5, 0});
  CHECK(values(std::get<0>(median(bytes, 0))) == V{127});
}

TEST_CASE("small integers move through index, mask and shape ops unchanged", "[ops][dtype]") {
  const Tensor bytes = of({10, 250, 30, 140}, kUInt8);
  CHECK(values(index_select(bytes, 0, tensor(V{3, 1}))) == V{140, 250});
  CHECK(values(masked_fill(bytes, gt(bytes, 100), 255)) == V{10, 255, 30, 255});
  CHECK_THROWS_WITH(masked_fill(bytes, gt(bytes, 100), 256),
                    Contains("masked_fill: value 256 cannot be converted to uint8"));
  CHECK(values(where(gt(bytes, 100), bytes, of({0, 0, 0, 0}, kUInt8))) == V{0, 250, 0, 140});
  CHECK(values(cat({bytes, of({1}, kUInt8)})) == V{10, 250, 30, 140, 1});
  CHECK(values(flip(bytes, {0})) == V{140, 30, 250, 10});
  CHECK(values(masked_select(of({-1, 2, -3}, kInt8), lt(of({-1, 2, -3}, kInt8), 0))) == V{-1, -3});
  CHECK(values(bytes.reshape({2, 2}).t().contiguous().reshape({4})) == V{10, 30, 250, 140});
  CHECK(of({250}, kUInt8).item<uint8_t>() == 250);
  const Tensor pixels = tensor(std::vector<uint8_t>{0, 128, 255}, Shape{3});
  CHECK(pixels.dtype() == kUInt8);  // bytes keep their dtype, as torch.from_numpy of uint8
  CHECK(values(pixels) == V{0, 128, 255});
  CHECK(tensor(std::vector<int16_t>{-3, 4}).dtype() == kInt16);
  CHECK(of({-7}, kInt8).item<int8_t>() == -7);
  CHECK(of({-7}, kInt16).item<int16_t>() == -7);
  INFO(to_string(of({250, 3}, kUInt8)));
  CHECK(to_string(of({250, 3}, kUInt8)).find("250") != std::string::npos);
  CHECK(to_string(of({250, 3}, kUInt8)).find("dtype=uint8") != std::string::npos);
}

TEST_CASE("a float op refuses small integer gradients as it does other integers",
          "[ops][dtype][errors]") {
  CHECK_THROWS_WITH(of({1}, kUInt8).requires_grad_(), Contains("uint8"));
}

TEST_CASE("safetensors keeps U8 I8 and I16 as they are", "[ops][dtype][io]") {
  testing::TempFolder folder;
  const TensorMap tensors = {{"image", arange(256, kInt64).to(kUInt8).reshape({16, 16})},
                             {"delta", of({-128, 0, 127}, kInt8)},
                             {"audio", of({-32768, 12345, 32767}, kInt16)}};
  save(folder.file("small.safetensors"), tensors);
  const io::SafetensorsContents back = io::load_safetensors(folder.file("small.safetensors"));
  for (const auto& [name, t] : tensors) {
    INFO("key " << name);
    CHECK(testing::bit_identical(back.tensors.at(name), t));
  }
  const std::string bytes = io::to_safetensors_bytes(tensors, {});
  CHECK(bytes.find("\"dtype\":\"U8\"") != std::string::npos);
  CHECK(bytes.find("\"dtype\":\"I8\"") != std::string::npos);
  CHECK(bytes.find("\"dtype\":\"I16\"") != std::string::npos);
}
