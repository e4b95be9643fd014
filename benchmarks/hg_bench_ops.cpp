// hg-bench-ops: halfgrad's CPU ops against the library a user would otherwise call directly,
// measured in the same run. One JSON line per measurement on stdout:
//
//   {"bench": "gemm", "impl": "halfgrad", "dtype": "bfloat16", "shape": "1024x1024x1024",
//    "gflops": ..., "us": ..., "kernel": "brg:avx512_core_amx"}
//   {"bench": "gemm_ratio", "dtype": "bfloat16", "shape": "1024x1024x1024", "ratio": ...}
//   {"bench": "dispatch", "case": "add_no_grad", "us": ..., "target_us": 0.3, "met": true}
//   {"bench": "gemm_tiny", "impl": "small", "shape": "16x32x32", "b": "weight^T", "us": ...}
//   {"bench": "attention", "impl": "kernels", "dtype": "bfloat16", "pass": "forward", ...}
//   {"bench": "vector_math", "fn": "tanh", "isa": "avx512", "us": ..., "scalar_us": ...}
//   {"bench": "stochastic_cast", "from": "float32", "dtype": "bfloat16", "n": ..., "us": ...,
//    "nearest_us": ..., "ratio": ..., "threads": ...}
//
// Each section is a run_*_benchmarks(options) function listed in kSections; --only picks one.
// Times are the median of --reps calls after --warmup calls, on std::chrono::steady_clock.
//
//   {"bench": "cpu_copy", "dtype": "float32", "numel": ..., "bytes": ..., "us": ..., "gbps": ...}
//   {"bench": "cpu_step", "kernel": "adamw", "pass": "avx512", "params": ..., "bytes": ...,
//    "us": ..., "gbps": ..., "copy_gbps": ..., "fraction_of_copy": ..., "threads": ...}
//
// --device cuda runs the GPU sections instead (their PyTorch twin is
// benchmarks/twin/ops_twin.py, which prints the same lines with "impl": "pytorch";
// benchmarks/run-gpu runs both and prints the ratios):
//
//   {"bench": "cuda_gemm", "impl": "halfgrad", "mode": "tf32", "dtype": "float32",
//    "shape": "8192x8192x8192", "tflops": ..., "ms": ..., "peak_mib": ..., "kernel": "..."}
//   {"bench": "cuda_copy", "impl": "halfgrad", "dtype": "float32", "numel": ..., "bytes": ...,
//    "ms": ..., "gbps": ..., "peak_mib": ...}
//   {"bench": "cuda_unscale", "impl": "halfgrad", "params": ..., "tensors": 148, "bytes": ...,
//    "ms": ..., "gbps": ..., "copy_gbps": ..., "fraction_of_copy": ..., "target": 0.8, ...}
//   {"bench": "cuda_adamw", ... the same keys}
//   {"bench": "cuda_h2d_copy", "impl": "halfgrad", "memory": "pinned", "non_blocking": true,
//    "dtype": "float32", "numel": ..., "bytes": ..., "ms": ..., "gbps": ..., "peak_mib": ...}
//   {"bench": "cuda_attention", "impl": "halfgrad", "dtype": "bfloat16", "pass": "forward",
//    "shape": "8x12x1024x64", "causal": true, "tflops": ..., "ms": ..., "peak_mib": ...,
//    "kernel": "fused"}
//   {"bench": "cuda_attention_row_tiles", "dtype": ..., "pass": ..., "row_tiles": 1, "round": 0,
//    "tflops": ..., "ms": ...}
//   {"bench": "cuda_linear_backward", "impl": "halfgrad", "piece": "dw", "shape":
//   "M8192xN768xK768",
//    "ms": ..., "tflops": ..., "gbps": ...}
//
//   gemm       hg::matmul on [M, K] x [K, N] at 4096^3 and 8192^3 in fp32, tf32
//              (hg::set_float32_matmul_precision("high")), fp16 and bf16, in TFLOP/s; and
//              fp8: hg::scaled_mm of float8_e4m3fn operands into bfloat16.
//   bandwidth  a 1 GiB float32 copy_ (bytes read + written: the device's copy bandwidth),
//              then GradScaler::unscale_ and an AdamW step over GPT-2 small's parameters
//              (124M float32 in 148 tensors), each as a fraction of that copy bandwidth for
//              the bytes it must move. Then a 256 MiB host-to-device copy from pageable and
//              from pinned memory (cuda_h2d_copy; no PyTorch twin line).
//   attention  causal scaled_dot_product_attention at a GPT-2-small-like step's shape
//              (B 8, H 12, T 1024, E 64) in fp16 and bf16: the forward, and forward +
//              backward, in TFLOP/s of the causal half's matmuls (2 and 5 GEMMs of
//              B H T^2 E / 2 multiply-adds); "kernel" says whether the fused kernels ran.
//              Then the fused kernels again with one and with two query row tiles per warp
//              (cuda_attention_row_tiles; two rounds, alternating).
//   linear_backward  the three products of a bf16 linear layer's backward at the GPT step's
//              shapes, each alone: dx = g w, dw = g^T x, db = sum of g's rows.
// GPU times are CUDA events around --iters calls, the median of --reps repeats after --warmup
// calls (NOTE [GPU timing] in bench_util.h); peak_mib is hg::cuda::max_memory_allocated()
// from just before the inputs are made to the end of the timing.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench_util.h"
#include "halfgrad/config.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/settings.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/multi_tensor.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/backward_helpers.h"

#if HALFGRAD_HAS_ONEDNN
#include <dnnl.hpp>
#endif
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/attention_launch.h"
#include "halfgrad/cuda/kernel_tables.h"
#endif

