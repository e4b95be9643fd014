// PrecisionAudit on small models whose ops are known: its errors against float64 math done here,
// its module and backward attribution, its outputs (table, CSV, SVG), and that it changes nothing
// about the step it watches.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

struct Errors {
  double rel = 0;
  double max_ulps = 0;
};

// y = x W^T + b in float64 from the tensors' values (x: [N, I], W: [O, I], b: [O]).
std::vector<double> linear_reference(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const std::vector<double> xv = x.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> wv = weight.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> bv = bias.to(kFloat64).contiguous().to_vector<double>();
  const int64_t n = x.size(0), in = x.size(1), out = weight.size(0);
  std::vector<double> y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = bv[size_t(o)];
      for (int64_t k = 0; k < in; ++k) acc += xv[size_t(i * in + k)] * wv[size_t(o * in + k)];
      y[size_t(i * out + o)] = acc;
    }
  }
  return y;
}

// ||y - r|| / ||r|| and the largest |y - r| in ulps of `mantissa_bits`-bit normals.
Errors errors_of(const Tensor& y, const std::vector<double>& reference, int mantissa_bits) {
  const std::vector<double> yv = y.to(kFloat64).contiguous().to_vector<double>();
  REQUIRE(yv.size() == reference.size());
  double diff2 = 0, ref2 = 0, max_ulps = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    const double diff = std::abs(yv[i] - reference[i]);
    diff2 += diff * diff;
    ref2 += reference[i] * reference[i];
    const double ulp = std::exp2(std::floor(std::log2(std::abs(reference[i]))) - mantissa_bits);
    max_ulps = std::max(max_ulps, diff / ulp);
  }
  return {std::sqrt(diff2 / ref2), max_ulps};
}

const amp::OpPrecision* find_op(const amp::PrecisionAudit& audit, OpId op, bool backward,
                                const std::string& module = "*") {
  for (const amp::OpPrecision& entry : audit.ops()) {
    if (entry.op == op && entry.backward == backward && (module == "*" || entry.module == module)) {
      return &entry;
    }
  }
  return nullptr;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("PrecisionAudit finds float32 ops within float32 rounding of float64",
          "[amp][precision_audit]") {
  manual_seed(11);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(16, 32), nn::GELU(), nn::LayerNorm({32}),
                                                nn::Linear(32, 4));
  const Tensor x = randn({8, 16});
  amp::PrecisionAudit audit(model.get());
  const Tensor y = model->forward(x);
  audit.stop();

  int measured = 0;
  for (const amp::OpPrecision& entry : audit.ops()) {
    if (!entry.measured()) continue;
    ++measured;
    INFO(op_name(entry.op) << " in " << entry.module);
    CHECK(entry.dtype == kFloat32);
    CHECK(entry.rel_error < 1e-6);
    CHECK(entry.unit_roundoff == std::ldexp(1.0, -24));
  }
  CHECK(measured >= 4);  // linear, gelu, layer_norm, linear

  // The last linear's error, computed here from its float32 input.
  const amp::OpPrecision* last = find_op(audit, OpId::linear, false, "3");
  REQUIRE(last != nullptr);
  CHECK(last->module_type == "Linear");
  NoGradGuard no_grad;
  const Tensor hidden = (*model)[2]->forward(gelu((*model)[0]->forward(x)));
  const std::vector<Tensor> params = model->parameters();
  const Errors expected = errors_of(y, linear_reference(hidden, params[4], params[5]), 23);
  CHECK(expected.rel > 0);  // float32 did round something
  CHECK(last->rel_error == Approx(expected.rel).epsilon(1e-6));
  CHECK(last->max_ulps == Approx(expected.max_ulps).epsilon(1e-6));
}

TEST_CASE("PrecisionAudit measures a bfloat16 linear against float64 on its float32 inputs",
          "[amp][precision_audit]") {
  manual_seed(12);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(64, 32));
  const Tensor x = randn({16, 64});
  amp::PrecisionAudit audit(model.get());
  Tensor y;
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    y = model->forward(x);
  }
  audit.stop();
  REQUIRE(y.dtype() == kBFloat16);
  const amp::OpPrecision* linear = find_op(audit, OpId::linear, false, "0");
  REQUIRE(linear != nullptr);
  REQUIRE(linear->measured());
  CHECK(linear->dtype == kBFloat16);
  CHECK(linear->policy == CastPolicy::LowerPrecision);
  CHECK(linear->input_dtypes == std::vector<DType>{kFloat32, kFloat32, kFloat32});
  const std::vector<Tensor> params = model->parameters();
  const Errors expected = errors_of(y, linear_reference(x, params[0], params[1]), 7);
  CHECK(linear->rel_error == Approx(expected.rel).epsilon(1e-9));
  CHECK(linear->max_ulps == Approx(expected.max_ulps).epsilon(1e-9));
  // The size bfloat16 implies: the roundings of 64-term dot products' inputs and of the output
  // are a fraction of u = 2^-8 to a few u, far above float32's 6e-8.
  const double u = std::ldexp(1.0, -8);
  CHECK(linear->unit_roundoff == u);
  CHECK(linear->rel_error > 0.1 * u);
  CHECK(linear->rel_error < 4 * u);
  CHECK(linear->max_ulps >= 0.5);
}

