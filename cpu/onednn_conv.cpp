// conv2d's oneDNN convolution primitives, kept in a process-wide cache, and the per-class
// choice between them and the im2col path by measurement (NOTE [oneDNN convolutions]).
#include "halfgrad/cpu/onednn_conv.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "halfgrad/config.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/kernel_choices.h"
#include "halfgrad/cpu/linalg_detail.h"

#if HALFGRAD_HAS_ONEDNN
#include <dnnl.hpp>

#include "halfgrad/cpu/onednn_runtime.h"
#endif

namespace hg::cpu {

// NOTE [oneDNN convolutions] conv2d's three products (y, dx, and dweight with dbias) can run
// on oneDNN's convolution primitives (convolution_forward with the bias, backward_data,
// backward_weights with the bias gradient) instead of im2col and the CPU GEMM (NOTE [conv2d's
// matrix product] in cpu/conv.cpp), which skips the per-image columns and col2im (about a
// tenth of the CNN's training step). The primitives choose their layouts (format_tag::any),
// and the NCHW tensors are reordered into and out of them in per-thread buffers around each
// call: with the plain nchw/oihw layouts asked for, oneDNN 2.6 picked its own im2col GEMM
// ("gemm:jit") on a 2-core Xeon with AMX, 1.2-6x slower than halfgrad's im2col, while with
// its layouts it runs its direct kernels (jit:avx512_core, AMX brgconv for bfloat16), the
// reorders included 1.5-4x faster on the CNN's second convolution.
//
// The primitives follow NOTE [oneDNN matmul cache]: a process-wide map, behind a mutex, keyed
// by the direction, dtype, every dim, stride, padding, dilation and group count, whether a
// bias takes part, and the OpenMP thread count; the scratchpads (the primitive's and the
// reorders') are the caller's (per-thread thread_buffers), each thread has its own stream,
// and fpmath is strict (float32 stays float32). A problem for which oneDNN offers only a
// reference kernel ("ref:any"), or none, is cached as unusable and runs on im2col. Semantics
// are im2col's: float32 or bfloat16 inputs, float32 accumulation, y and dx rounded once into
// the inputs' dtype; dweight and dbias are asked of oneDNN in float32 and rounded once by
// conv2d_backward, as im2col's are. float16, which oneDNN 2.6 convolves on no x86 CPU, runs the
// float32 primitives on tensors widened once (as im2col widens them: compute_dtype in
// cpu/conv.cpp), its y and dx rounded once; so does bfloat16 on a CPU where oneDNN has no
// bfloat16 kernel (no AVX-512: a 2-core AMD EPYC with AVX2 found no bfloat16 primitive, and
// its bfloat16 CNN step ran on im2col at 1.05 of float32 while float16 took 1.00). float64
// never comes here.
//
// Which path runs is measured, like the GEMM's (NOTE [GEMM path by measurement]): the first
// product of a class (direction, dtype, thread count and the full geometry: a network has few
// convolutions, each met on every step) runs both paths into its output, a warm-up run each
// and then three timed rounds taking turns, and keeps the faster for the process, unless
// im2col is within 10 % of it (im2col stays, so that a noisy machine does not flip kernels).
// The weight gradient's oneDNN time includes dbias when both are wanted (im2col's does not:
// the comparison leans to im2col). The path kept runs last, so the product that measured has
// the bits of all later ones. HALFGRAD_CPU_CONV=auto|onednn|im2col or set_conv_path fixes the
// path (bits reproducible across processes; onednn still takes im2col where oneDNN has no
// kernel), and conv_choices() and hg-info show what was chosen, with oneDNN's kernel.

namespace conv_detail {

namespace {

using Clock = std::chrono::steady_clock;

int threads_here() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// A convolution's class: direction, dtype, the whole geometry, whether a bias takes part, the
// thread count; the last slot is free for the caller (the choices' table puts the path set).
using ConvKey = std::array<int64_t, 21>;
// The place of the thread count in a key (a restored choice reads it back).
constexpr size_t kKeyThreads = 17;

ConvKey key_of(ConvDirection direction, DType dtype, const ConvGeometry& g, bool bias) {
  ConvKey key{int64_t(direction),
              int64_t(dtype),
              g.N,
              g.C,
              g.H,
              g.W,
              g.O,
              g.kH,
              g.kW,
              g.sH,
              g.sW,
              g.pH,
              g.pW,
              g.dH,
              g.dW,
              g.groups,
              bias,
              0,
              g.Hout,
              g.Wout,
              0};
  key[kKeyThreads] = threads_here();
  return key;
}

// ---- the primitives ---------------------------------------------------------------------

#if HALFGRAD_HAS_ONEDNN

using Dims = dnnl::memory::dims;
using linalg_detail::kScratchpadSlot;
using linalg_detail::thread_buffer;

dnnl::engine& conv_engine() { return onednn_runtime::engine(); }
dnnl::stream& conv_stream() { return onednn_runtime::thread_stream(); }

dnnl::memory::data_type onednn_type(DType dtype) {
  return onednn_runtime::data_type(dtype, "conv2d: convolution");
}

// One tensor argument of a primitive: the caller's plain layout, the one the primitive runs
// on (format_tag::any: oneDNN's blocked or channels-last choice), and the reorder between
// them when they differ (into the primitive's layout for an input, out of it for an output),
// with the per-thread buffer slot the reordered copy lives in.
struct ConvOperand {
  int arg = 0;
  dnnl::memory::desc user, inner;
  dnnl::reorder reorder;
  dnnl::memory::desc reorder_scratchpad;
  bool output = false;
  bool reordered = false;
  int slot = 0;
};

struct CachedConv {
  dnnl::primitive primitive;
  std::vector<ConvOperand> operands;
  dnnl::memory::desc scratchpad;
  std::string implementation;
  bool usable = false;
};

using tag = dnnl::memory::format_tag;

dnnl::memory::desc image_desc(int64_t n, int64_t c, int64_t h, int64_t w,
                              dnnl::memory::data_type dt, tag layout) {
  return dnnl::memory::desc({n, c, h, w}, dt, layout);
}

dnnl::memory::desc weight_desc(const ConvGeometry& g, dnnl::memory::data_type dt, bool any) {
  if (g.groups == 1)
    return dnnl::memory::desc({g.O, g.C, g.kH, g.kW}, dt, any ? tag::any : tag::oihw);
  return dnnl::memory::desc({g.groups, g.Og, g.Cg, g.kH, g.kW}, dt, any ? tag::any : tag::goihw);
}

struct Geometry {
  Dims strides, dilates, padding;
};

Geometry geometry_of(const ConvGeometry& g) {
  return {{g.sH, g.sW}, {g.dH - 1, g.dW - 1} /* oneDNN counts the gaps */, {g.pH, g.pW}};
}

dnnl::primitive_attr conv_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_fpmath_mode(dnnl::fpmath_mode::strict);
  return attr;
}

// The forward primitive descriptor, layouts left to oneDNN (also the backward ones' hint).
dnnl::convolution_forward::primitive_desc forward_pd(DType dtype, const ConvGeometry& g,
                                                     bool bias) {
  const dnnl::memory::data_type dt = onednn_type(dtype);
  const Geometry k = geometry_of(g);
  const auto src = image_desc(g.N, g.C, g.H, g.W, dt, tag::any);
  const auto dst = image_desc(g.N, g.O, g.Hout, g.Wout, dt, tag::any);
  const auto w = weight_desc(g, dt, true);
  const dnnl::memory::desc bias_desc({g.O}, dt, tag::x);
  const auto desc =
      bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, src, w, bias_desc,
                                             dst, k.strides, k.dilates, k.padding, k.padding)
           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, src, w, dst,
                                             k.strides, k.dilates, k.padding, k.padding);
  return {desc, conv_attr(), conv_engine()};
}

