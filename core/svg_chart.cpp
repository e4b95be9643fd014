// SvgChart (core/svg_chart.h): axes, ticks, polylines and a legend as plain SVG text.
#include "halfgrad/core/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/text_file.h"

namespace hg {

namespace {

// Colors that stay apart for the first eight series (then they repeat).
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// About five round ticks covering [low, high] on a linear axis.
std::vector<double> linear_ticks(double low, double high) {
  const double span = high - low;
  const double raw_step = span / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
  double step = magnitude;
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    step = factor * magnitude;
    if (span / step <= 6) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void add(double v) {
    low = std::min(low, v);
    high = std::max(high, v);
  }
  bool empty() const { return low > high; }
};

}  // namespace

SvgChart::SvgChart(SvgChartOptions options) : options_(std::move(options)) {
  HG_CHECK(options_.width >= 200 && options_.height >= 150,
           "SvgChart: expected a size of at least 200 x 150, got {} x {}", options_.width,
           options_.height);
}

void SvgChart::add_series(std::string name, std::vector<std::pair<double, double>> points) {
  series_.push_back({std::move(name), std::move(points)});
}

std::string SvgChart::svg() const {
  const bool log_y = options_.log_y;
  auto shown = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0);
  };
  Range xs, ys;
  for (const SvgSeries& s : series_) {
    for (auto [x, y] : s.points) {
      if (!shown(x, y)) continue;
      xs.add(x);
      ys.add(log_y ? std::log10(y) : y);
    }
  }
  if (!options_.x_labels.empty()) {
    xs.add(0);
    xs.add(double(options_.x_labels.size() - 1));
  }
  if (xs.empty()) xs = {0, 1};
  if (ys.empty()) ys = {0, 1};
  if (log_y) {
    ys.low = std::floor(ys.low);
    ys.high = std::max(std::ceil(ys.high), ys.low + 1);
  } else if (ys.high - ys.low < 1e-12 * std::max(1.0, std::abs(ys.high))) {
    ys.low -= 1;
    ys.high += 1;
  }
  if (xs.high - xs.low < 1e-12) {
    xs.low -= 0.5;
    xs.high += 0.5;
  }

  // Margins: room for tick labels on the left, rotated category labels below, a legend right.
  const double left = 80, top = 40, right = 170;
  const double bottom = options_.x_labels.empty() ? 60 : 150;
  const double plot_w = options_.width - left - right;
  const double plot_h = options_.height - top - bottom;
  auto px = [&](double x) { return left + (x - xs.low) / (xs.high - xs.low) * plot_w; };
  auto py = [&](double y_axis) {
    return top + plot_h - (y_axis - ys.low) / (ys.high - ys.low) * plot_h;
  };

  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      options_.width, options_.height);
  out +=
      fmt::format("<text x=\"{:.1f}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                  left + plot_w / 2, escape(options_.title));
  out += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      left, top, plot_w, plot_h);

  // y ticks and grid.
  std::vector<double> y_ticks;
  if (log_y) {
    for (double e = ys.low; e <= ys.high + 1e-9; e += 1) y_ticks.push_back(e);
  } else {
    y_ticks = linear_ticks(ys.low, ys.high);
  }
  for (double t : y_ticks) {
    const double y = py(t);
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#dddddd\"/>\n",
        left, y, left + plot_w, y);
    const std::string label =
        log_y ? fmt::format("1e{}", int(std::lround(t))) : fmt::format("{:g}", t);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 6,
                       y + 4, label);
  }
  // x ticks: categories, or round numbers.
  if (!options_.x_labels.empty()) {
    for (size_t i = 0; i < options_.x_labels.size(); ++i) {
      const double x = px(double(i));
      out += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n",
          x, top + plot_h, top + plot_h + 4);
      out += fmt::format(
          "<text x=\"{0:.1f}\" y=\"{1:.1f}\" text-anchor=\"end\" "
          "transform=\"rotate(-60 {0:.1f} {1:.1f})\">{2}</text>\n",
          x, top + plot_h + 10, escape(options_.x_labels[i]));
    }
  } else {
    for (double t : linear_ticks(xs.low, xs.high)) {
      const double x = px(t);
      out += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n",
          x, top + plot_h, top + plot_h + 4);
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", x,
                         top + plot_h + 18, t);
    }
  }
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                     left + plot_w / 2, double(options_.height) - 8, escape(options_.x_label));
  out += fmt::format(
      "<text x=\"16\" y=\"{0:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0:.1f})\">{1}"
      "</text>\n",
      top + plot_h / 2, escape(options_.y_label));

  // Series: one polyline per run of showable points, markers, and a legend entry.
  for (size_t s = 0; s < series_.size(); ++s) {
    const char* color = kColors[s % std::size(kColors)];
    std::string run;
    auto flush = [&] {
      if (!run.empty()) {
        out += fmt::format(
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color,
            run);
      }
      run.clear();
    };
    for (auto [x, y] : series_[s].points) {
      if (!shown(x, y)) {
        flush();
        continue;
      }
      const double cx = px(x), cy = py(log_y ? std::log10(y) : y);
      run += fmt::format("{}{:.1f},{:.1f}", run.empty() ? "" : " ", cx, cy);
      if (options_.markers) {
        out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", cx, cy,
                           color);
      }
    }
    flush();
    const double ly = top + 10 + 18 * double(s);
    const double lx = left + plot_w + 12;
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"2\"/>\n",
        lx, ly, lx + 20, ly, color);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", lx + 26, ly + 4,
                       escape(series_[s].name));
  }
  out += "</svg>\n";
  return out;
}

void SvgChart::write(const std::string& path) const {
  write_text_file(path, svg(), "SvgChart::write");
}

}  // namespace hg