TEST_CASE("PrecisionAudit leaves an audited step bit-identical to an unaudited one",
          "[amp][precision_audit]") {
  struct Step {
    std::vector<float> loss, grads;
    Generator::State rng;
  };
  auto run_step = [](bool audited) {
    manual_seed(13);
    auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 32), nn::Dropout(0.5), nn::GELU(),
                                                  nn::Linear(32, 4));
    const Tensor x = randn({6, 8});
    std::unique_ptr<amp::PrecisionAudit> audit;
    if (audited) audit = std::make_unique<amp::PrecisionAudit>(model.get());
    Tensor loss;
    {
      amp::Autocast autocast(kCPU, kBFloat16);
      loss = mean(square(model->forward(x).to(kFloat32)));
    }
    loss.backward();
    Step step{loss.to_vector<float>(), {}, default_generator().get_state()};
    for (const Tensor& p : model->parameters()) {
      const std::vector<float> g = p.grad().to_vector<float>();
      step.grads.insert(step.grads.end(), g.begin(), g.end());
    }
    if (audited) {
      // The dropout reran with its own mask: its float64 rerun agrees to rounding.
      const amp::OpPrecision* dropout_op = find_op(*audit, OpId::dropout, false, "1");
      REQUIRE(dropout_op != nullptr);
      REQUIRE(dropout_op->measured());
      CHECK(dropout_op->rel_error < 1e-2);
    }
    return step;
  };
  const Step plain = run_step(false);
  const Step audited = run_step(true);
  CHECK(plain.loss == audited.loss);
  CHECK(plain.grads == audited.grads);
  CHECK(plain.rng.seed == audited.rng.seed);
  CHECK(plain.rng.offset == audited.rng.offset);
}

TEST_CASE("PrecisionAudit audits backward ops and names their modules", "[amp][precision_audit]") {
  manual_seed(14);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 16), nn::GELU(), nn::Linear(16, 4));
  const Tensor x = randn({5, 8});
  amp::PrecisionAudit audit(model.get());
  {
    amp::Autocast autocast(kCPU, kFloat16);
    Tensor loss = sum(model->forward(x).to(kFloat32));
    loss.backward();
  }
  audit.stop();

  // The first Linear's input needs no gradient: its backward is one product, g^T x, an mm.
  int first_linear_products = 0;
  bool gelu_backward = false;
  for (const amp::OpPrecision& entry : audit.ops()) {
    if (!entry.backward || entry.whole_node || !entry.measured()) continue;
    CHECK(entry.dtype == kFloat16);
    CHECK(entry.rel_error < 4 * std::ldexp(1.0, -11));
    if (entry.module == "0" && entry.node == "LinearBackward" && entry.op == OpId::mm) {
      ++first_linear_products;
      CHECK(entry.module_type == "Linear");
    }
    if (entry.module == "1" && entry.node == "GeluBackward") gelu_backward = true;
  }
  CHECK(first_linear_products == 1);
  CHECK(gelu_backward);
  // Each Linear's node is measured as a whole too: its float16 gradients within a few u.
  int linear_nodes = 0;
  for (const amp::OpPrecision& entry : audit.ops()) {
    if (!entry.whole_node || entry.node != "LinearBackward") continue;
    ++linear_nodes;
    CHECK(entry.op == OpId::linear);
    CHECK(entry.module_type == "Linear");
    REQUIRE(entry.measured());
    CHECK(entry.dtype == kFloat16);
    CHECK(entry.rel_error < 4 * std::ldexp(1.0, -11));
  }
  CHECK(linear_nodes == 2);
  const amp::OpPrecision* gelu_op = find_op(audit, OpId::gelu, false);
  REQUIRE(gelu_op != nullptr);
  CHECK(gelu_op->module == "1");
  CHECK(gelu_op->module_type == "GELU");

  const std::vector<amp::ModulePrecision> modules = audit.by_module();
  REQUIRE(modules.size() >= 3);
  CHECK(modules[0].module == "0");
  CHECK(modules[0].forward_ops >= 1);
  CHECK(modules[0].backward_ops >= 1);
  CHECK(modules[1].module == "1");
  CHECK(modules[2].module == "2");
  CHECK_THAT(audit.module_table(), Contains("fwd max rel_error") && Contains("Linear"));
}