namespace {

using hg::bench::Candidate;
using hg::bench::median;
using hg::bench::Options;
using hg::bench::time_interleaved;

// ---- gemm ---------------------------------------------------------------------------------

struct GemmShape {
  int64_t m, k, n;
  std::string name() const { return fmt::format("{}x{}x{}", m, k, n); }
  double flops() const { return 2.0 * double(m) * double(k) * double(n); }
};

void print_gemm(const Candidate& c, hg::DType dtype, const GemmShape& shape) {
  fmt::print(
      "{{\"bench\": \"gemm\", \"impl\": \"{}\", \"dtype\": \"{}\", \"shape\": \"{}\", "
      "\"gflops\": {:.1f}, \"us\": {:.1f}, \"kernel\": \"{}\"}}\n",
      c.impl, hg::dtype_name(dtype), shape.name(), shape.flops() / c.us * 1e-3, c.us, c.kernel);
}

void print_ratio(hg::DType dtype, const GemmShape& shape, double halfgrad_us, double peer_us,
                 hg::DType peer_dtype) {
  const std::string peer =
      peer_dtype == dtype ? ""
                          : fmt::format(", \"peer_dtype\": \"{}\"", hg::dtype_name(peer_dtype));
  fmt::print(
      "{{\"bench\": \"gemm_ratio\", \"dtype\": \"{}\", \"shape\": \"{}\", \"ratio\": {:.3f}{}}}\n",
      hg::dtype_name(dtype), shape.name(), peer_us / halfgrad_us, peer);
}

#if HALFGRAD_HAS_ONEDNN
// The peer: a oneDNN matmul primitive made and run the way a oneDNN user would (2-D,
// row-major, default attributes, memory allocated by oneDNN), on copies of the same inputs.
// nullopt when oneDNN has no matmul for the dtype on this CPU.
std::optional<Candidate> raw_onednn(dnnl::memory::data_type type, const hg::Tensor& a,
                                    const hg::Tensor& b, const GemmShape& shape) {
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const memory::desc a_desc({shape.m, shape.k}, type, memory::format_tag::ab);
  const memory::desc b_desc({shape.k, shape.n}, type, memory::format_tag::ab);
  const memory::desc out_desc({shape.m, shape.n}, type, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc, b_desc, out_desc), engine);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  const std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, memory(a_desc, engine)},
                                                {DNNL_ARG_WEIGHTS, memory(b_desc, engine)},
                                                {DNNL_ARG_DST, memory(out_desc, engine)}};
  std::memcpy(args.at(DNNL_ARG_SRC).get_data_handle(), a.data_ptr(), a.nbytes());
  std::memcpy(args.at(DNNL_ARG_WEIGHTS).get_data_handle(), b.data_ptr(), b.nbytes());
  const dnnl::matmul matmul(pd);
  auto call = [matmul, args, stream = dnnl::stream(engine)]() mutable {
    matmul.execute(stream, args);
    stream.wait();
  };
  return Candidate{"onednn", pd.impl_info_str(), call};
}

dnnl::memory::data_type onednn_type(hg::DType dtype) {
  return dtype == hg::kFloat32    ? dnnl::memory::data_type::f32
         : dtype == hg::kBFloat16 ? dnnl::memory::data_type::bf16
                                  : dnnl::memory::data_type::f16;
}
#endif

// halfgrad's gemm on [1, M, K] x [1, K, N] for float32, bfloat16 and float16, against raw
// oneDNN of the same dtype (for float16, which oneDNN lacks on CPUs without AVX512-FP16,
// against raw oneDNN float32: the ratio then says what the fp32 tiles cost). float32 also
// times the implementation gemm did not pick.
void run_gemm_benchmarks(const Options& options) {
  using hg::cpu::GemmImpl;
  const std::vector<GemmShape> shapes = {{1024, 1024, 1024}, {4096, 768, 3072}};
  for (const GemmShape& shape : shapes) {
    for (hg::DType dtype : {hg::kFloat32, hg::kBFloat16, hg::kFloat16}) {
      hg::manual_seed(1);
      const hg::Tensor a = hg::randn({1, shape.m, shape.k}, dtype);
      const hg::Tensor b = hg::randn({1, shape.k, shape.n}, dtype);
      const hg::Tensor out = hg::empty({1, shape.m, shape.n}, dtype);
      std::vector<Candidate> candidates;
      candidates.push_back({"halfgrad", hg::cpu::gemm_kernel_name(dtype),
                            [&] { hg::cpu::linalg_kernels.gemm(a, b, out, 1.0, 0.0); }});
      if (dtype == hg::kFloat32) {
        const bool picked_onednn = hg::cpu::linalg_kernels.backend(dtype) == "onednn";
        if (picked_onednn) {
          candidates.push_back(
              {"halfgrad-eigen", "eigen", [&] { hg::cpu::gemm_with(GemmImpl::Eigen, a, b, out); }});
        } else if (HALFGRAD_HAS_ONEDNN) {
          candidates.push_back({"halfgrad-onednn", "onednn",
                                [&] { hg::cpu::gemm_with(GemmImpl::OneDNN, a, b, out); }});
        }
      }
      hg::DType peer_dtype = dtype;
#if HALFGRAD_HAS_ONEDNN
      std::optional<Candidate> peer = raw_onednn(onednn_type(dtype), a, b, shape);
      if (!peer) {
        fmt::print(
            "{{\"bench\": \"gemm\", \"impl\": \"onednn\", \"dtype\": \"{}\", \"shape\": \"{}\", "
            "\"error\": \"oneDNN has no {} matmul on this CPU\"}}\n",
            hg::dtype_name(dtype), shape.name(), hg::dtype_name(dtype));
        peer_dtype = hg::kFloat32;
        peer =
            raw_onednn(dnnl::memory::data_type::f32, a.to(hg::kFloat32), b.to(hg::kFloat32), shape);
        peer->impl = "onednn-float32";
      }
      candidates.push_back(*peer);
#endif
      time_interleaved(options, candidates);
      for (const Candidate& c : candidates) {
        print_gemm(c, c.impl == "onednn-float32" ? hg::kFloat32 : dtype, shape);
      }
      if (candidates.back().impl.starts_with("onednn")) {
        print_ratio(dtype, shape, candidates.front().us, candidates.back().us, peer_dtype);
      }
      std::fflush(stdout);
    }
  }
}

// ---- dispatch overhead -----------------------------------------------------------------------
//
// The cost of one op call on a 1-element tensor, where the kernel is negligible: validation,
// the autocast lookup, the output allocation and, when recording, the autograd node. Each
// measurement is the median over --reps batches of kDispatchCalls calls.

constexpr int kDispatchCalls = 20000;

double per_call_us(const Options& options, const std::function<void()>& call) {
  for (int i = 0; i < kDispatchCalls / 10; ++i) call();
  std::vector<double> batches;
  for (int r = 0; r < std::max(options.reps, 5); ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kDispatchCalls; ++i) call();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    batches.push_back(took.count() / kDispatchCalls);
  }
  return median(batches);
}