// The operand for arg, with its reorder when the primitive's layout differs from the user's.
ConvOperand operand(int arg, const dnnl::memory::desc& user, const dnnl::memory::desc& inner,
                    bool output, int slot) {
  ConvOperand op;
  op.arg = arg;
  op.user = user;
  op.inner = inner;
  op.output = output;
  op.slot = slot;
  op.reordered = user != inner;
  if (op.reordered) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::engine& engine = conv_engine();
    const dnnl::reorder::primitive_desc pd =
        output ? dnnl::reorder::primitive_desc(engine, inner, engine, user, attr)
               : dnnl::reorder::primitive_desc(engine, user, engine, inner, attr);
    op.reorder = dnnl::reorder(pd);
    op.reorder_scratchpad = pd.scratchpad_desc();
  }
  return op;
}

std::shared_ptr<const CachedConv> create_conv(ConvDirection direction, DType dtype,
                                              const ConvGeometry& g, bool bias) {
  auto made = std::make_shared<CachedConv>();
  using linalg_detail::kATileSlot;
  using linalg_detail::kBiasSlot;
  using linalg_detail::kBTileSlot;
  using linalg_detail::kOutTileSlot;
  try {
    const dnnl::memory::data_type dt = onednn_type(dtype), f32 = dnnl::memory::data_type::f32;
    const Geometry k = geometry_of(g);
    const dnnl::engine& engine = conv_engine();
    const auto plain_src = image_desc(g.N, g.C, g.H, g.W, dt, tag::nchw);
    const auto plain_dst = image_desc(g.N, g.O, g.Hout, g.Wout, dt, tag::nchw);
    const auto plain_w = weight_desc(g, dt, false);
    const dnnl::memory::desc plain_bias({g.O}, dt, tag::x);
    std::vector<ConvOperand>& ops = made->operands;
    switch (direction) {
      case ConvDirection::Forward: {
        const auto pd = forward_pd(dtype, g, bias);
        made->implementation = pd.impl_info_str();
        made->primitive = dnnl::convolution_forward(pd);
        made->scratchpad = pd.scratchpad_desc();
        ops.push_back(operand(DNNL_ARG_SRC, plain_src, pd.src_desc(), false, kATileSlot));
        ops.push_back(operand(DNNL_ARG_WEIGHTS, plain_w, pd.weights_desc(), false, kBTileSlot));
        if (bias)
          ops.push_back(operand(DNNL_ARG_BIAS, plain_bias, pd.bias_desc(), false, kBiasSlot));
        ops.push_back(operand(DNNL_ARG_DST, plain_dst, pd.dst_desc(), true, kOutTileSlot));
        break;
      }
      case ConvDirection::InputGrad: {
        const auto hint = forward_pd(dtype, g, false);
        const dnnl::convolution_backward_data::desc desc(
            dnnl::algorithm::convolution_direct, image_desc(g.N, g.C, g.H, g.W, dt, tag::any),
            weight_desc(g, dt, true), image_desc(g.N, g.O, g.Hout, g.Wout, dt, tag::any), k.strides,
            k.dilates, k.padding, k.padding);
        const dnnl::convolution_backward_data::primitive_desc pd(desc, conv_attr(), engine, hint);
        made->implementation = pd.impl_info_str();
        made->primitive = dnnl::convolution_backward_data(pd);
        made->scratchpad = pd.scratchpad_desc();
        ops.push_back(operand(DNNL_ARG_DIFF_DST, plain_dst, pd.diff_dst_desc(), false, kATileSlot));
        ops.push_back(operand(DNNL_ARG_WEIGHTS, plain_w, pd.weights_desc(), false, kBTileSlot));
        ops.push_back(
            operand(DNNL_ARG_DIFF_SRC, plain_src, pd.diff_src_desc(), true, kOutTileSlot));
        break;
      }
      case ConvDirection::WeightGrad: {
        const auto hint = forward_pd(dtype, g, bias);
        // dweight and dbias in float32, rounded once by the caller.
        const dnnl::memory::desc db({g.O}, f32, tag::x);
        const auto src = image_desc(g.N, g.C, g.H, g.W, dt, tag::any);
        const auto dst = image_desc(g.N, g.O, g.Hout, g.Wout, dt, tag::any);
        const auto dw = weight_desc(g, f32, true);
        const auto desc = bias ? dnnl::convolution_backward_weights::desc(
                                     dnnl::algorithm::convolution_direct, src, dw, db, dst,
                                     k.strides, k.dilates, k.padding, k.padding)
                               : dnnl::convolution_backward_weights::desc(
                                     dnnl::algorithm::convolution_direct, src, dw, dst, k.strides,
                                     k.dilates, k.padding, k.padding);
        const dnnl::convolution_backward_weights::primitive_desc pd(desc, conv_attr(), engine,
                                                                    hint);
        made->implementation = pd.impl_info_str();
        made->primitive = dnnl::convolution_backward_weights(pd);
        made->scratchpad = pd.scratchpad_desc();
        ops.push_back(operand(DNNL_ARG_DIFF_DST, plain_dst, pd.diff_dst_desc(), false, kATileSlot));
        ops.push_back(operand(DNNL_ARG_SRC, plain_src, pd.src_desc(), false, kBTileSlot));
        ops.push_back(operand(DNNL_ARG_DIFF_WEIGHTS, weight_desc(g, f32, false),
                              pd.diff_weights_desc(), true, kOutTileSlot));
        if (bias)
          ops.push_back(operand(DNNL_ARG_DIFF_BIAS, db, pd.diff_bias_desc(), true, kBiasSlot));
        break;
      }
    }
    made->usable = !made->implementation.starts_with("ref");
  } catch (const dnnl::error& e) {  // no implementation for this dtype or geometry
    made->implementation = e.what();
    made->usable = false;
  }
  return made;
}