TEST_CASE("PrecisionAudit points at the first op whose error grows", "[amp][precision_audit]") {
  // 1 + 2^-9 rounds to 1 in bfloat16, so a bfloat16 linear sums 1 - 1 = 0 where float64 gives
  // 2^-9: a relative error of 1. The exp before it is float32 and exact to rounding.
  auto model = std::make_shared<nn::Sequential>(nn::Linear(2, 1, /*bias=*/false));
  {
    NoGradGuard no_grad;
    model->parameters()[0].fill_(1.0);
  }
  const Tensor x = tensor<float>({0.0f, 0.0f}, {1, 2});
  const Tensor shifted = tensor<float>({1.0f + std::ldexp(1.0f, -9), -1.0f}, {1, 2});
  amp::PrecisionAudit audit(model.get());
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    const Tensor e = exp(x);  // float32: unlisted, no growth
    (void)e;
    const Tensor y = model->forward(shifted);
    CHECK(y.to(kFloat32).item<float>() == 0.0f);
  }
  audit.stop();
  const amp::OpPrecision* growth = audit.first_growth();
  REQUIRE(growth != nullptr);
  CHECK(growth->op == OpId::linear);
  CHECK(growth->rel_error == 1.0);
  CHECK(growth->grew);
  REQUIRE(audit.worst() != nullptr);
  CHECK(audit.worst() == growth);
  const amp::OpPrecision* exp_op = find_op(audit, OpId::exp, false);
  REQUIRE(exp_op != nullptr);
  CHECK_FALSE(exp_op->grew);
  CHECK(exp_op->index < growth->index);
  CHECK_THAT(audit.table(), Contains("error first grows at: linear (forward) in 0"));
}

TEST_CASE("PrecisionAudit reports views as skipped and writes a row per call to CSV",
          "[amp][precision_audit]") {
  manual_seed(15);
  const Tensor x = randn({4, 6});
  amp::PrecisionAudit audit;
  {
    amp::Autocast autocast(kCPU, kFloat16);
    const Tensor y = matmul(x, x.transpose(0, 1));
    (void)softmax(y, -1);
  }
  audit.stop();
  const amp::OpPrecision* transpose_op = find_op(audit, OpId::transpose, false);
  REQUIRE(transpose_op != nullptr);
  CHECK_FALSE(transpose_op->measured());
  CHECK_THAT(transpose_op->skipped, Contains("view"));
  const amp::OpPrecision* softmax_op = find_op(audit, OpId::softmax, false);
  REQUIRE(softmax_op != nullptr);
  CHECK(softmax_op->dtype == kFloat16);  // CPU autocast leaves softmax unlisted
  CHECK(softmax_op->measured());

  const std::string path =
      (std::filesystem::temp_directory_path() / "precision_audit_test.csv").string();
  audit.write_csv(path);
  std::ifstream file(path);
  std::string header, line;
  std::getline(file, header);
  CHECK(header.rfind("index,op,module,", 0) == 0);
  std::vector<std::string> rows;
  while (std::getline(file, line)) rows.push_back(line);
  REQUIRE(rows.size() == audit.ops().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].rfind(std::to_string(i) + "," + std::string(op_name(audit.ops()[i].op)) + ",",
                        0) == 0);
  }
  CHECK_THAT(audit.table(), Contains("skipped 1: a view or in-place"));
}

TEST_CASE("PrecisionAudit's SVG chart is well-formed", "[amp][precision_audit]") {
  manual_seed(16);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 8), nn::GELU(), nn::Linear(8, 2));
  const Tensor x = randn({3, 8});
  amp::PrecisionAudit audit(model.get());
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    sum(model->forward(x).to(kFloat32)).backward();
  }
  audit.stop();
  const std::string path =
      (std::filesystem::temp_directory_path() / "precision_audit_test.svg").string();
  audit.write_svg(path, "a <small> model");
  const std::string svg = read_text(path);
  REQUIRE(svg.rfind("<?xml", 0) == 0);
  // Every tag closes in order (a stack over the tags).
  std::vector<std::string> open;
  size_t polylines = 0, pos = svg.find("?>") + 2;
  while ((pos = svg.find('<', pos)) != std::string::npos) {
    const size_t end = svg.find('>', pos);
    REQUIRE(end != std::string::npos);
    const std::string tag = svg.substr(pos + 1, end - pos - 1);
    REQUIRE(tag.find('<') == std::string::npos);
    if (tag[0] == '/') {
      REQUIRE_FALSE(open.empty());
      CHECK(open.back() == tag.substr(1));
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    } else if (tag.rfind("polyline", 0) == 0) {
      ++polylines;
    }
    pos = end + 1;
  }
  CHECK(open.empty());
  CHECK(polylines == 2);  // forward and backward
  CHECK_THAT(svg, Contains("a &lt;small&gt; model") && Contains(">forward<") &&
                      Contains(">backward<") && Contains(">0<") && Contains(">2<"));
}