void run_dispatch_benchmarks(const Options& options) {
  using namespace hg;
  const Tensor a = ones({1}), b = ones({1});
  const Tensor w = ones({1}).requires_grad_();
  const auto report = [](const char* name, double us, double target) {
    fmt::print(
        "{{\"bench\": \"dispatch\", \"case\": \"{}\", \"dtype\": \"float32\", "
        "\"shape\": \"1\", \"us\": {:.4f}, \"target_us\": {}, \"met\": {}}}\n",
        name, us, target, us <= target ? "true" : "false");
    std::fflush(stdout);
  };
  report("add_no_grad", per_call_us(options, [&] { (void)add(a, b); }), 0.3);
  {
    amp::Autocast autocast(kCPU);
    report("add_autocast_on", per_call_us(options, [&] { (void)add(a, b); }), 0.3);
  }
  report("add_recording_node", per_call_us(options, [&] { (void)add(w, b); }), 1.0);
}

// ---- tiny GEMMs ------------------------------------------------------------------------------
//
// The products of a small layer (NOTE [Small GEMM kernel] in cpu/small_gemm.cpp): a 16-row
// batch times a 32-wide weight, read transposed as linear reads it or row-major, and into one
// output column, on each float32 implementation gemm has. Each is the median over --reps
// batches of kDispatchCalls calls (one call is under a microsecond).
void run_tiny_gemm_benchmarks(const Options& options) {
  using hg::cpu::GemmImpl;
  struct Case {
    int64_t m, k, n;
    bool transposed_b;  // b read as weight^T, weight [N, K] row-major
  };
  std::vector<std::pair<const char*, GemmImpl>> impls = {{"small", GemmImpl::Small},
                                                         {"eigen", GemmImpl::Eigen}};
  if (HALFGRAD_HAS_ONEDNN) impls.push_back({"onednn", GemmImpl::OneDNN});
  for (const Case& c : {Case{16, 32, 32, true}, Case{16, 32, 32, false}, Case{16, 32, 1, true}}) {
    hg::manual_seed(1);
    const hg::Tensor a = hg::randn({1, c.m, c.k});
    const hg::Tensor b =
        c.transposed_b ? hg::randn({1, c.n, c.k}).transpose(1, 2) : hg::randn({1, c.k, c.n});
    const hg::Tensor out = hg::empty({1, c.m, c.n});
    for (const auto& [name, impl] : impls) {
      const double us =
          per_call_us(options, [&, impl = impl] { hg::cpu::gemm_with(impl, a, b, out); });
      fmt::print(
          "{{\"bench\": \"gemm_tiny\", \"impl\": \"{}\", \"dtype\": \"float32\", \"shape\": "
          "\"{}x{}x{}\", \"b\": \"{}\", \"us\": {:.3f}}}\n",
          name, c.m, c.k, c.n, c.transposed_b ? "weight^T" : "row-major", us);
      std::fflush(stdout);
    }
  }
}

// ---- CPU: vector math ---------------------------------------------------------------------------

// The vector math passes (cpu/vector_math.h) over 110592 floats (the demo's MLP activation,
// 576 x 192), in us per pass, against the op with vector math turned off (its scalar loop,
// plus the op's allocation), interleaved:
//   {"bench": "vector_math", "fn": "tanh", "isa": "avx512", "us": ..., "scalar_us": ...}
//   {"bench": "stochastic_cast", "from": "float32", "dtype": "bfloat16", "n": ..., "us": ...,
//    "nearest_us": ..., "ratio": ..., "threads": ...}
void run_vector_math_benchmarks(const Options& options) {
  const int64_t n = 110592;
  const hg::Tensor x = hg::rand({n}) * 8.0 - 4.0;
  std::vector<float> in = x.to_vector<float>();
  std::vector<float> out(static_cast<size_t>(n));
  struct Fn {
    const char* name;
    hg::cpu::VectorFn fn;
    hg::Tensor (*op)(const hg::Tensor&);
  };
  const Fn fns[] = {
      {"exp", hg::cpu::VectorFn::Exp, [](const hg::Tensor& t) { return hg::exp(t); }},
      {"tanh", hg::cpu::VectorFn::Tanh, [](const hg::Tensor& t) { return hg::tanh(t); }},
      {"sigmoid", hg::cpu::VectorFn::Sigmoid, [](const hg::Tensor& t) { return hg::sigmoid(t); }},
      {"gelu_tanh", hg::cpu::VectorFn::GeluTanh,
       [](const hg::Tensor& t) { return hg::gelu(t, "tanh"); }},
      {"gelu_tanh_grad", hg::cpu::VectorFn::GeluTanhGrad,
       [](const hg::Tensor& t) { return hg::ops::gelu_derivative(t, true); }},
  };
  const hg::cpu::VectorMap pass = hg::cpu::vector_mapper();
  if (pass == nullptr) {
    fmt::print("{{\"bench\": \"vector_math\", \"skipped\": \"no vector math here ({})\"}}\n",
               hg::cpu::vector_math_isa());
    return;
  }
  // The vector pass and the op with vector math off, interleaved (median of --reps calls each).
  const auto time_pair = [&](const std::function<void()>& vector_call,
                             const std::function<void()>& scalar_call) {
    std::vector<Candidate> candidates = {{"vector", "", vector_call},
                                         {"scalar", "", [&] {
                                            hg::cpu::set_vector_math_enabled(false);
                                            scalar_call();
                                            hg::cpu::set_vector_math_enabled(true);
                                          }}};
    hg::bench::time_interleaved(options, candidates);
    return std::pair{candidates[0].us, candidates[1].us};
  };
  hg::NoGradGuard no_grad;
  for (const Fn& f : fns) {
    const auto [us, scalar] =
        time_pair([&] { pass(f.fn, in.data(), out.data(), n); }, [&] { (void)f.op(x); });
    fmt::print(
        "{{\"bench\": \"vector_math\", \"fn\": \"{}\", \"isa\": \"{}\", \"n\": {}, \"us\": "
        "{:.2f}, \"scalar_us\": {:.2f}}}\n",
        f.name, hg::cpu::vector_math_isa(), n, us, scalar);
  }
  const hg::Tensor base = hg::abs(x), exponent = x * 0.5;
  const auto pow_call = [&] { (void)hg::pow(base, exponent); };
  const auto [pow_us, pow_scalar] = time_pair(pow_call, pow_call);
  fmt::print(
      "{{\"bench\": \"vector_math\", \"fn\": \"pow\", \"isa\": \"{}\", \"n\": {}, \"us\": "
      "{:.2f}, \"scalar_us\": {:.2f}, \"note\": \"the op, tensor exponent\"}}\n",
      hg::cpu::vector_math_isa(), n, pow_us, pow_scalar);
  std::fflush(stdout);
}

