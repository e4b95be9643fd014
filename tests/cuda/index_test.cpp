// CUDA indexing kernels (cuda::index_kernels, kernel/index.h), embedding_backward and dropout
// (kernel/embedding.h, kernel/dropout.h), through the public ops: forward and backward against
// the ops on float64 CPU copies of the same inputs, in float32, float16 and bfloat16, with
// duplicate indices and non-contiguous inputs; the accumulating kernels bit for bit against the
// CPU kernels (the same sums in the same order, NOTE [Sorted accumulation on CUDA]); dropout's
// mask bit for bit the CPU's for the same generator state; bad indices reported at the next
// synchronize, naming the op; shape errors worded as the CPU kernels word them.
#include <catch2/catch.hpp>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

const std::vector<DType> kFloating = {kFloat32, kFloat16, kBFloat16};

// n indices in [0, bound) from a fixed seed: with n > bound, duplicates for sure.
Tensor random_indices(int64_t n, int64_t bound, const Shape& shape, DType dtype = kInt64,
                      unsigned seed = 7) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int64_t> pick(0, bound - 1);
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t& v : values) v = pick(engine);
  return tensor(values, shape, dtype);
}
Tensor random_indices(int64_t n, int64_t bound) { return random_indices(n, bound, {n}); }

// f on CUDA copies of the (rounded) floating inputs against f on float64 CPU copies: the
// forward, then the gradient of every input for one upstream gradient. f gets the device to
// put its other tensors (indices) on.
using OpOnDevice = std::function<Tensor(const std::vector<Tensor>&, Device)>;
void check_forward_backward(const OpOnDevice& f, const std::vector<Tensor>& cpu_inputs,
                            DType dtype) {
  testing::check_forward_backward(
      [&](const std::vector<Tensor>& in, bool reference) {
        return f(in, reference ? Device(kCPU) : kGpu);
      },
      cpu_inputs, dtype, [&](const Shape& shape) { return normal(shape, dtype); });
}

// The part of an error message after "op: " (the CPU and CUDA kernels may differ in where
// the message says it was raised, not in what it says).
std::string what_it_says(const std::string& message, const std::string& op) {
  const size_t at = message.find(op + ": ");
  return at == std::string::npos ? message : message.substr(at);
}

}  // namespace

// ---- cat, stack ----------------------------------------------------------------------------

TEST_CASE("cuda cat and stack match the CPU, contiguous or not, forward and backward", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(1);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    const Tensor a = normal({3, 4, 5}, dtype), b = normal({3, 2, 5}, dtype);
    const Tensor c = normal({5, 6, 3}, dtype);  // transposed to [3, 6, 5]: not contiguous
    for (int64_t dim : {1, -2}) {
      check_forward_backward(
          [&](const std::vector<Tensor>& x, Device) {
            return cat({x[0], x[1], x[2].transpose(0, 2)}, dim);
          },
          {a, b, c}, dtype);
    }
    // Every dim, against the CPU bit for bit (pure data movement).
    const Tensor p = normal({2, 3, 4}, dtype), q = normal({2, 3, 4}, dtype);
    const Tensor r = normal({3, 2, 4}, dtype);  // transposed to [2, 3, 4]: not contiguous
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      require_same_bits(cat({to_cuda(p), to_cuda(q)}, dim), cat({p, q}, dim));
      require_same_bits(stack({to_cuda(p), to_cuda(r).transpose(0, 1)}, dim),
                        stack({p, r.transpose(0, 1)}, dim));
    }
    require_same_bits(stack({to_cuda(p), to_cuda(q)}, 3), stack({p, q}, 3));
    check_forward_backward(
        [](const std::vector<Tensor>& x, Device) {
          return stack({x[0].transpose(0, 1), x[1]}, 1);
        },
        {normal({4, 3}, dtype), normal({3, 4}, dtype)}, dtype);
  }
  // Integer tensors, the legacy [0] skip, and odd row widths (no 16-byte words).
  const Tensor i = random_indices(21, 50, {3, 7}), j = random_indices(6, 50, {3, 2}, kInt64, 9);
  require_same_bits(cat({to_cuda(i), to_cuda(empty({0}, kInt64)), to_cuda(j)}, 1),
                    cat({i, empty({0}, kInt64), j}, 1));
  const Tensor h = normal({3, 3}, kFloat16), g = normal({3, 1}, kFloat16);
  require_same_bits(cat({to_cuda(h), to_cuda(g)}, 1), cat({h, g}, 1));
}

