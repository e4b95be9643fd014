// hg-bench-ops: halfgrad's CPU ops against the library a user would otherwise call directly,
// measured in the same run. One JSON line per measurement on stdout:
//
//   {"bench": "gemm", "impl": "halfgrad", "dtype": "bfloat16", "shape": "1024x1024x1024",
//    "gflops": ..., "us": ..., "kernel": "brg:avx512_core_amx"}
//   {"bench": "gemm_ratio", "dtype": "bfloat16", "shape": "1024x1024x1024", "ratio": ...}
//   {"bench": "dispatch", "case": "add_no_grad", "us": ..., "target_us": 0.3, "met": true}
//   {"bench": "gemm_tiny", "impl": "small", "shape": "16x32x32", "b": "weight^T", "us": ...}
//
// Each section is a run_*_benchmarks(options) function listed in kSections; --only picks one.
// Times are the median of --reps calls after --warmup calls, on std::chrono::steady_clock.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench_util.h"
#include "halfgrad/config.h"
#include "halfgrad/cpu/gemm.h"
#include "halfgrad/halfgrad.h"

#if HALFGRAD_HAS_ONEDNN
#include <dnnl.hpp>
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
      candidates.push_back(
          {"halfgrad", hg::cpu::gemm_kernel_name(dtype), [&] { hg::cpu::gemm(a, b, out); }});
      if (dtype == hg::kFloat32) {
        const bool picked_onednn = hg::cpu::gemm_backend(dtype) == "onednn";
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

// ---- main ---------------------------------------------------------------------------------

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
// The products of a small layer (NOTE [Small GEMM kernel] in cpu/gemm.cpp): a 16-row batch
// times a 32-wide weight, read transposed as linear reads it or row-major, and into one output
// column, on each float32 implementation gemm has. Each is the median over --reps batches of
// kDispatchCalls calls (one call is under a microsecond).
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

struct Section {
  const char* name;
  void (*run)(const Options&);
};

constexpr Section kSections[] = {
    {"gemm", run_gemm_benchmarks},
    {"dispatch", run_dispatch_benchmarks},
    {"tiny_gemm", run_tiny_gemm_benchmarks},
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
  for (const Section& section : kSections) {
    if (options.only == "all" || options.only == section.name) section.run(options);
  }
  return 0;
}