// ---- CPU: stochastic rounding ----------------------------------------------------------------

// to(dtype, Rounding::Stochastic) against the round-to-nearest to(dtype) of the same 4M float32
// values, interleaved: what the Philox words and the per-element rounding cost.
void run_stochastic_cast_benchmarks(const Options& options) {
  constexpr int64_t n = int64_t(1) << 22;
  hg::manual_seed(5);
  const hg::Tensor x = hg::randn({n});
  hg::Generator gen(6);
  hg::NoGradGuard no_grad;
  for (const hg::DType dtype : {hg::kBFloat16, hg::kFloat16, hg::kFloat8_e4m3fn}) {
    std::vector<Candidate> candidates = {
        {"nearest_even", "", [&] { (void)x.to(dtype); }},
        {"stochastic", "", [&] { (void)x.to(dtype, hg::Rounding::Stochastic, &gen); }}};
    hg::bench::time_interleaved(options, candidates);
    fmt::print(
        "{{\"bench\": \"stochastic_cast\", \"from\": \"float32\", \"dtype\": \"{}\", \"n\": {}, "
        "\"us\": {:.1f}, \"nearest_us\": {:.1f}, \"ratio\": {:.2f}, \"threads\": {}}}\n",
        hg::dtype_name(dtype), n, candidates[1].us, candidates[0].us,
        candidates[1].us / candidates[0].us, hg::get_num_threads());
  }
  std::fflush(stdout);
}

// ---- CPU: the training step's kernels ----------------------------------------------------------

int64_t total_numel(const std::vector<hg::Tensor>& tensors) {
  int64_t numel = 0;
  for (const hg::Tensor& t : tensors) numel += t.numel();
  return numel;
}

// The multi_tensor family's CPU passes (kernel/multi_tensor.h) against the machine's copy
// bandwidth: GradScaler::unscale_ and one step of each fused optimizer over the parameters of a
// GPT-2-shaped model of width 512 and 8 layers (nanoGPT's layout, vocabulary 50304: 51M float32
// values in 100 tensors, 200 MiB per list: the four or five lists of the Adam-like steps exceed
// the 480 MiB L3 of the Xeon in benchmarks/results, SGD's and the unscale's two or three may
// not) with random gradients, interleaved, each as a fraction of a 256 MiB float32 copy_'s
// bandwidth for the bytes it must move (4 per value read or written). On that Xeon the copy_ is
// not the ceiling (the fused steps exceed it); compare the steps' own GB/s:
//   {"bench": "cpu_copy", "numel": ..., "bytes": ..., "us": ..., "gbps": ..., "threads": 2}
//   {"bench": "cpu_step", "kernel": "adamw", "pass": "avx512", "params": ..., "tensors": 100,
//    "bytes": ..., "us": ..., "gbps": ..., "copy_gbps": ..., "fraction_of_copy": ..., "threads": 2}
// The optimizers share the parameters (each keeps its own state); lrs are small so that the
// values stay in range over the calls. The unscale runs with scale 1 (values unchanged) and
// each call includes the update() that must follow it (a host read of the flag on the CPU).
void run_bandwidth_benchmarks(const Options& options) {
  double copy_gbps = 0;
  {
    const int64_t numel = int64_t(1) << 26;
    hg::manual_seed(1);
    const hg::Tensor src = hg::randn({numel});
    hg::Tensor dst = hg::empty({numel});
    std::vector<Candidate> copy = {{"halfgrad", "", [&] { dst.copy_(src); }}};
    hg::bench::time_interleaved(options, copy);
    const double bytes = 2.0 * double(src.nbytes());
    copy_gbps = bytes / copy[0].us * 1e-3;
    fmt::print(
        "{{\"bench\": \"cpu_copy\", \"dtype\": \"float32\", \"numel\": {}, \"bytes\": {:.0f}, "
        "\"us\": {:.1f}, \"gbps\": {:.2f}, \"threads\": {}}}\n",
        numel, bytes, copy[0].us, copy_gbps, hg::get_num_threads());
    std::fflush(stdout);
  }
  hg::manual_seed(2);
  const int64_t V = 50304, T = 1024, C = 512, L = 8;
  std::vector<hg::Shape> shapes = {{V, C}, {T, C}};
  for (int64_t layer = 0; layer < L; ++layer) {
    for (const hg::Shape& shape : std::vector<hg::Shape>{{C},
                                                         {C},
                                                         {3 * C, C},
                                                         {3 * C},
                                                         {C, C},
                                                         {C},
                                                         {C},
                                                         {C},
                                                         {4 * C, C},
                                                         {4 * C},
                                                         {C, 4 * C},
                                                         {C}}) {
      shapes.push_back(shape);
    }
  }
  shapes.push_back({C});
  shapes.push_back({C});
  std::vector<hg::Tensor> params;
  for (const hg::Shape& shape : shapes) {
    hg::Tensor param = hg::randn(shape).requires_grad_();
    param.mutable_grad() = hg::randn(shape);
    params.push_back(param);
  }
  const int64_t numel = total_numel(params);
  namespace optim = hg::optim;
  struct Kernel {
    const char* name;
    double bytes_per_value;  // read and written per parameter value
    std::unique_ptr<optim::Optimizer> opt;
  };
  std::vector<Kernel> kernels;
  kernels.push_back({"unscale", 8, std::make_unique<optim::SGD>(params)});
  kernels.push_back(
      {"adamw", 28, std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-6})});
  kernels.push_back(
      {"sgd_momentum", 20,
       std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 1e-6, .momentum = 0.9})});
  kernels.push_back(
      {"rmsprop", 20, std::make_unique<optim::RMSprop>(params, optim::RMSpropOptions{.lr = 1e-6})});
  kernels.push_back(
      {"adagrad", 20, std::make_unique<optim::Adagrad>(params, optim::AdagradOptions{.lr = 1e-6})});
  kernels.push_back(
      {"adamax", 28, std::make_unique<optim::Adamax>(params, optim::AdamaxOptions{.lr = 1e-6})});
  kernels.push_back(
      {"adadelta", 28,
       std::make_unique<optim::Adadelta>(params, optim::AdadeltaOptions{.lr = 1e-6})});
  kernels.push_back(
      {"radam", 28, std::make_unique<optim::RAdam>(params, optim::RAdamOptions{.lr = 1e-6})});
  kernels.push_back(
      {"nadam", 28, std::make_unique<optim::NAdam>(params, optim::NAdamOptions{.lr = 1e-6})});
  hg::amp::GradScaler scaler({.init_scale = 1.0});
  (void)scaler.scale(hg::ones({1}));  // makes the scale, as the first scale(loss) does
  // Each kernel on the AVX-512 passes (where the CPU has AVX-512F) and on the scalar loops
  // (NOTE [Vectorized optimizer passes]), interleaved.
  std::vector<std::string> passes = {"scalar"};
  if (hg::cpu_has_avx512f()) passes.insert(passes.begin(), "avx512");
  std::vector<Candidate> candidates;
  for (Kernel& k : kernels) {
    optim::Optimizer* opt = k.opt.get();
    const bool unscale = std::string_view(k.name) == "unscale";
    for (const std::string& pass : passes) {
      const bool vector = pass == "avx512";
      candidates.push_back({k.name, pass, [&scaler, opt, unscale, vector] {
                              const bool previous = hg::cpu::detail::set_vector_passes(vector);
                              if (unscale) {
                                scaler.unscale_(*opt);
                                scaler.update();
                              } else {
                                opt->step();
                              }
                              hg::cpu::detail::set_vector_passes(previous);
                            }});
    }
  }
  hg::bench::time_interleaved(options, candidates);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double bytes = kernels[i / passes.size()].bytes_per_value * double(numel);
    const double gbps = bytes / candidates[i].us * 1e-3;
    fmt::print(
        "{{\"bench\": \"cpu_step\", \"kernel\": \"{}\", \"pass\": \"{}\", \"dtype\": \"float32\", "
        "\"params\": {}, \"tensors\": {}, \"bytes\": {:.0f}, \"us\": {:.1f}, \"gbps\": {:.2f}, "
        "\"copy_gbps\": {:.2f}, \"fraction_of_copy\": {:.3f}, \"threads\": {}}}\n",
        candidates[i].impl, candidates[i].kernel, numel, params.size(), bytes, candidates[i].us,
        gbps, copy_gbps, gbps / copy_gbps, hg::get_num_threads());
  }
  std::fflush(stdout);
}

