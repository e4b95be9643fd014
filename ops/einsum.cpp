// einsum and outer (ops/linalg.h): composites that reach the GEMM through bmm, so that under
// autocast they run in the lower precision as matmul does (einsum's policy is matmul's).
//
// NOTE [Einsum as bmm] An equation is parsed into one label per dim (an ellipsis stands for
// dims of their own, lined up from the right across operands). Then:
//   1. a label repeated within one operand takes that operand's diagonal (an index_select of
//      the two dims flattened, as torch's diagonal view reads it);
//   2. a label of one operand alone that the output does not keep is summed out at once;
//   3. the operands are contracted left to right, two at a time: the labels both share and a
//      later operand or the output needs are the batch, the shared ones nothing needs later
//      are contracted, the rest are each side's rows and columns: one bmm of
//      [batch, rows, contracted] by [batch, contracted, columns];
//   4. the output's labels are put in order by a permute.
// A labelled dim of size 1 broadcasts against the same label's size elsewhere, as torch's.
// torch chooses the contraction order by the same left-to-right rule (unless opt_einsum is
// installed), so the GEMMs and their rounding are the ones torch's default runs.
#include <algorithm>
#include <array>
#include <string>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/linalg.h"
#include "halfgrad/ops/nn_helpers.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::dispatch_list;
using ops::OpContext;

constexpr int kLetters = 52;  // 'A'..'Z' are 0..25, 'a'..'z' 26..51; ellipsis dims follow

int label_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}

// One operand's (or the output's) subscripts: its letters, and where the ellipsis stands.
struct Subscripts {
  std::vector<int> letters;
  int ellipsis_at = -1;  // index into letters before which the ellipsis dims go; -1: none
};

Subscripts parse_subscripts(std::string_view text, std::string_view equation) {
  Subscripts out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ') continue;
    if (c == '.') {
      HG_CHECK(text.substr(i, 3) == "..." && out.ellipsis_at < 0,
               "einsum: expected at most one ellipsis '...' per operand, got \"{}\" in \"{}\"",
               text, equation);
      out.ellipsis_at = int(out.letters.size());
      i += 2;
      continue;
    }
    const int label = label_of(c);
    HG_CHECK(label >= 0, "einsum: expected subscripts in [a-zA-Z], got '{}' in \"{}\"", c,
             equation);
    out.letters.push_back(label);
  }
  return out;
}

// An operand and the label of each of its dims.
struct Labelled {
  Tensor t;
  std::vector<int> labels;
};

// The dims' labels of an operand of `ndim` dims: its letters, with its ellipsis dims given the
// labels kLetters + (ellipsis_dims - k) .. kLetters + ellipsis_dims - 1 (lined up from the right).
std::vector<int> dim_labels(const Subscripts& s, int64_t ndim, int ellipsis_dims,
                            std::string_view equation, size_t operand) {
  const int64_t letters = int64_t(s.letters.size());
  if (s.ellipsis_at < 0) {
    HG_CHECK(ndim == letters, "einsum: operand {} has {} dims but \"{}\" gives it {} subscripts",
             operand, ndim, equation, letters);
    return s.letters;
  }
  HG_CHECK(ndim >= letters,
           "einsum: operand {} has {} dims, fewer than the {} subscripts \"{}\" gives it", operand,
           ndim, letters, equation);
  const int own = int(ndim - letters);
  std::vector<int> out(s.letters.begin(), s.letters.begin() + s.ellipsis_at);
  for (int k = 0; k < own; ++k) out.push_back(kLetters + ellipsis_dims - own + k);
  out.insert(out.end(), s.letters.begin() + s.ellipsis_at, s.letters.end());
  return out;
}

// Step 1: the diagonal of each label that appears twice or more in one operand.
Labelled take_diagonals(Labelled x) {
  for (size_t i = 0; i < x.labels.size(); ++i) {
    for (size_t j = i + 1; j < x.labels.size();) {
      if (x.labels[j] != x.labels[i]) {
        ++j;
        continue;
      }
      const int64_t n = x.t.size(int64_t(i));
      HG_CHECK(x.t.size(int64_t(j)) == n,
               "einsum: a subscript repeated in one operand names dims of sizes {} and {}", n,
               x.t.size(int64_t(j)));
      // Move dims i and j last, flatten them, pick k (n + 1): the diagonal, in dim i's place.
      std::vector<int64_t> order;
      for (size_t d = 0; d < x.labels.size(); ++d) {
        if (d != i && d != j) order.push_back(int64_t(d));
      }
      order.push_back(int64_t(i));
      order.push_back(int64_t(j));
      Shape perm_in{}, sizes{};
      for (int64_t d : order) perm_in.push_back(d);
      const Tensor moved = x.t.permute(perm_in);
      for (size_t d = 0; d + 2 < order.size(); ++d) sizes.push_back(moved.size(int64_t(d)));
      sizes.push_back(n * n);
      std::vector<int64_t> positions(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) positions[size_t(k)] = k * (n + 1);
      const Tensor diagonal =
          index_select(moved.reshape(sizes), -1, ops::positions_on(positions, x.t.device()));
      // The labels without dim j's; `diagonal` holds the other dims in order, then the
      // diagonal, which goes back to dim i's place.
      std::vector<int> labels;
      for (size_t d = 0; d < x.labels.size(); ++d) {
        if (d != j) labels.push_back(x.labels[d]);
      }
      Shape perm{};
      int64_t other = 0;
      for (size_t d = 0; d < labels.size(); ++d) {
        perm.push_back(d == i ? int64_t(order.size()) - 2 : other++);
      }
      x.t = diagonal.permute(perm);
      x.labels = labels;
    }
  }
  return x;
}

