// SvgChart: points land where the axes put them, a log axis leaves out what it cannot show, and
// text is escaped.
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/core/error.h"
#include "halfgrad/core/svg_chart.h"

using namespace hg;
using Catch::Contains;

namespace {

// The "x,y" pairs of every polyline, in order.
std::vector<std::vector<std::pair<double, double>>> polylines(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> lines;
  size_t pos = 0;
  while ((pos = svg.find("<polyline", pos)) != std::string::npos) {
    const size_t start = svg.find("points=\"", pos) + 8;
    const size_t end = svg.find('"', start);
    std::vector<std::pair<double, double>> points;
    std::string list = svg.substr(start, end - start);
    size_t at = 0;
    while (at < list.size()) {
      size_t next = list.find(' ', at);
      if (next == std::string::npos) next = list.size();
      const std::string pair = list.substr(at, next - at);
      const size_t comma = pair.find(',');
      points.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
      at = next + 1;
    }
    lines.push_back(points);
    pos = end;
  }
  return lines;
}

}  // namespace

TEST_CASE("SvgChart places points linearly in x and by decade on a log y axis",
          "[amp][svg_chart]") {
  SvgChart chart({.title = "loss & error",
                  .x_label = "step",
                  .y_label = "error",
                  .log_y = true,
                  .markers = false});
  chart.add_series("a", {{0, 1e-3}, {1, 1e-2}, {2, 1e-1}});
  const std::string svg = chart.svg();
  CHECK_THAT(svg, Contains("loss &amp; error") && Contains(">1e-3<") && Contains(">1e-1<"));
  const auto lines = polylines(svg);
  REQUIRE(lines.size() == 1);
  REQUIRE(lines[0].size() == 3);
  // Equal steps in x and in log10(y) are equal steps on the page; y grows upward.
  const auto& p = lines[0];
  CHECK(p[1].first - p[0].first == Approx(p[2].first - p[1].first).margin(0.2));
  CHECK(p[0].second - p[1].second == Approx(p[1].second - p[2].second).margin(0.2));
  CHECK(p[0].second > p[1].second);
}

TEST_CASE("SvgChart breaks a log-axis line at values it cannot show", "[amp][svg_chart]") {
  SvgChart chart({.log_y = true});
  chart.add_series("with a zero",
                   {{0, 1.0}, {1, 2.0}, {2, 0.0}, {3, 4.0}, {4, 8.0}, {5, std::nan("")}});
  chart.add_series("second", {{0, 3.0}, {4, 5.0}});
  const auto lines = polylines(chart.svg());
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].size() == 2);
  CHECK(lines[1].size() == 2);
  CHECK(lines[2].size() == 2);
  CHECK_THAT(chart.svg(), Contains(">with a zero<") && Contains(">second<"));
}

TEST_CASE("SvgChart labels a category axis and refuses a size too small", "[amp][svg_chart]") {
  SvgChart chart({.x_labels = {"blocks.0.attn", "blocks.0.mlp", "lm_head"}});
  chart.add_series("error", {{0, 0.5}, {1, 1.5}, {2, 1.0}});
  const std::string svg = chart.svg();
  CHECK_THAT(svg, Contains(">blocks.0.attn<") && Contains(">lm_head<") && Contains("rotate(-60"));
  CHECK_THROWS_WITH(SvgChart({.width = 10}),
                    Contains("at least 200 x 150") && Contains("got 10 x 480"));
  CHECK_THROWS_WITH(chart.write("/nonexistent-dir/chart.svg"), Contains("/nonexistent-dir"));
}