// ---- CPU: attention ---------------------------------------------------------------------------

// The math scaled_dot_product_attention computes as halfgrad ops when its kernels do not take a
// call (ops/attention.cpp): q k^T * scale, the future masked, softmax in float32, the weights
// back in q's dtype, times v.
hg::Tensor attention_as_ops(const hg::Tensor& q, const hg::Tensor& k, const hg::Tensor& v) {
  const int64_t L = q.size(-2), S = k.size(-2);
  const hg::Tensor future = hg::gt(hg::arange(S).unsqueeze(0), hg::arange(L).unsqueeze(1));
  const hg::Tensor scores = hg::masked_fill(
      hg::mul(hg::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(double(q.size(-1)))), future,
      -INFINITY);
  return hg::matmul(hg::softmax(scores.to(hg::kFloat32), -1).to(q.dtype()), v);
}

// Causal attention at the gpt-cpu sizes' shapes (hg-bench-train --only gpt-cpu), q, k and v
// the views nn::MultiheadAttention hands it ([B, L, H, E] projections, transposed): the CPU
// kernels (NOTE [CPU attention]) against the same math as halfgrad ops, interleaved, forward
// and forward + backward:
//   {"bench": "attention", "impl": "kernels", "dtype": "bfloat16", "pass": "forward",
//    "shape": "64x4x9x12", "us": ...}
//   {"bench": "attention_ratio", "dtype": ..., "pass": ..., "shape": ..., "vs": "ops", ...}
void run_attention_benchmarks(const Options& options) {
  struct Shape4 {
    int64_t B, H, T, E;
  };
  for (const Shape4& s : {Shape4{64, 4, 9, 12}, Shape4{16, 8, 64, 32}}) {
    for (hg::DType dtype : {hg::kFloat32, hg::kBFloat16}) {
      hg::manual_seed(5);
      auto head_view = [&] {
        return hg::randn({s.B, s.T, s.H, s.E}, dtype).transpose(1, 2).requires_grad_();
      };
      const hg::Tensor q = head_view(), k = head_view(), v = head_view();
      const hg::Tensor dy = hg::randn({s.B, s.H, s.T, s.E}, dtype);
      using Fn = std::function<hg::Tensor(const hg::Tensor&, const hg::Tensor&, const hg::Tensor&)>;
      const Fn kernels = [](const hg::Tensor& q, const hg::Tensor& k, const hg::Tensor& v) {
        return hg::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
      };
      const Fn ops = attention_as_ops;
      for (const char* pass : {"forward", "forward_backward"}) {
        std::vector<Candidate> candidates;
        for (const auto& [impl, fn] : {std::pair{"kernels", kernels}, std::pair{"ops", ops}}) {
          candidates.push_back({impl, pass, [&, fn = fn, pass] {
                                  if (std::string(pass) == "forward") {
                                    hg::NoGradGuard no_grad;
                                    (void)fn(q, k, v);
                                  } else {
                                    fn(q, k, v).backward(dy);
                                  }
                                }});
        }
        hg::bench::time_interleaved(options, candidates);
        const std::string shape = fmt::format("{}x{}x{}x{}", s.B, s.H, s.T, s.E);
        for (const Candidate& c : candidates) {
          fmt::print(
              "{{\"bench\": \"attention\", \"impl\": \"{}\", \"dtype\": \"{}\", \"pass\": "
              "\"{}\", \"shape\": \"{}\", \"causal\": true, \"us\": {:.2f}}}\n",
              c.impl, hg::dtype_name(dtype), pass, shape, c.us);
        }
        fmt::print(
            "{{\"bench\": \"attention_ratio\", \"dtype\": \"{}\", \"pass\": \"{}\", "
            "\"shape\": \"{}\", \"vs\": \"ops\", \"ratio\": {:.3f}}}\n",
            hg::dtype_name(dtype), pass, shape, candidates[0].us / candidates[1].us);
        std::fflush(stdout);
      }
    }
  }
}

// ---- CUDA: GEMM -----------------------------------------------------------------------------

const char* json_bool(bool value) { return value ? "true" : "false"; }