class ConvCache {
 public:
  std::shared_ptr<const CachedConv> get(ConvDirection direction, DType dtype, const ConvGeometry& g,
                                        bool bias) {
    return cache_.get(key_of(direction, dtype, g, bias),
                      [&] { return create_conv(direction, dtype, g, bias); });
  }

 private:
  onednn_runtime::PrimitiveCache<ConvKey, CachedConv, 1024> cache_;
};

ConvCache& conv_cache() {
  static ConvCache cache;
  return cache;
}

// Runs conv on the caller's tensors (data, by argument), reordering into and out of the
// primitive's layouts in per-thread buffers; errors become hg::Error.
void execute(const CachedConv& conv, const std::unordered_map<int, const Tensor*>& data,
             const ConvGeometry& g, ConvDirection direction, DType dtype) {
  using linalg_detail::kScratchpadSlot;
  using linalg_detail::kSmallPackSlot;
  try {
    const dnnl::engine& engine = conv_engine();
    dnnl::stream& stream = conv_stream();
    // An operand's reorder between its two layouts, with its scratchpad in a thread buffer.
    const auto reorder = [&](const ConvOperand& op, const dnnl::memory& from,
                             const dnnl::memory& to) {
      std::unordered_map<int, dnnl::memory> reorder_args = {{DNNL_ARG_FROM, from},
                                                            {DNNL_ARG_TO, to}};
      if (op.reorder_scratchpad.get_size() > 0) {
        reorder_args.emplace(DNNL_ARG_SCRATCHPAD,
                             dnnl::memory(op.reorder_scratchpad, engine,
                                          linalg_detail::thread_buffer(
                                              kSmallPackSlot, op.reorder_scratchpad.get_size())));
      }
      op.reorder.execute(stream, reorder_args);
    };
    std::unordered_map<int, dnnl::memory> args;
    std::vector<std::pair<dnnl::memory, dnnl::memory>> user_and_inner(conv.operands.size());
    for (size_t i = 0; i < conv.operands.size(); ++i) {
      const ConvOperand& op = conv.operands[i];
      const dnnl::memory user(op.user, engine, const_cast<void*>(data.at(op.arg)->data_ptr()));
      if (!op.reordered) {
        args.emplace(op.arg, user);
        continue;
      }
      const dnnl::memory inner(op.inner, engine,
                               linalg_detail::thread_buffer(op.slot, op.inner.get_size()));
      user_and_inner[i] = {user, inner};
      args.emplace(op.arg, inner);
      if (!op.output) reorder(op, user, inner);
    }
    const size_t scratchpad_bytes = conv.scratchpad.get_size();
    if (scratchpad_bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory(conv.scratchpad, engine,
                                linalg_detail::thread_buffer(kScratchpadSlot, scratchpad_bytes)));
    }
    conv.primitive.execute(stream, args);
    for (size_t i = 0; i < conv.operands.size(); ++i) {
      const ConvOperand& op = conv.operands[i];
      if (!op.reordered || !op.output) continue;
      reorder(op, user_and_inner[i].second, user_and_inner[i].first);
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    HG_ERROR(
        "conv2d: oneDNN's {} convolution ({}) failed on {} x [{}, {}, {}, {}], w [{}, {}, "
        "{}, {}]: {}",
        conv_direction_name(direction), conv.implementation, dtype, g.N, g.C, g.H, g.W, g.O, g.Cg,
        g.kH, g.kW, e.what());
  }
}