TEST_CASE("The dispatcher builds reruns only for an observer that asks", "[amp][precision_audit]") {
  const Tensor a = randn({4, 4});
  const int64_t before = ops::detail::reruns_built;
  (void)matmul(a, a);
  CHECK(ops::detail::reruns_built == before);  // nothing observes
  {
    amp::OverflowWatch watch;
    amp::AutocastTrace trace;
    (void)matmul(a, a);
  }
  CHECK(ops::detail::reruns_built == before);  // observers that do not rerun
  {
    amp::PrecisionAudit audit;
    (void)matmul(a, a);
    CHECK(ops::detail::reruns_built > before);
    audit.stop();
    const int64_t stopped = ops::detail::reruns_built;
    (void)matmul(a, a);
    CHECK(ops::detail::reruns_built == stopped);  // a stopped audit asks no more
    REQUIRE(audit.ops().size() == 1);
  }
}

namespace {

// Training-mode batch norm without affine parameters, in float64 from x's values (x: [N, C, H,
// W]): per channel c over its M = N H W values, mean, biased variance, xhat = (x - mean) /
// sqrt(var + eps); and, for an incoming gradient dy, dx = rstd (dy - mean(dy) - xhat mean(dy
// xhat)). Also the unbiased variance, for the running statistics.
struct BatchNormReference {
  std::vector<double> y, dx, mean, unbiased_var;
};

BatchNormReference batch_norm_reference(const Tensor& x, const Tensor& dy, double eps) {
  const std::vector<double> xv = x.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> gv = dy.to(kFloat64).contiguous().to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2) * x.size(3);
  const double M = double(N * S);
  BatchNormReference r{std::vector<double>(xv.size()), std::vector<double>(xv.size()), {}, {}};
  auto at = [&](int64_t n, int64_t c, int64_t s) { return size_t((n * C + c) * S + s); };
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0, var = 0, g_mean = 0, gx_mean = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) mean += xv[at(n, c, s)] / M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) var += (xv[at(n, c, s)] - mean) * (xv[at(n, c, s)] - mean);
    const double rstd = 1 / std::sqrt(var / M + eps);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t s = 0; s < S; ++s) {
        const size_t i = at(n, c, s);
        r.y[i] = (xv[i] - mean) * rstd;
        g_mean += gv[i] / M;
        gx_mean += gv[i] * r.y[i] / M;
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t s = 0; s < S; ++s) {
        const size_t i = at(n, c, s);
        r.dx[i] = rstd * (gv[i] - g_mean - r.y[i] * gx_mean);
      }
    }
    r.mean.push_back(mean);
    r.unbiased_var.push_back(var / (M - 1));
  }
  return r;
}

struct BatchNormRun {
  Tensor y, x_grad, running_mean, running_var, num_batches_tracked;
};

// One training step of BatchNorm2d(3, affine=false) on float16 x, loss sum(y * upstream); with
// `audit`, under a PrecisionAudit made there.
BatchNormRun run_batch_norm(const Tensor& x_values, const Tensor& upstream,
                            std::unique_ptr<amp::PrecisionAudit>* audit = nullptr) {
  auto bn = std::make_shared<nn::BatchNorm2d>(3, 1e-5, 0.1, /*affine=*/false);
  Tensor x = x_values.clone();
  x.requires_grad_(true);
  if (audit != nullptr) *audit = std::make_unique<amp::PrecisionAudit>(bn.get());
  Tensor y = (*bn)(x);
  sum(mul(y.to(kFloat32), upstream)).backward();
  if (audit != nullptr) (*audit)->stop();
  return {y, x.grad(), bn->running_mean.clone(), bn->running_var.clone(),
          bn->num_batches_tracked.clone()};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
         a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
}

}  // namespace