// The GEMM modes of the GPU section: the storage dtype and the float32 matmul precision.
struct CudaGemmMode {
  const char* name;
  hg::DType dtype;
  const char* precision;  // hg::set_float32_matmul_precision ("high" allows TF32)
};

constexpr CudaGemmMode kCudaGemmModes[] = {{"fp32", hg::kFloat32, "highest"},
                                           {"tf32", hg::kFloat32, "high"},
                                           {"fp16", hg::kFloat16, "highest"},
                                           {"bf16", hg::kBFloat16, "highest"}};

// hg::matmul on [M, K] x [K, N] CUDA tensors of random values, each mode and shape.
void run_cuda_gemm_benchmarks(const Options& options) {
  const std::vector<GemmShape> shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}};
  const std::string user_precision = hg::get_float32_matmul_precision();
  for (const GemmShape& shape : shapes) {
    for (const CudaGemmMode& mode : kCudaGemmModes) {
      hg::set_float32_matmul_precision(mode.precision);
      hg::cuda::synchronize();
      hg::cuda::reset_peak_memory_stats();
      hg::manual_seed(1);
      const hg::TensorOptions on_gpu{.dtype = mode.dtype, .device = hg::kCUDA};
      const hg::Tensor a = hg::randn({shape.m, shape.k}, on_gpu);
      const hg::Tensor b = hg::randn({shape.k, shape.n}, on_gpu);
      const double ms = hg::bench::cuda_ms_per_call(options, [&] { (void)hg::matmul(a, b); });
      std::string kernel = "";
#if HALFGRAD_HAS_CUDA
      kernel = hg::cuda::linalg_kernels.backend(mode.dtype);
#endif
      fmt::print(
          "{{\"bench\": \"cuda_gemm\", \"impl\": \"halfgrad\", \"mode\": \"{}\", "
          "\"dtype\": \"{}\", \"shape\": \"{}\", \"tflops\": {:.1f}, \"ms\": {:.4f}, "
          "\"peak_mib\": {:.1f}, \"kernel\": \"{}\"}}\n",
          mode.name, hg::dtype_name(mode.dtype), shape.name(), shape.flops() / ms * 1e-9, ms,
          hg::bench::cuda_peak_mib(), kernel);
      std::fflush(stdout);
    }
  }
  hg::set_float32_matmul_precision(user_precision);
  // fp8: scaled_mm of float8_e4m3fn operands (b the transpose of a row-major [N, K], the layout
  // fp8 tensor cores read) into bfloat16, per-tensor scales on the device; the peer is
  // torch._scaled_mm on the same operands.
  for (const GemmShape& shape : shapes) {
    hg::cuda::synchronize();
    hg::cuda::reset_peak_memory_stats();
    hg::manual_seed(1);
    const hg::TensorOptions on_gpu{.dtype = hg::kFloat32, .device = hg::kCUDA};
    const hg::Tensor a = hg::randn({shape.m, shape.k}, on_gpu).to(hg::kFloat8_e4m3fn);
    const hg::Tensor b = hg::randn({shape.n, shape.k}, on_gpu).to(hg::kFloat8_e4m3fn).t();
    const hg::Tensor scale = hg::ones({1}, on_gpu);
    const double ms = hg::bench::cuda_ms_per_call(
        options, [&] { (void)hg::scaled_mm(a, b, scale, scale, hg::kBFloat16); });
    fmt::print(
        "{{\"bench\": \"cuda_gemm\", \"impl\": \"halfgrad\", \"mode\": \"fp8\", "
        "\"dtype\": \"float8_e4m3fn\", \"shape\": \"{}\", \"tflops\": {:.1f}, \"ms\": {:.4f}, "
        "\"peak_mib\": {:.1f}, \"kernel\": \"cuBLASLt fp8 (scaled_mm into bfloat16)\"}}\n",
        shape.name(), shape.flops() / ms * 1e-9, ms, hg::bench::cuda_peak_mib());
    std::fflush(stdout);
  }
}

// ---- CUDA: bandwidth ------------------------------------------------------------------------
//
// NOTE [Bandwidth fractions] The fused passes are memory-bound, so each is measured against the
// device's own copy bandwidth (a 1 GiB float32 copy_, bytes read + bytes written), for the
// fewest bytes it must move:
//   unscale_ (multiply by 1/scale, check for inf/NaN):  grad read + grad written = 8 B/element
//   AdamW step:  param, grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written
//                = 28 B/element
// The parameters are GPT-2 small's (nanoGPT's layout: wte tied to lm_head, vocabulary padded
// to 50304; 124M float32 values in 148 tensors), with random float32 gradients. The twin
// (ops_twin.py) makes the same list.

std::vector<hg::Shape> gpt2_small_shapes() {
  const int64_t V = 50304, T = 1024, C = 768, L = 12;
  // A block: ln_1 (weight, bias), attention q/k/v and output projections (weight, bias
  // each), ln_2, MLP up and down projections.
  const std::vector<hg::Shape> block = {{C}, {C}, {3 * C, C}, {3 * C}, {C, C},     {C},
                                        {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}};
  std::vector<hg::Shape> shapes = {{V, C}, {T, C}};  // wte (= lm_head), wpe
  for (int64_t layer = 0; layer < L; ++layer)
    shapes.insert(shapes.end(), block.begin(), block.end());
  shapes.push_back({C});  // ln_f
  shapes.push_back({C});
  return shapes;
}

// GPT-2 small's parameters on the GPU, float32, each with a random gradient.
std::vector<hg::Tensor> gpt2_small_params_with_grads() {
  hg::manual_seed(2);
  std::vector<hg::Tensor> params;
  for (const hg::Shape& shape : gpt2_small_shapes()) {
    hg::Tensor param = hg::randn(shape, {.device = hg::kCUDA}).requires_grad_();
    param.mutable_grad() = hg::randn(shape, {.device = hg::kCUDA});
    params.push_back(param);
  }
  return params;
}