#endif  // HALFGRAD_HAS_ONEDNN

// ---- the choices ------------------------------------------------------------------------

std::atomic<ConvPath> set_path{ConvPath::Auto};

using Table = linalg_detail::ChoiceTable<ConvChoice, 21>;
using Choice = Table::Choice;
using ClassKey = Table::Key;

Table& table() {
  static Table instance;
  return instance;
}

void forget_choices() { table().clear(); }

ConvPath parse_path(std::string_view name) {
  for (ConvPath path : {ConvPath::Auto, ConvPath::OneDNN, ConvPath::Im2col}) {
    if (conv_path_name(path) == name) return path;
  }
  HG_ERROR("HALFGRAD_CPU_CONV: expected auto, onednn or im2col, got \"{}\"", name);
}

// HALFGRAD_CPU_CONV, read once before the first conv2d; a bad setting fails every conv2d.
void ensure_environment_read() {
  static const std::string failure = [] {
    const char* raw = std::getenv("HALFGRAD_CPU_CONV");
    if (raw == nullptr || *raw == '\0') return std::string();
    try {
      set_path = parse_path(raw);
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  if (!failure.empty()) HG_ERROR("{}", failure);
}

std::string class_name(const ConvGeometry& g, bool bias) {
  std::string name = fmt::format("x [{}, {}, {}, {}], w [{}, {}, {}, {}]", g.N, g.C, g.H, g.W, g.O,
                                 g.Cg, g.kH, g.kW);
  if (g.sH != 1 || g.sW != 1) name += fmt::format(", stride ({}, {})", g.sH, g.sW);
  if (g.pH != 0 || g.pW != 0) name += fmt::format(", padding ({}, {})", g.pH, g.pW);
  if (g.dH != 1 || g.dW != 1) name += fmt::format(", dilation ({}, {})", g.dH, g.dW);
  if (g.groups != 1) name += fmt::format(", groups {}", g.groups);
  if (bias) name += ", bias";
  return name;
}

double seconds_of(const std::function<void()>& run, int reps) {
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < reps; ++i) run();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::shared_ptr<Choice> make_choice(ConvDirection direction, DType dtype, const ConvGeometry& g,
                                    bool bias, const std::function<bool()>& onednn,
                                    const std::function<void()>& im2col) {
  auto made = std::make_shared<Choice>();
  ConvChoice& info = made->info;
  info.dtype = dtype;
  info.direction = direction;
  info.shape_class = class_name(g, bias);
  info.threads = threads_here();
  const ConvPath set = set_path.load();
#if HALFGRAD_HAS_ONEDNN
  const auto conv = conv_cache().get(direction, onednn_conv_dtype(dtype), g, bias);
  info.onednn_kernel = conv->implementation;
  const bool usable = conv->usable;
#else
  info.onednn_kernel = "not built";
  const bool usable = false;
#endif
  info.set = set != ConvPath::Auto;
  if (!usable || set == ConvPath::Im2col) {
    info.path = ConvPath::Im2col;
    return made;
  }
  if (set == ConvPath::OneDNN) {
    info.path = ConvPath::OneDNN;
    return made;
  }
  // Warm-up runs (primitive run once, buffers grown), which also size the rounds.
  const std::function<void()> run_onednn = [&] {
    HG_CHECK(onednn(), "conv2d: internal error: oneDNN refused a primitive it had made");
  };
  const std::array<const std::function<void()>*, 2> runs = {&run_onednn, &im2col};
  std::array<int, 2> reps{};
  for (size_t i = 0; i < 2; ++i) {
    const double once = seconds_of(*runs[i], 1);
    reps[i] = int(std::clamp(200e-6 / std::max(once, 1e-9), 1.0, 100.0));
  }
  std::array<double, 2> best = {1e30, 1e30};
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < 2; ++i) {
      best[i] = std::min(best[i], seconds_of(*runs[i], reps[i]) / reps[i]);
    }
  }
  info.microseconds = {{ConvPath::OneDNN, best[0] * 1e6}, {ConvPath::Im2col, best[1] * 1e6}};
  info.measured = true;
  info.path = best[1] <= best[0] * 1.1 ? ConvPath::Im2col : ConvPath::OneDNN;
  return made;
}

}  // namespace