TEST_CASE("PrecisionAudit measures training-mode batch_norm and its backward node against float64",
          "[amp][precision_audit]") {
  manual_seed(23);
  const Tensor x = add(mul(randn({4, 3, 2, 2}), 3.0), 1.5).to(kFloat16);
  const Tensor upstream = randn({4, 3, 2, 2});
  std::unique_ptr<amp::PrecisionAudit> audit;
  const BatchNormRun plain = run_batch_norm(x, upstream);
  const BatchNormRun audited = run_batch_norm(x, upstream, &audit);
  REQUIRE(audit);

  // The audit changed nothing: the output, the gradient and the buffers are the unaudited run's,
  // and the running statistics moved once (momentum 0.1 from zeros and ones).
  CHECK(same_bits(audited.y, plain.y));
  CHECK(same_bits(audited.x_grad, plain.x_grad));
  CHECK(same_bits(audited.running_mean, plain.running_mean));
  CHECK(same_bits(audited.running_var, plain.running_var));
  CHECK(audited.num_batches_tracked.item<int64_t>() == 1);
  // The gradient the node was given: upstream cast to y's float16 by the cast's backward.
  const BatchNormReference reference = batch_norm_reference(x, upstream.to(kFloat16), 1e-5);
  const std::vector<double> running_mean = audited.running_mean.to_vector<double>();
  const std::vector<double> running_var = audited.running_var.to_vector<double>();
  for (size_t c = 0; c < 3; ++c) {
    CHECK(running_mean[c] == Approx(0.1 * reference.mean[c]).epsilon(1e-6));
    CHECK(running_var[c] == Approx(0.9 + 0.1 * reference.unbiased_var[c]).epsilon(1e-6));
  }

  const amp::OpPrecision* forward = find_op(*audit, OpId::batch_norm, false);
  REQUIRE(forward != nullptr);
  INFO(forward->skipped);
  REQUIRE(forward->measured());
  CHECK(forward->dtype == kFloat16);
  CHECK(forward->module_type == "BatchNorm2d");
  const Errors forward_errors = errors_of(audited.y, reference.y, 10);
  CHECK(forward->rel_error == Approx(forward_errors.rel).epsilon(1e-6));
  CHECK(forward->rel_error > 0);
  CHECK(forward->rel_error < 2 * std::ldexp(1.0, -11));

  const amp::OpPrecision* node = nullptr;
  for (const amp::OpPrecision& entry : audit->ops()) {
    if (entry.whole_node && entry.node == "BatchNormBackward") node = &entry;
  }
  REQUIRE(node != nullptr);
  INFO(node->skipped);
  REQUIRE(node->measured());
  CHECK(node->op == OpId::batch_norm);
  CHECK(node->backward);
  CHECK(node->module_type == "BatchNorm2d");
  CHECK(node->dtype == kFloat16);
  CHECK(node->numel == 4 * 3 * 2 * 2);
  // The node's float64 rerun reads what its forward saved, batch statistics included, which
  // the kernel computed in float32: its reference is this one up to the float32 roundings of
  // mean and 1/std (2^-24 relative), a part in 1e4 of a float16 error of 2e-4.
  const Errors backward_errors = errors_of(audited.x_grad, reference.dx, 10);
  CHECK(node->rel_error == Approx(backward_errors.rel).epsilon(2e-4));
  CHECK(node->rel_error > 0);
  CHECK_THAT(audit->table(), Contains(" node "));
}

TEST_CASE("PrecisionAudit reports a cast's backward node as not comparable",
          "[amp][precision_audit]") {
  Tensor x = full({4}, 1.5);
  x.requires_grad_(true);
  amp::PrecisionAudit audit;
  sum(mul(x.to(kFloat16), 3.0).to(kFloat32)).backward();
  audit.stop();
  bool cast_node = false;
  for (const amp::OpPrecision& entry : audit.ops()) {
    if (!entry.whole_node || entry.node != "ToDtypeBackward") continue;
    // The float16 -> float32 cast's backward casts the gradient back to float16 in float64 too
    // (float16 gradient) or to float32 (float32 gradient): no float64 answer to compare with.
    if (entry.dtype == kFloat32) {
      cast_node = true;
      CHECK_FALSE(entry.measured());
      CHECK_THAT(entry.skipped, Contains("fixes its gradients' dtypes"));
    }
  }
  CHECK(cast_node);
  // The multiply's node (float16 in, float16 out) is measured: 3 g is exact.
  const amp::OpPrecision* mul_node = nullptr;
  for (const amp::OpPrecision& entry : audit.ops()) {
    if (entry.whole_node && entry.node == "MulBackward") mul_node = &entry;
  }
  REQUIRE(mul_node != nullptr);
  REQUIRE(mul_node->measured());
  CHECK(mul_node->rel_error == 0);
}