// Sums x over its labels that `keep` does not hold.
Labelled sum_unneeded(Labelled x, const std::array<bool, 128>& keep) {
  Shape dims{};
  std::vector<int> labels;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (keep[size_t(x.labels[d])]) {
      labels.push_back(x.labels[d]);
    } else {
      dims.push_back(int64_t(d));
    }
  }
  if (!dims.empty()) {
    x.t = sum(x.t, dims);
    x.labels = labels;
  }
  return x;
}

int64_t size_of(const Labelled& x, int label) {
  const auto at = std::find(x.labels.begin(), x.labels.end(), label);
  return at == x.labels.end() ? -1 : x.t.size(int64_t(at - x.labels.begin()));
}

// x with its dims permuted to `order` (labels it holds) and each broadcast to `sizes`, then
// reshaped to `shape`.
Tensor arrange(const Labelled& x, const std::vector<int>& order, const Shape& sizes,
               const Shape& shape) {
  Shape perm{};
  for (int label : order) {
    perm.push_back(int64_t(std::find(x.labels.begin(), x.labels.end(), label) - x.labels.begin()));
  }
  return x.t.permute(perm).expand(sizes).reshape(shape);
}

// Step 3: a and b contracted over their shared labels that `keep` does not hold.
Labelled contract(const Labelled& a, const Labelled& b, const std::array<bool, 128>& keep) {
  std::vector<int> batch, rows, columns, contracted;
  for (int label : a.labels) {
    const bool shared = size_of(b, label) >= 0;
    (shared ? (keep[size_t(label)] ? batch : contracted) : rows).push_back(label);
  }
  for (int label : b.labels) {
    if (size_of(a, label) < 0) columns.push_back(label);
  }
  const auto extent = [&](int label) {
    const int64_t sa = size_of(a, label), sb = size_of(b, label);
    if (sa < 0) return sb;
    if (sb < 0) return sa;
    HG_CHECK(sa == sb || sa == 1 || sb == 1,
             "einsum: a subscript names dims of sizes {} and {}, which do not broadcast", sa, sb);
    return std::max(sa, sb);
  };
  const auto product = [&](const std::vector<int>& labels) {
    int64_t n = 1;
    for (int label : labels) n *= extent(label);
    return n;
  };
  const auto sizes = [&](std::initializer_list<const std::vector<int>*> groups) {
    Shape out{};
    for (const auto* group : groups) {
      for (int label : *group) out.push_back(extent(label));
    }
    return out;
  };
  std::vector<int> a_order = batch, b_order = batch;
  a_order.insert(a_order.end(), rows.begin(), rows.end());
  a_order.insert(a_order.end(), contracted.begin(), contracted.end());
  b_order.insert(b_order.end(), contracted.begin(), contracted.end());
  b_order.insert(b_order.end(), columns.begin(), columns.end());
  const int64_t nb = product(batch), m = product(rows), k = product(contracted),
                n = product(columns);
  const Tensor lhs = arrange(a, a_order, sizes({&batch, &rows, &contracted}), {nb, m, k});
  const Tensor rhs = arrange(b, b_order, sizes({&batch, &contracted, &columns}), {nb, k, n});
  Labelled out;
  out.t = bmm(lhs, rhs).reshape(sizes({&batch, &rows, &columns}));
  out.labels = batch;
  out.labels.insert(out.labels.end(), rows.begin(), rows.end());
  out.labels.insert(out.labels.end(), columns.begin(), columns.end());
  return out;
}

struct Einsum {
  static constexpr OpId id = OpId::einsum;
  static constexpr bool kComposite = true;
  std::string equation;

