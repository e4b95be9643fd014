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
    if (!entry.backward || !entry.measured()) continue;
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