void run_conv(ConvDirection direction, DType dtype, const ConvGeometry& g, bool bias,
              const std::function<bool()>& onednn, const std::function<void()>& im2col) {
  ensure_environment_read();
  const bool empty = g.N == 0 || g.C == 0 || g.O == 0 || g.L() == 0;
  if (!onednn_conv_candidate(dtype) || empty) {
    im2col();
    return;
  }
  ClassKey key = key_of(direction, dtype, g, bias);
  key.back() = int64_t(set_path.load());
  Table& shared = table();
  std::shared_ptr<Choice> choice;
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    if (auto found = shared.choices.find(key); found != shared.choices.end()) {
      choice = found->second;
    }
  }
  if (choice == nullptr) {
    std::shared_ptr<Choice> made = make_choice(direction, dtype, g, bias, onednn, im2col);
    std::lock_guard<std::mutex> lock(shared.mutex);
    auto [entry, inserted] = shared.choices.emplace(key, made);
    if (inserted) shared.in_order.push_back(made);
    choice = entry->second;
  }
  choice->calls.fetch_add(1, std::memory_order_relaxed);
  if (choice->info.path == ConvPath::OneDNN && onednn()) return;
  im2col();
}

DType onednn_conv_dtype(DType dtype) {
  const bool widened = dtype == kFloat16 || (dtype == kBFloat16 && !gemm_runs_natively(dtype));
  return widened ? kFloat32 : dtype;
}