void print_fused(const char* bench, const std::vector<hg::Tensor>& params, double bytes, double ms,
                 double copy_gbps) {
  const double gbps = bytes / ms * 1e-6;
  const double fraction = gbps / copy_gbps;
  constexpr double kTarget = 0.8;
  fmt::print(
      "{{\"bench\": \"{}\", \"impl\": \"halfgrad\", \"dtype\": \"float32\", \"params\": {}, "
      "\"tensors\": {}, \"bytes\": {:.0f}, \"ms\": {:.4f}, \"gbps\": {:.1f}, "
      "\"copy_gbps\": {:.1f}, \"fraction_of_copy\": {:.3f}, \"target\": {}, \"met\": {}, "
      "\"peak_mib\": {:.1f}}}\n",
      bench, total_numel(params), params.size(), bytes, ms, gbps, copy_gbps, fraction, kTarget,
      json_bool(fraction >= kTarget), hg::bench::cuda_peak_mib());
  std::fflush(stdout);
}

void run_cuda_bandwidth_benchmarks(const Options& options) {
  // The ceiling: dst.copy_(src), 1 GiB each.
  double copy_gbps = 0;
  {
    hg::cuda::synchronize();
    hg::cuda::reset_peak_memory_stats();
    const int64_t numel = int64_t(1) << 28;
    hg::manual_seed(1);
    const hg::Tensor src = hg::randn({numel}, {.device = hg::kCUDA});
    hg::Tensor dst = hg::empty({numel}, {.device = hg::kCUDA});
    const double ms = hg::bench::cuda_ms_per_call(options, [&] { dst.copy_(src); });
    const double bytes = 2.0 * double(src.nbytes());
    copy_gbps = bytes / ms * 1e-6;
    fmt::print(
        "{{\"bench\": \"cuda_copy\", \"impl\": \"halfgrad\", \"dtype\": \"float32\", "
        "\"numel\": {}, \"bytes\": {:.0f}, \"ms\": {:.4f}, \"gbps\": {:.1f}, "
        "\"peak_mib\": {:.1f}}}\n",
        numel, bytes, ms, copy_gbps, hg::bench::cuda_peak_mib());
    std::fflush(stdout);
  }
  // GradScaler::unscale_: scale 1 keeps the gradients' values from one call to the next (a
  // scale of 65536 would take them to zero within a few calls); the kernel reads the scale
  // from device memory, so its work is the same. update() must follow each unscale_ (NOTE
  // [Scaler state machine]); it runs between the timed calls.
  {
    hg::cuda::synchronize();
    hg::cuda::reset_peak_memory_stats();
    const std::vector<hg::Tensor> params = gpt2_small_params_with_grads();
    hg::optim::AdamW opt(params);  // holds the parameters; never steps here
    hg::amp::GradScaler scaler({.init_scale = 1.0});
    (void)scaler.scale(hg::ones({1}, {.device = hg::kCUDA}));  // the scale lives on the GPU
    const double ms = hg::bench::cuda_ms_per_call_between(
        options, [&] { scaler.unscale_(opt); }, [&] { scaler.update(); });
    print_fused("cuda_unscale", params, 8.0 * double(total_numel(params)), ms, copy_gbps);
  }
  // AdamW: nanoGPT's settings; the first (warm-up) step makes exp_avg and exp_avg_sq.
  {
    hg::cuda::synchronize();
    hg::cuda::reset_peak_memory_stats();
    const std::vector<hg::Tensor> params = gpt2_small_params_with_grads();
    hg::optim::AdamW opt(params, {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1});
    const double ms = hg::bench::cuda_ms_per_call(options, [&] { opt.step(); });
    print_fused("cuda_adamw", params, 28.0 * double(total_numel(params)), ms, copy_gbps);
  }
  // Host to device: to(kCUDA) of 256 MiB of float32 from pageable memory (copied by the host
  // into the pinned staging buffers, then uploaded), and to(kCUDA, non_blocking = true) from
  // pinned memory (uploaded in place; NOTE [Pinned host memory]). The time between the events
  // includes the host's part of each call, as a training loop sees it.
  {
    const int64_t numel = int64_t(1) << 26;
    hg::manual_seed(3);
    const hg::Tensor pageable = hg::randn({numel});
    const hg::Tensor pinned = pageable.pin_memory();
    for (const bool use_pinned : {false, true}) {
      hg::cuda::synchronize();
      hg::cuda::reset_peak_memory_stats();
      const double ms = hg::bench::cuda_ms_per_call(options, [&] {
        (void)(use_pinned ? pinned.to(hg::kCUDA, /*non_blocking=*/true) : pageable.to(hg::kCUDA));
      });
      const double bytes = double(pageable.nbytes());
      fmt::print(
          "{{\"bench\": \"cuda_h2d_copy\", \"impl\": \"halfgrad\", \"memory\": \"{}\", "
          "\"non_blocking\": {}, \"dtype\": \"float32\", \"numel\": {}, \"bytes\": {:.0f}, "
          "\"ms\": {:.4f}, \"gbps\": {:.1f}, \"peak_mib\": {:.1f}}}\n",
          use_pinned ? "pinned" : "pageable", json_bool(use_pinned), numel, bytes, ms,
          bytes / ms * 1e-6, hg::bench::cuda_peak_mib());
      std::fflush(stdout);
    }
  }
}

// ---- CUDA: attention ------------------------------------------------------------------------