TEST_CASE("cuda cat and stack reject what the CPU kernels reject, with their words", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor a = normal({2, 3}, kFloat32), b = normal({3, 3}, kFloat32);
  const std::string cpu = error_of([&] { cpu::index_kernels.cat(std::vector<Tensor>{a, b}, 1); });
  const std::string gpu = error_of([&] {
    cuda::index_kernels.cat(std::vector<Tensor>{to_cuda(a), to_cuda(b)}, 1);
  });
  REQUIRE_FALSE(gpu.empty());
  CHECK(what_it_says(gpu, "cat") == what_it_says(cpu, "cat"));
  const std::string stack_error = error_of([&] {
    cuda::index_kernels.stack(std::vector<Tensor>{to_cuda(a), to_cuda(b)}, 0);
  });
  CHECK_THAT(stack_error, Contains("stack") && Contains("[3, 3]"));
}

// ---- gather, scatter_add -------------------------------------------------------------------

TEST_CASE("cuda gather and scatter_add match float64, with duplicates and strides", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(2);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    // x [4, 6, 5] (made non-contiguous by a transpose), index [4, 9, 3] along dim 1: every row
    // picks 9 of 6 positions, so positions repeat and gather's backward adds duplicates.
    const Tensor index = random_indices(4 * 9 * 3, 6, {4, 9, 3});
    check_forward_backward(
        [&](const std::vector<Tensor>& x, Device device) {
          return gather(x[0].transpose(1, 2).transpose(1, 2), 1, index.to(device));
        },
        {normal({4, 6, 5}, dtype)}, dtype);
    check_forward_backward(
        [&](const std::vector<Tensor>& x, Device device) {
          return gather(x[0].transpose(0, 2), 1, index.to(device));
        },
        {normal({5, 6, 4}, dtype)}, dtype);
    // scatter_add: self [4, 6, 5], src [4, 9, 4] (larger than the index at dim 2).
    const Tensor src_index = random_indices(4 * 9 * 3, 6, {4, 9, 3}, kInt64, 11);
    check_forward_backward(
        [&](const std::vector<Tensor>& x, Device device) {
          return scatter_add(x[0], 1, src_index.to(device), x[1]);
        },
        {normal({4, 6, 5}, dtype), normal({4, 9, 4}, dtype)}, dtype);
    // Along the last and the first dim, src non-contiguous.
    const Tensor last = random_indices(3 * 12, 4, {3, 12}, kInt64, 12);
    check_forward_backward(
        [&](const std::vector<Tensor>& x, Device device) {
          return scatter_add(x[0], 1, last.to(device), x[1].t());
        },
        {normal({3, 4}, dtype), normal({12, 3}, dtype)}, dtype);
    const Tensor first = random_indices(40, 3, {20, 2}, kInt64, 13);
    check_forward_backward(
        [&](const std::vector<Tensor>& x, Device device) {
          return scatter_add(x[0], 0, first.to(device), x[1]);
        },
        {normal({3, 2}, dtype), normal({20, 2}, dtype)}, dtype);
  }
}

TEST_CASE("cuda scatter_add sums duplicates as the CPU kernel does, bit for bit", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(3);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    const Tensor self = normal({5, 8}, dtype), src = normal({5, 300}, dtype);
    const Tensor index = random_indices(5 * 300, 8, {5, 300});
    const Tensor want = cpu::index_kernels.scatter_add(self, 1, index, src);
    const Tensor got =
        cuda::index_kernels.scatter_add(to_cuda(self), 1, to_cuda(index), to_cuda(src));
    require_same_bits(got, want);
    // The same again: no atomics, no order that depends on the run.
    require_same_bits(
        cuda::index_kernels.scatter_add(to_cuda(self), 1, to_cuda(index), to_cuda(src)), got);
  }
}

// ---- index_select, index_add ---------------------------------------------------------------