bool onednn_conv_candidate(DType dtype) {
  return HALFGRAD_HAS_ONEDNN && (dtype == kFloat32 || dtype == kBFloat16 || dtype == kFloat16);
}

#if HALFGRAD_HAS_ONEDNN

bool onednn_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                         const ConvGeometry& g) {
  const auto conv = conv_cache().get(ConvDirection::Forward, x.dtype(), g, bias.defined());
  if (!conv->usable) return false;
  execute(*conv,
          {{DNNL_ARG_SRC, &x}, {DNNL_ARG_WEIGHTS, &w}, {DNNL_ARG_BIAS, &bias}, {DNNL_ARG_DST, &y}},
          g, ConvDirection::Forward, x.dtype());
  return true;
}

bool onednn_conv_input_grad(const Tensor& dy, const Tensor& w, const Tensor& dx,
                            const ConvGeometry& g) {
  const auto conv = conv_cache().get(ConvDirection::InputGrad, dy.dtype(), g, false);
  if (!conv->usable) return false;
  execute(*conv, {{DNNL_ARG_DIFF_DST, &dy}, {DNNL_ARG_WEIGHTS, &w}, {DNNL_ARG_DIFF_SRC, &dx}}, g,
          ConvDirection::InputGrad, dy.dtype());
  return true;
}

bool onednn_conv_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw,
                             const Tensor& dbias, const ConvGeometry& g) {
  const auto conv = conv_cache().get(ConvDirection::WeightGrad, x.dtype(), g, dbias.defined());
  if (!conv->usable) return false;
  execute(*conv,
          {{DNNL_ARG_DIFF_DST, &dy},
           {DNNL_ARG_SRC, &x},
           {DNNL_ARG_DIFF_WEIGHTS, &dw},
           {DNNL_ARG_DIFF_BIAS, &dbias}},
          g, ConvDirection::WeightGrad, x.dtype());
  return true;
}

#else

bool onednn_conv_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const ConvGeometry&) {
  return false;
}
bool onednn_conv_input_grad(const Tensor&, const Tensor&, const Tensor&, const ConvGeometry&) {
  return false;
}
bool onednn_conv_weight_grad(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const ConvGeometry&) {
  return false;
}

#endif  // HALFGRAD_HAS_ONEDNN

}  // namespace conv_detail

std::string_view conv_path_name(ConvPath path) {
  switch (path) {
    case ConvPath::Auto:
      return "auto";
    case ConvPath::OneDNN:
      return "onednn";
    case ConvPath::Im2col:
      return "im2col";
  }
  return "unknown";
}