  Tensor forward(OpContext&, std::span<const Tensor> operands) {
    HG_CHECK(!operands.empty(), "einsum: expected at least one operand, got none");
    const size_t arrow = equation.find("->");
    const std::string_view lhs = std::string_view(equation).substr(0, arrow);
    std::vector<Subscripts> inputs;
    for (size_t start = 0;;) {
      const size_t comma = lhs.find(',', start);
      inputs.push_back(parse_subscripts(lhs.substr(start, comma - start), equation));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    HG_CHECK(inputs.size() == operands.size(), "einsum: \"{}\" names {} operands, got {} tensors",
             equation, inputs.size(), operands.size());
    int ellipsis_dims = 0;
    for (size_t i = 0; i < operands.size(); ++i) {
      HG_CHECK(operands[i].defined(), "einsum: operand {} is an undefined tensor", i);
      if (inputs[i].ellipsis_at >= 0) {
        ellipsis_dims =
            std::max(ellipsis_dims, int(operands[i].dim()) - int(inputs[i].letters.size()));
      }
    }
    // Each operand's labels, and how many operands hold each.
    std::vector<Labelled> terms;
    std::array<int, 128> count{};
    for (size_t i = 0; i < operands.size(); ++i) {
      terms.push_back(
          {operands[i], dim_labels(inputs[i], operands[i].dim(), ellipsis_dims, equation, i)});
      std::vector<int> unique = terms.back().labels;
      std::sort(unique.begin(), unique.end());
      unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
      for (int label : unique) ++count[size_t(label)];
    }
    // The output's labels: given after "->" (ellipsis dims it leaves out are summed), else the
    // ellipsis dims, then the letters that appear exactly once, in order (uppercase first, as
    // torch's).
    std::vector<int> output;
    if (arrow != std::string_view::npos) {
      const Subscripts out =
          parse_subscripts(std::string_view(equation).substr(arrow + 2), equation);
      std::vector<int> ellipsis;
      for (int e = 0; e < ellipsis_dims; ++e) ellipsis.push_back(kLetters + e);
      output.assign(out.letters.begin(), out.letters.begin() + std::max(out.ellipsis_at, 0));
      if (out.ellipsis_at >= 0) output.insert(output.end(), ellipsis.begin(), ellipsis.end());
      output.insert(output.end(), out.letters.begin() + std::max(out.ellipsis_at, 0),
                    out.letters.end());
      std::array<bool, 128> seen{};
      for (int label : out.letters) {
        HG_CHECK(!seen[size_t(label)], "einsum: the output of \"{}\" repeats a subscript",
                 equation);
        seen[size_t(label)] = true;
        HG_CHECK(count[size_t(label)] > 0,
                 "einsum: the output of \"{}\" has a subscript no operand has", equation);
      }
    } else {
      for (int e = 0; e < ellipsis_dims; ++e) output.push_back(kLetters + e);
      for (int label = 0; label < kLetters; ++label) {
        int occurrences = 0;
        for (const Labelled& term : terms) {
          occurrences += int(std::count(term.labels.begin(), term.labels.end(), label));
        }
        if (occurrences == 1) output.push_back(label);
      }
    }
    std::array<bool, 128> in_output{};
    for (int label : output) in_output[size_t(label)] = true;

    // Steps 1 and 2 for every operand, then 3 left to right.
    for (Labelled& term : terms) {
      term = take_diagonals(std::move(term));
      std::array<bool, 128> keep = in_output;
      for (int label : term.labels) keep[size_t(label)] |= count[size_t(label)] > 1;
      term = sum_unneeded(std::move(term), keep);
    }
    Labelled result = terms[0];
    for (size_t i = 1; i < terms.size(); ++i) {
      std::array<bool, 128> later = in_output;
      for (size_t j = i + 1; j < terms.size(); ++j) {
        for (int label : terms[j].labels) later[size_t(label)] = true;
      }
      result = contract(result, terms[i], later);
    }
    result = sum_unneeded(std::move(result), in_output);
    // Step 4; a label the output has that was broadcast away stays at its size.
    Shape perm{};
    for (int label : output) {
      perm.push_back(int64_t(std::find(result.labels.begin(), result.labels.end(), label) -
                             result.labels.begin()));
    }
    const Tensor out = result.t.permute(perm);
    return terms.size() == 1 && out.is_view() ? out.clone() : out;
  }
};

struct Outer {
  static constexpr OpId id = OpId::outer;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& a, const Tensor& b) {
    HG_CHECK(a.defined() && b.defined() && a.dim() == 1 && b.dim() == 1,
             "outer: expected two 1-d tensors, got {} and {}",
             a.defined() ? fmt::format("{}", a.sizes()) : std::string("undefined"),
             b.defined() ? fmt::format("{}", b.sizes()) : std::string("undefined"));
    return mul(a.unsqueeze(1), b.unsqueeze(0));
  }
};

}  // namespace

Tensor einsum(std::string_view equation, std::span<const Tensor> operands) {
  return dispatch_list(Einsum{.equation = std::string(equation)}, operands);
}
Tensor einsum(std::string_view equation, std::initializer_list<Tensor> operands) {
  return einsum(equation, std::span<const Tensor>(operands.begin(), operands.size()));
}
Tensor outer(const Tensor& a, const Tensor& b) { return dispatch(Outer{}, a, b); }

}  // namespace hg
