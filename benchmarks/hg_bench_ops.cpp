// hg-bench-ops: halfgrad's CPU ops against the library a user would otherwise call directly,
// measured in the same run. One JSON line per measurement on stdout:
//
//   {"bench": "gemm", "impl": "halfgrad", "dtype": "bfloat16", "shape": "1024x1024x1024",
//    "gflops": ..., "us": ..., "kernel": "brg:avx512_core_amx"}
//   {"bench": "gemm_ratio", "dtype": "bfloat16", "shape": "1024x1024x1024", "ratio": ...}
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

#include "halfgrad/config.h"
#include "halfgrad/cpu/gemm.h"
#include "halfgrad/halfgrad.h"

#if HALFGRAD_HAS_ONEDNN
#include <dnnl.hpp>
#endif

namespace {

struct Options {
  int threads = 2;
  int reps = 10;
  int warmup = 3;
  std::string only = "all";
};

// The median time of one call of f, in microseconds.
double median_us(const Options& options, const std::function<void()>& f) {
  for (int i = 0; i < options.warmup; ++i) f();
  std::vector<double> times;
  for (int i = 0; i < options.reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    const auto stop = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  std::sort(times.begin(), times.end());
  const size_t mid = times.size() / 2;
  return times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
}

// ---- gemm ---------------------------------------------------------------------------------

struct GemmShape {
  int64_t m, k, n;
  std::string name() const { return fmt::format("{}x{}x{}", m, k, n); }
  double flops() const { return 2.0 * double(m) * double(k) * double(n); }
};

void print_gemm(const std::string& impl, hg::DType dtype, const GemmShape& shape, double us,
                const std::string& kernel) {
  fmt::print(
      "{{\"bench\": \"gemm\", \"impl\": \"{}\", \"dtype\": \"{}\", \"shape\": \"{}\", "
      "\"gflops\": {:.1f}, \"us\": {:.1f}, \"kernel\": \"{}\"}}\n",
      impl, hg::dtype_name(dtype), shape.name(), shape.flops() / us * 1e-3, us, kernel);
  std::fflush(stdout);
}

#if HALFGRAD_HAS_ONEDNN
// The peer: a oneDNN matmul primitive made and run the way a oneDNN user would, on the same
// inputs (2-D, row-major, default attributes). Returns its median time, or nullopt (with a
// JSON line saying why) when oneDNN has no matmul for the dtype.
std::optional<double> time_raw_onednn(const Options& options, const hg::Tensor& a,
                                      const hg::Tensor& b, const GemmShape& shape) {
  using dnnl::memory;
  memory::data_type type = a.dtype() == hg::kFloat32    ? memory::data_type::f32
                           : a.dtype() == hg::kBFloat16 ? memory::data_type::bf16
                                                        : memory::data_type::f16;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_desc({shape.m, shape.k}, type, memory::format_tag::ab);
  const memory::desc b_desc({shape.k, shape.n}, type, memory::format_tag::ab);
  const memory::desc out_desc({shape.m, shape.n}, type, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_desc, b_desc, out_desc), engine);
  } catch (const dnnl::error& e) {
    fmt::print(
        "{{\"bench\": \"gemm\", \"impl\": \"onednn\", \"dtype\": \"{}\", \"shape\": \"{}\", "
        "\"error\": \"no matmul for this dtype on this CPU\"}}\n",
        hg::dtype_name(a.dtype()), shape.name());
    return std::nullopt;
  }
  const dnnl::matmul matmul(pd);
  memory a_memory(a_desc, engine), b_memory(b_desc, engine), out_memory(out_desc, engine);
  std::memcpy(a_memory.get_data_handle(), a.data_ptr(), a.nbytes());
  std::memcpy(b_memory.get_data_handle(), b.data_ptr(), b.nbytes());
  const std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, b_memory}, {DNNL_ARG_DST, out_memory}};
  const double us = median_us(options, [&] {
    matmul.execute(stream, args);
    stream.wait();
  });
  print_gemm("onednn", a.dtype(), shape, us, pd.impl_info_str());
  return us;
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
#endif

void run_gemm_benchmarks(const Options& options) {
  const std::vector<GemmShape> shapes = {{1024, 1024, 1024}, {4096, 768, 3072}};
  for (const GemmShape& shape : shapes) {
    std::optional<double> onednn_float32_us;
    for (hg::DType dtype : {hg::kFloat32, hg::kBFloat16, hg::kFloat16}) {
      hg::manual_seed(1);
      const hg::Tensor a = hg::randn({1, shape.m, shape.k}, dtype);
      const hg::Tensor b = hg::randn({1, shape.k, shape.n}, dtype);
      const hg::Tensor out = hg::empty({1, shape.m, shape.n}, dtype);
      const double us = median_us(options, [&] { hg::cpu::gemm(a, b, out); });
      print_gemm("halfgrad", dtype, shape, us, hg::cpu::gemm_kernel_name(dtype));
      if (dtype == hg::kFloat32) {
        // The implementation gemm does not use for float32, for the record.
        const hg::cpu::GemmImpl other = hg::cpu::gemm_backend(dtype) == "onednn"
                                            ? hg::cpu::GemmImpl::Eigen
                                            : hg::cpu::GemmImpl::OneDNN;
        if (other == hg::cpu::GemmImpl::Eigen || HALFGRAD_HAS_ONEDNN) {
          const double other_us = median_us(options, [&] { hg::cpu::gemm_with(other, a, b, out); });
          const bool eigen = other == hg::cpu::GemmImpl::Eigen;
          print_gemm(eigen ? "halfgrad-eigen" : "halfgrad-onednn", dtype, shape, other_us,
                     eigen ? "eigen" : "onednn");
        }
      }
#if HALFGRAD_HAS_ONEDNN
      std::optional<double> peer_us = time_raw_onednn(options, a, b, shape);
      if (dtype == hg::kFloat32) onednn_float32_us = peer_us;
      if (peer_us) {
        print_ratio(dtype, shape, us, *peer_us, dtype);
      } else if (onednn_float32_us) {
        // No 16-bit matmul of this dtype in oneDNN here: compare with its float32 GEMM.
        print_ratio(dtype, shape, us, *onednn_float32_us, hg::kFloat32);
      }
#endif
    }
  }
}

// ---- main ---------------------------------------------------------------------------------

struct Section {
  const char* name;
  void (*run)(const Options&);
};

constexpr Section kSections[] = {
    {"gemm", run_gemm_benchmarks},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hg-bench-ops: halfgrad's CPU ops against raw oneDNN, as JSON lines"};
  Options options;
  std::vector<std::string> names = {"all"};
  for (const Section& section : kSections) names.push_back(section.name);
  app.add_option("--threads", options.threads, "OpenMP threads")->check(CLI::PositiveNumber);
  app.add_option("--reps", options.reps, "timed calls per measurement (the median is kept)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "untimed calls before timing")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--only", options.only, "the section to run")->check(CLI::IsMember(names));
  CLI11_PARSE(app, argc, argv);

  omp_set_num_threads(options.threads);
  for (const Section& section : kSections) {
    if (options.only == "all" || options.only == section.name) section.run(options);
  }
  return 0;
}
