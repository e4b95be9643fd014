// SvgChart: a small line and point chart written as a standalone SVG file, for plots an example
// or a report wants without a plotting library (error by layer, loss curves).
//
//   SvgChart chart({.title = "loss", .x_label = "step", .y_label = "loss", .log_y = true});
//   chart.add_series("float16", {{0, 2.3}, {1, 1.9}, {2, 1.7}});
//   chart.add_series("bfloat16", {{0, 2.3}, {1, 2.0}, {2, 1.8}});
//   chart.write("loss.svg");
//
// Axes fit the data (a log axis spans whole decades); with x_labels, x is a category axis whose
// ticks are labels[0], labels[1], ... at x = 0, 1, .... Points that a log axis cannot show (y <= 0,
// or not finite) are left out of their line, so a gap marks them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hg {

struct SvgChartOptions {
  std::string title = {};
  std::string x_label = {};
  std::string y_label = {};
  bool log_y = false;
  // Category names for x = 0, 1, 2, ... (module names, say); empty for a numeric x axis.
  std::vector<std::string> x_labels = {};
  // Draw each point as a marker too (for sparse series).
  bool markers = true;
  int width = 900;
  int height = 480;
};

struct SvgSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
};

class SvgChart {
 public:
  explicit SvgChart(SvgChartOptions options = {});
  void add_series(std::string name, std::vector<std::pair<double, double>> points);
  const std::vector<SvgSeries>& series() const { return series_; }
  // The whole document.
  std::string svg() const;
  // Writes svg() to path; an hg::Error names the path when it cannot be written.
  void write(const std::string& path) const;

 private:
  SvgChartOptions options_;
  std::vector<SvgSeries> series_;
};

}  // namespace hg