std::string_view conv_direction_name(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward:
      return "forward";
    case ConvDirection::InputGrad:
      return "input grad";
    case ConvDirection::WeightGrad:
      return "weight grad";
  }
  return "unknown";
}

void set_conv_path(ConvPath path) {
  conv_detail::ensure_environment_read();  // so that the environment cannot undo this later
  conv_detail::set_path = path;
  conv_detail::forget_choices();
}

ConvPath get_conv_path() {
  conv_detail::ensure_environment_read();
  return conv_detail::set_path.load();
}

std::vector<ConvChoice> conv_choices() {
  conv_detail::Table& shared = conv_detail::table();
  std::lock_guard<std::mutex> lock(shared.mutex);
  std::vector<ConvChoice> choices;
  for (const auto& choice : shared.in_order) {
    choices.push_back(choice->info);
    choices.back().calls = choice->calls.load(std::memory_order_relaxed);
  }
  return choices;
}

std::string describe(const ConvChoice& choice) {
  std::string text =
      fmt::format("{} {} {}; {} thread{}: {}", dtype_name(choice.dtype),
                  conv_direction_name(choice.direction), choice.shape_class, choice.threads,
                  choice.threads == 1 ? "" : "s", conv_path_name(choice.path));
  if (choice.measured) {
    std::vector<std::string> times;
    for (const auto& [path, us] : choice.microseconds) {
      times.push_back(fmt::format("{} {:.3g} us", conv_path_name(path), us));
    }
    text += fmt::format(" (measured: {})", fmt::join(times, ", "));
  } else if (choice.set) {
    text += " (set)";
  } else if (choice.restored) {
    text += " (restored)";
  }
  text += fmt::format(" [oneDNN: {}]", choice.onednn_kernel);
  return text + fmt::format(", {} call{}", choice.calls, choice.calls == 1 ? "" : "s");
}

namespace kernel_choices_detail {

std::vector<SavedChoice> saved_conv_choices() {
  return conv_detail::table().saved([](ConvPath path) { return conv_path_name(path); });
}

int64_t restore_conv_choices(const std::vector<SavedChoice>& saved) {
  conv_detail::ensure_environment_read();
  // Choices are measured under Auto only (the key's last place holds the path set, 0).
  if (conv_detail::set_path.load() != ConvPath::Auto) return 0;
  int64_t taken = 0;
  for (const SavedChoice& entry : saved) {
    if (entry.key.size() != std::tuple_size_v<conv_detail::ClassKey> ||
        entry.key.back() != int64_t(ConvPath::Auto)) {
      continue;
    }
    const int64_t direction = entry.key[0];
    if (direction < int64_t(ConvDirection::Forward) ||
        direction > int64_t(ConvDirection::WeightGrad)) {
      continue;
    }
    DType dtype = kFloat32;
    if (entry.key[1] == int64_t(kBFloat16)) dtype = kBFloat16;
    if (entry.key[1] == int64_t(kFloat16)) dtype = kFloat16;
    if (int64_t(dtype) != entry.key[1] || !conv_detail::onednn_conv_candidate(dtype)) continue;
    ConvPath path;
    if (entry.path == conv_path_name(ConvPath::OneDNN)) {
      path = ConvPath::OneDNN;
    } else if (entry.path == conv_path_name(ConvPath::Im2col)) {
      path = ConvPath::Im2col;
    } else {
      continue;
    }
    auto made = std::make_shared<conv_detail::Choice>();
    made->info.dtype = dtype;
    made->info.direction = ConvDirection(direction);
    made->info.shape_class = entry.shape_class;
    made->info.threads = int(entry.key[conv_detail::kKeyThreads]);
    made->info.path = path;
    made->info.restored = true;
    made->info.onednn_kernel = "not asked (restored)";
    conv_detail::ClassKey key;
    std::copy(entry.key.begin(), entry.key.end(), key.begin());
    conv_detail::table().replace(key, std::move(made));
    ++taken;
  }
  return taken;
}

}  // namespace kernel_choices_detail

namespace detail {

int64_t clear_conv_choices() {
  const auto cleared = int64_t(conv_choices().size());
  conv_detail::forget_choices();
  return cleared;
}

}  // namespace detail

}  // namespace hg::cpu