TEST_CASE("cuda index_select and index_add match float64, with duplicates and strides", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(4);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    for (DType index_dtype : {kInt64, kInt32}) {
      CAPTURE(index_dtype);
      const Tensor rows = random_indices(11, 6, {11}, index_dtype);
      for (int64_t dim : {0, 1, 2}) {
        CAPTURE(dim);
        // Contiguous x: whole rows copied; its backward is index_add with duplicates.
        check_forward_backward(
            [&](const std::vector<Tensor>& x, Device device) {
              return index_select(x[0], dim, rows.to(device));
            },
            {normal({6, 6, 6}, dtype)}, dtype);
        // Non-contiguous x: the strided gather.
        check_forward_backward(
            [&](const std::vector<Tensor>& x, Device device) {
              return index_select(x[0].transpose(0, 2), dim, rows.to(device));
            },
            {normal({6, 6, 6}, dtype)}, dtype);
      }
      // index_add with alpha, source non-contiguous.
      check_forward_backward(
          [&](const std::vector<Tensor>& x, Device device) {
            return index_add(x[0], 1, rows.to(device), x[1].transpose(0, 1), 0.5);
          },
          {normal({3, 6, 2}, dtype), normal({11, 3, 2}, dtype)}, dtype);
    }
    // A 0-d index and a 0-d input.
    const Tensor x = normal({5, 3}, dtype);
    const Tensor two = tensor(std::vector<int64_t>{2}, Shape{});
    require_same_bits(index_select(to_cuda(x), 0, to_cuda(two)), index_select(x, 0, two));
    const Tensor scalar = normal({}, dtype);
    const Tensor zero = tensor(std::vector<int64_t>{0}, Shape{});
    require_same_bits(index_select(to_cuda(scalar), 0, to_cuda(zero)),
                      index_select(scalar, 0, zero));
  }
}

TEST_CASE("cuda index_add and embedding_backward sum as the CPU kernels do, bit for bit",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(5);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    const Tensor self = normal({4, 10, 7}, dtype), source = normal({4, 500, 7}, dtype);
    const Tensor index = random_indices(500, 10);
    require_same_bits(
        cuda::index_kernels.index_add(to_cuda(self), 1, to_cuda(index), to_cuda(source)),
        cpu::index_kernels.index_add(self, 1, index, source));
    // embedding_backward: dy [2, 250, 16] from indices [2, 250] into 30 rows, row 3 padding.
    const Tensor dy = normal({2, 250, 16}, dtype);
    for (DType index_dtype : {kInt64, kInt32}) {
      const Tensor tokens = random_indices(500, 30, {2, 250}, index_dtype, 21);
      require_same_bits(
          cuda::embedding_kernels.embedding_backward(to_cuda(dy), to_cuda(tokens), 30, 3),
          cpu::embedding_kernels.embedding_backward(dy, tokens, 30, 3));
      require_same_bits(
          cuda::embedding_kernels.embedding_backward(to_cuda(dy), to_cuda(tokens), 30, -1),
          cpu::embedding_kernels.embedding_backward(dy, tokens, 30, -1));
    }
  }
}

TEST_CASE("cuda embedding's backward matches float64, padding rows get nothing", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(6);
  const Tensor tokens = random_indices(3 * 40, 12, {3, 40});
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    for (int64_t padding_idx : {-1, 0, 5}) {
      CAPTURE(padding_idx);
      check_forward_backward(
          [&](const std::vector<Tensor>& x, Device device) {
            return embedding(x[0], tokens.to(device), padding_idx);
          },
          {normal({12, 9}, dtype)}, dtype);
    }
    Tensor weight = to_cuda(normal({12, 9}, dtype));
    weight.requires_grad_();
    embedding(weight, to_cuda(tokens), 5).backward(to_cuda(normal({3, 40, 9}, dtype)));
    REQUIRE(host(weight.grad().select(0, 5)).to(kFloat64).to_vector<double>() ==
            std::vector<double>(9, 0.0));
    // Gradient rows that are not contiguous.
    const Tensor dy = normal({9, 3, 40}, dtype);
    require_same_bits(
        cuda::embedding_kernels.embedding_backward(to_cuda(dy).permute({1, 2, 0}), to_cuda(tokens),
                                                   12, -1),
        cpu::embedding_kernels.embedding_backward(dy.permute({1, 2, 0}), tokens, 12, -1));
  }
}

// ---- index_put -----------------------------------------------------------------------------

TEST_CASE("cuda index_put refuses more index tensors than its kernels take", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor self = to_cuda(zeros(Shape(9, 2)));
  std::vector<Tensor> indices(9, to_cuda(zeros({}, kInt64)));
  CHECK_THAT(error_of([&] { index_put(self, indices, to_cuda(ones({}))); }),
             Contains("index_put: expected at most 8 index tensors on CUDA, got 9"));
}