void run_cuda_attention_benchmarks(const Options& options) {
  constexpr int64_t B = 8, H = 12, T = 1024, E = 64;
  // Multiply-adds of one T x T x E product over the causal half, for every (batch, head).
  const double half_product_flops = 2.0 * double(B * H) * double(T) * double(T) * double(E) / 2;
  for (hg::DType dtype : {hg::kFloat16, hg::kBFloat16}) {
    hg::cuda::synchronize();
    hg::cuda::reset_peak_memory_stats();
    hg::manual_seed(3);
    const hg::TensorOptions on_gpu{.dtype = dtype, .device = hg::kCUDA};
    hg::Tensor q = hg::randn({B, H, T, E}, on_gpu).requires_grad_();
    hg::Tensor k = hg::randn({B, H, T, E}, on_gpu).requires_grad_();
    hg::Tensor v = hg::randn({B, H, T, E}, on_gpu).requires_grad_();
    const hg::Tensor dy = hg::randn({B, H, T, E}, on_gpu);
    std::string kernel = "composite";
#if HALFGRAD_HAS_CUDA
    if (hg::cuda::attention_kernels.fits(q, k, v)) kernel = "fused";
#endif
    struct Pass {
      const char* name;
      double products;  // T x T x E products over the causal half
      std::function<void()> call;
    };
    const Pass passes[] = {
        {"forward", 2.0,
         [&] {
           hg::NoGradGuard no_grad;
           (void)hg::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
         }},
        {"forward_backward", 7.0,
         [&] {
           const hg::Tensor y = hg::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
           y.backward(dy);
         }},
    };
    for (const Pass& pass : passes) {
      const double ms = hg::bench::cuda_ms_per_call(options, pass.call);
      fmt::print(
          "{{\"bench\": \"cuda_attention\", \"impl\": \"halfgrad\", \"dtype\": \"{}\", "
          "\"pass\": \"{}\", \"shape\": \"{}x{}x{}x{}\", \"causal\": true, \"tflops\": {:.1f}, "
          "\"ms\": {:.4f}, \"peak_mib\": {:.1f}, \"kernel\": \"{}\"}}\n",
          hg::dtype_name(dtype), pass.name, B, H, T, E,
          pass.products * half_product_flops / ms * 1e-9, ms, hg::bench::cuda_peak_mib(), kernel);
      std::fflush(stdout);
    }
#if HALFGRAD_HAS_CUDA
    // The fused kernels with one and with two query row tiles per warp (NOTE [Two row tiles per
    // warp] in cuda/attention.cu), timed alternately: which one the default should be.
    if (kernel == "fused") {
      for (int round = 0; round < 2; ++round) {
        for (const int row_tiles : {1, 2}) {
          hg::cuda::detail::set_flash_query_row_tiles(row_tiles);
          for (const Pass& pass : passes) {
            const double ms = hg::bench::cuda_ms_per_call(options, pass.call);
            fmt::print(
                "{{\"bench\": \"cuda_attention_row_tiles\", \"impl\": \"halfgrad\", "
                "\"dtype\": \"{}\", \"pass\": \"{}\", \"row_tiles\": {}, \"round\": {}, "
                "\"tflops\": {:.1f}, \"ms\": {:.4f}}}\n",
                hg::dtype_name(dtype), pass.name, row_tiles, round,
                pass.products * half_product_flops / ms * 1e-9, ms);
          }
        }
      }
      hg::cuda::detail::set_flash_query_row_tiles(0);
      std::fflush(stdout);
    }
#endif
  }
}

// ---- CUDA: the pieces of a linear layer's backward ---------------------------------------------

// The three products of a bf16 linear layer's backward at the GPT step's shapes (M = 8 x 1024
// rows): dx = g w, dw = g^T x and db = the sum of g's rows, each timed alone, with the ops a
// user would call (mm, mm of a transposed view, sum over dim 0).
void run_cuda_linear_backward_benchmarks(const Options& options) {
  constexpr int64_t M = 8 * 1024;
  struct Shape2 {
    int64_t N, K;  // out_features, in_features
  };
  const Shape2 shapes[] = {{768, 768}, {3072, 768}, {768, 3072}, {50304, 768}};
  for (const Shape2& shape : shapes) {
    hg::manual_seed(4);
    const hg::TensorOptions on_gpu{.dtype = hg::kBFloat16, .device = hg::kCUDA};
    const hg::Tensor g = hg::randn({M, shape.N}, on_gpu), x = hg::randn({M, shape.K}, on_gpu),
                     w = hg::randn({shape.N, shape.K}, on_gpu);
    hg::NoGradGuard no_grad;
    struct Piece {
      const char* name;
      double flops, bytes;
      std::function<void()> call;
    };
    const double MNK = double(M) * double(shape.N) * double(shape.K);
    const Piece pieces[] = {
        {"dx", 2 * MNK, 2.0 * double(M * shape.N + shape.N * shape.K + M * shape.K),
         [&] { (void)hg::mm(g, w); }},
        {"dw", 2 * MNK, 2.0 * double(M * shape.N + M * shape.K + shape.N * shape.K),
         [&] { (void)hg::mm(g.t(), x); }},
        {"db", double(M * shape.N), 2.0 * double(M * shape.N + shape.N),
         [&] { (void)hg::sum(g, {0}); }},
    };
    for (const Piece& piece : pieces) {
      const double ms = hg::bench::cuda_ms_per_call(options, piece.call);
      fmt::print(
          "{{\"bench\": \"cuda_linear_backward\", \"impl\": \"halfgrad\", \"piece\": \"{}\", "
          "\"shape\": \"M{}xN{}xK{}\", \"ms\": {:.4f}, \"tflops\": {:.1f}, \"gbps\": {:.0f}}}\n",
          piece.name, M, shape.N, shape.K, ms, piece.flops / ms * 1e-9, piece.bytes / ms * 1e-6);
    }
    std::fflush(stdout);
  }
}

// ---- main ---------------------------------------------------------------------------------

// A section runs on the CPU, on the GPU (--device cuda), or each with its own function; the
// other device's entry is null.
struct Section {
  const char* name;
  void (*run)(const Options&);
  void (*run_cuda)(const Options&);
};

constexpr Section kSections[] = {
    {"gemm", run_gemm_benchmarks, run_cuda_gemm_benchmarks},
    {"dispatch", run_dispatch_benchmarks, nullptr},
    {"tiny_gemm", run_tiny_gemm_benchmarks, nullptr},
    {"bandwidth", run_bandwidth_benchmarks, run_cuda_bandwidth_benchmarks},
    {"vector_math", run_vector_math_benchmarks, nullptr},
    {"stochastic_cast", run_stochastic_cast_benchmarks, nullptr},
    {"attention", run_attention_benchmarks, run_cuda_attention_benchmarks},
    {"linear_backward", nullptr, run_cuda_linear_backward_benchmarks},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hg-bench-ops: halfgrad's CPU ops against raw oneDNN, as JSON lines"};
  Options options;
  std::vector<std::string> names;
  for (const Section& section : kSections) names.push_back(section.name);
  hg::bench::add_common_options(app, options, names);
  CLI11_PARSE(app, argc, argv);

  omp_set_num_threads(options.threads);
  const bool cuda = options.device == "cuda";
  return hg::bench::exit_code_of([&] {
    if (cuda) {
      hg::bench::require_cuda("hg-bench-ops");
      hg::bench::print_cuda_device();
    }
    for (const Section& section : kSections) {
      if (options.only != "all" && options.only != section.name) continue;
      void (*run)(const Options&) = cuda ? section.run_cuda : section.run;
      if (run != nullptr) {
        run(options);
      } else if (options.only == section.name) {
        throw std::runtime_error(fmt::format(
            "hg-bench-ops: the section '{}' has no --device {} run", section.name, options.device));
      }
    }
  });
}