TEST_CASE("cuda index_put matches the CPU: last write wins, duplicates accumulate", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(8);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    const Tensor self = normal({6, 5, 3}, dtype);
    // Two index tensors broadcasting to [4, 10], negative values among them (they wrap).
    std::vector<int64_t> rows_values, cols_values;
    std::mt19937 engine(31);
    for (int k = 0; k < 40; ++k) rows_values.push_back(int64_t(engine() % 12) - 6);
    for (int k = 0; k < 10; ++k) cols_values.push_back(int64_t(engine() % 10) - 5);
    const Tensor rows = tensor(rows_values, {4, 10}), cols = tensor(cols_values, {1, 10}, kInt32);
    const Tensor values = normal({4, 10, 3}, dtype), broadcast = normal({3}, dtype);
    for (bool accumulate : {false, true}) {
      CAPTURE(accumulate);
      require_same_bits(
          index_put(to_cuda(self), {to_cuda(rows), to_cuda(cols)}, to_cuda(values), accumulate),
          index_put(self, {rows, cols}, values, accumulate));
      require_same_bits(
          index_put(to_cuda(self), {to_cuda(rows), to_cuda(cols)}, to_cuda(broadcast), accumulate),
          index_put(self, {rows, cols}, broadcast, accumulate));
      // One index tensor, self non-contiguous, gradients for self and values.
      const Tensor one = random_indices(9, 5, {9}, kInt64, 32);
      check_forward_backward(
          [&](const std::vector<Tensor>& x, Device device) {
            return index_put(x[0].transpose(0, 1), {one.to(device)}, x[1], accumulate);
          },
          {normal({6, 5, 3}, dtype), normal({9, 6, 3}, dtype)}, dtype);
    }
  }
}

// ---- one_hot -------------------------------------------------------------------------------

TEST_CASE("cuda one_hot matches the CPU, num_classes given or inferred", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const Tensor x = random_indices(24, 7, {4, 6});
  require_same_bits(one_hot(to_cuda(x), 9), one_hot(x, 9));
  require_same_bits(one_hot(to_cuda(x), -1), one_hot(x, -1));
  require_same_bits(one_hot(to_cuda(x).t(), -1), one_hot(x.t(), -1));
  require_same_bits(one_hot(to_cuda(tensor(std::vector<int64_t>{3}, Shape{})), 5),
                    one_hot(tensor(std::vector<int64_t>{3}, Shape{}), 5));
  CHECK_THAT(error_of([] { one_hot(to_cuda(empty({0}, kInt64)), -1); }),
             Contains("cannot infer num_classes"));
}

// ---- bad indices ---------------------------------------------------------------------------

TEST_CASE("cuda indices out of range raise at the next synchronize, naming the op", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Device cuda_device(kCUDA);
  const Tensor x = to_cuda(normal({4, 3}, kFloat32));
  const Tensor bad = tensor(std::vector<int64_t>{0, 7, 1}).to(cuda_device);
  const Tensor negative = tensor(std::vector<int64_t>{0, -1, 1}).to(cuda_device);
  struct Case {
    const char* op;
    std::function<void()> run;
  };
  const std::vector<Case> cases = {
      {"index_select", [&] { index_select(x, 0, bad); }},
      {"index_select", [&] { index_select(x, 0, negative); }},
      {"index_add",
       [&] {
         index_add(x, 0, bad, to_cuda(normal({3, 3}, kFloat32)));
       }},
      {"gather",
       [&] {
         gather(x, 0, bad.reshape({3, 1}));
       }},
      {"scatter_add",
       [&] {
         scatter_add(x, 0, bad.reshape({3, 1}), to_cuda(normal({3, 1}, kFloat32)));
       }},
      {"index_put", [&] { index_put(x, {bad}, to_cuda(normal({3}, kFloat32))); }},
      {"one_hot", [&] { one_hot(bad, 5); }},
      {"embedding backward",
       [&] {
         cuda::embedding_kernels.embedding_backward(to_cuda(normal({3, 2}, kFloat32)), bad, 4, -1);
       }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    c.run();  // enqueued: nothing waits, nothing throws yet
    const std::string message = error_of([] { cuda::synchronize(); });
    CHECK_THAT(message, Contains(c.op) && Contains("found on the device"));
    CHECK(error_of([] { cuda::synchronize(); }).empty());  // reported once, then cleared
  }
  // A bad index in a sorted accumulation skips its element: the rest is still summed.
  const Tensor self = zeros({4}, kFloat32).to(cuda_device);
  const Tensor out = index_add(self, 0, bad, to_cuda(tensor({1.0, 2.0, 4.0})));
  CHECK_THROWS_AS(cuda::synchronize(), Error);
  CHECK(host(out).to_vector<float>() == std::vector<float>{1, 4, 0, 0});
}

TEST_CASE("cuda index kernels reject bad shapes and dtypes as the CPU kernels do", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = normal({4, 3}, kFloat32);
  const Tensor index = random_indices(6, 3, {2, 3});
  const auto same_words = [](const std::string& cpu, const std::string& gpu, const char* op) {
    REQUIRE_FALSE(cpu.empty());
    REQUIRE_FALSE(gpu.empty());
    CHECK(what_it_says(gpu, op) == what_it_says(cpu, op));
  };
  same_words(error_of([&] { cpu::index_kernels.gather(x, 1, index.reshape({6})); }), error_of([&] {
               cuda::index_kernels.gather(to_cuda(x), 1, to_cuda(index.reshape({6})));
             }),
             "gather");
  same_words(error_of([&] { cpu::index_kernels.gather(x, 1, index.to(kInt32)); }), error_of([&] {
               cuda::index_kernels.gather(to_cuda(x), 1, to_cuda(index.to(kInt32)));
             }),
             "gather");
  same_words(error_of([&] { cpu::index_kernels.index_select(x, 0, index); }),
             error_of([&] { cuda::index_kernels.index_select(to_cuda(x), 0, to_cuda(index)); }),
             "index_select");
  same_words(error_of([&] {
               cpu::index_kernels.index_add(x, 0, index.reshape({6}), normal({5, 3}, kFloat32));
             }),
             error_of([&] {
               cuda::index_kernels.index_add(to_cuda(x), 0, to_cuda(index.reshape({6})),
                                             to_cuda(normal({5, 3}, kFloat32)));
             }),
             "index_add");
  same_words(error_of([&] {
               cpu::index_kernels.scatter_add(x, 0, index, normal({2, 3}, kFloat16));
             }),
             error_of([&] {
               cuda::index_kernels.scatter_add(to_cuda(x), 0, to_cuda(index),
                                               to_cuda(normal({2, 3}, kFloat16)));
             }),
             "scatter_add");
  same_words(error_of([&] {
               const std::vector<Tensor> indices = {index, index.reshape({3, 2})};
               cpu::index_kernels.index_put(x, indices, normal({1}, kFloat32), false);
             }),
             error_of([&] {
               const std::vector<Tensor> indices = {to_cuda(index), to_cuda(index.reshape({3, 2}))};
               cuda::index_kernels.index_put(to_cuda(x), indices, to_cuda(normal({1}, kFloat32)),
                                             false);
             }),
             "index_put");
  same_words(error_of([&] { cpu::index_kernels.one_hot(x, 3); }),
             error_of([&] { cuda::index_kernels.one_hot(to_cuda(x), 3); }), "one_hot");
  // Every class negative: num_classes cannot be inferred.
  same_words(error_of([&] {
               cpu::index_kernels.one_hot(tensor(std::vector<int64_t>{-2, -1}), -1);
             }),
             error_of([&] {
               cuda::index_kernels.one_hot(to_cuda(tensor(std::vector<int64_t>{-2, -1})), -1);
             }),
             "one_hot");
}

// ---- dropout -------------------------------------------------------------------------------

TEST_CASE("cuda dropout draws the CPU's mask from the same generator state", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(9);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    // 1001 elements: the last Philox block is partly used. The CUDA input is non-contiguous.
    const Tensor x = randn({13, 77}, kFloat32).to(dtype);
    for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      CAPTURE(p);
      Generator on_cpu(1234), on_cuda(1234);
      on_cpu.reserve(5);  // some earlier draw
      on_cuda.reserve(5);
      const kernel::DropoutForward want = cpu::dropout_kernels.dropout(x, p, on_cpu);
      const kernel::DropoutForward got =
          cuda::dropout_kernels.dropout(to_cuda(x.t().contiguous()).t(), p, on_cuda);
      require_same_bits(got.mask, want.mask);
      require_same_bits(got.out, want.out);
      CHECK(on_cuda.offset() == on_cpu.offset());  // p = 0 and 1 draw nothing
    }
  }
  // Through the op: the default generator, forward and backward (dy * mask).
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    const Tensor x = normal({64, 33}, dtype), dy = normal({64, 33}, dtype);
    Tensor on_cpu = x.clone(), on_gpu = to_cuda(x);
    on_cpu.requires_grad_();
    on_gpu.requires_grad_();
    manual_seed(77);
    Tensor want = dropout(on_cpu, 0.3);
    manual_seed(77);
    Tensor got = dropout(on_gpu, 0.3);
    require_same_bits(got, want);
    want.backward(dy);
    got.backward(to_cuda(dy));
    require_same_bits(on_gpu.grad(), on_cpu.grad());
  }
}
