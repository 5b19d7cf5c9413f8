#include "reports/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace headroom::reports {
namespace {

std::string num(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", value);
  return buffer;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `count` ticks.
double tick_step(double span, int count) {
  if (span <= 0) return 1;
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    if (factor * power >= raw) return factor * power;
  }
  return 10 * power;
}

std::string tick_label(double value, double step) {
  char buffer[32];
  const int decimals = step >= 1 ? 0 : step >= 0.1 ? 1 : 2;
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

SvgChart::SvgChart(std::string id, int width, int height, Axis x, Axis y, int extra_bottom)
    : id_(std::move(id)), width_(width), height_(height), x_(std::move(x)), y_(std::move(y)),
      bottom_(kBottom + std::max(0, extra_bottom)) {
  if (!(x_.max > x_.min)) x_.max = x_.min + 1;
  if (!(y_.max > y_.min)) y_.max = y_.min + 1;
}

double SvgChart::px(double x) const {
  return kLeft + (x - x_.min) / (x_.max - x_.min) * (width_ - kLeft - kRight);
}

double SvgChart::py(double y) const {
  return height_ - bottom_ - (y - y_.min) / (y_.max - y_.min) * (height_ - kTop - bottom_);
}

void SvgChart::polyline(const std::vector<std::pair<double, double>>& all_points, const std::string& color,
                        double stroke_width, bool dashed) {
  if (all_points.empty()) return;
  const std::vector<std::pair<double, double>> points = thin(all_points);
  body_ += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"" + num(stroke_width) + "\"";
  if (dashed) body_ += " stroke-dasharray=\"6 4\"";
  body_ += " points=\"";
  for (const auto& [x, y] : points) body_ += num(px(x)) + "," + num(py(y)) + " ";
  body_ += "\"/>\n";
}

std::vector<std::pair<double, double>> SvgChart::thin(const std::vector<std::pair<double, double>>& points) const {
  const size_t columns = static_cast<size_t>(std::max(1, width_ - kLeft - kRight));
  if (points.size() <= 4 * columns) return points;
  std::vector<std::pair<double, double>> out;
  size_t begin = 0;
  while (begin < points.size()) {
    const long column = std::lround(px(points[begin].first));
    size_t end = begin + 1;
    size_t low = begin;
    size_t high = begin;
    while (end < points.size() && std::lround(px(points[end].first)) == column) {
      if (points[end].second < points[low].second) low = end;
      if (points[end].second > points[high].second) high = end;
      ++end;
    }
    // First, extremes in their order, last: the line enters and leaves the column where it did.
    std::vector<size_t> keep = {begin, std::min(low, high), std::max(low, high), end - 1};
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (size_t index : keep) out.push_back(points[index]);
    begin = end;
  }
  return out;
}

void SvgChart::hline(double y, const std::string& color, const std::string& label, bool dashed,
                     bool label_at_start) {
  body_ += "<line x1=\"" + num(kLeft) + "\" x2=\"" + num(width_ - kRight) + "\" y1=\"" + num(py(y)) + "\" y2=\"" +
           num(py(y)) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\"" +
           (dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
  if (label.empty()) return;
  body_ += "<text x=\"" + num(label_at_start ? kLeft + 4 : width_ - kRight - 4) + "\" y=\"" + num(py(y) - 4) +
           "\" text-anchor=\"" + (label_at_start ? "start" : "end") + "\" class=\"lbl\" fill=\"" + color + "\">" +
           escape_html(label) + "</text>\n";
}

void SvgChart::vline(double x, const std::string& color, const std::string& label, bool dashed,
                     bool label_at_start) {
  body_ += "<line x1=\"" + num(px(x)) + "\" x2=\"" + num(px(x)) + "\" y1=\"" + num(kTop) + "\" y2=\"" +
           num(height_ - bottom_) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\"" +
           (dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
  if (label.empty()) return;
  body_ += "<text x=\"" + num(px(x) + (label_at_start ? -4 : 4)) + "\" y=\"" + num(kTop + 12) + "\" text-anchor=\"" +
           (label_at_start ? "end" : "start") + "\" class=\"lbl\" fill=\"" + color + "\">" + escape_html(label) +
           "</text>\n";
}

void SvgChart::rect(double x0, double y0, double x1, double y1, const std::string& color, const std::string& tooltip) {
  const double left = std::min(px(x0), px(x1));
  const double top = std::min(py(y0), py(y1));
  const double w = std::max(0.5, std::fabs(px(x1) - px(x0)));
  const double h = std::max(0.5, std::fabs(py(y1) - py(y0)));
  body_ += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
           "\" fill=\"" + color + "\">";
  if (!tooltip.empty()) body_ += "<title>" + escape_html(tooltip) + "</title>";
  body_ += "</rect>\n";
}

void SvgChart::marker(double x, double y, const std::string& color, const std::string& label) {
  body_ += "<circle cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) + "\" r=\"5\" fill=\"" + color +
           "\"><title>" + escape_html(label) + "</title></circle>\n";
  const bool right_half = px(x) > width_ / 2.0;
  body_ += "<text x=\"" + num(px(x) + (right_half ? -8 : 8)) + "\" y=\"" + num(py(y) - 8) + "\" text-anchor=\"" +
           (right_half ? "end" : "start") + "\" class=\"mark\">" + escape_html(label) + "</text>\n";
}

void SvgChart::text(double x, double y, const std::string& text, const std::string& anchor) {
  body_ += "<text x=\"" + num(px(x)) + "\" y=\"" + num(py(y)) + "\" text-anchor=\"" + anchor + "\">" +
           escape_html(text) + "</text>\n";
}

void SvgChart::rotated_label(double x, double pixel_y, const std::string& text, const std::string& tooltip) {
  body_ += "<text transform=\"translate(" + num(px(x) + 3) + "," + num(pixel_y) +
           ") rotate(-90)\" text-anchor=\"end\" class=\"name\">" + escape_html(text) + "<title>" +
           escape_html(tooltip) + "</title></text>\n";
}

void SvgChart::legend(const std::vector<LegendEntry>& entries) { legend_ = entries; }

void SvgChart::y_categories(const std::vector<std::string>& names) {
  y_numeric_ = false;
  y_names_ = names;
}

std::string SvgChart::render() const {
  std::string out = "<svg id=\"" + escape_html(id_) + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(width_) + "\" height=\"" + std::to_string(height_) + "\" viewBox=\"0 0 " +
                    std::to_string(width_) + " " + std::to_string(height_) + "\" role=\"img\">\n";
  const double bottom = height_ - bottom_;
  out += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(width_ - kLeft - kRight) +
         "\" height=\"" + num(bottom - kTop) + "\" fill=\"#fafafa\" stroke=\"#999\"/>\n";
  // x ticks
  const double x_step = tick_step(x_.max - x_.min, 8);
  for (double t = std::ceil(x_.min / x_step) * x_step; t <= x_.max + 1e-9; t += x_step) {
    out += "<line x1=\"" + num(px(t)) + "\" x2=\"" + num(px(t)) + "\" y1=\"" + num(bottom) + "\" y2=\"" +
           num(bottom + 4) + "\" stroke=\"#666\"/><text x=\"" + num(px(t)) + "\" y=\"" + num(bottom + 16) +
           "\" text-anchor=\"middle\" class=\"tick\">" + tick_label(t, x_step) + "</text>\n";
  }
  out += "<text x=\"" + num((kLeft + width_ - kRight) / 2.0) + "\" y=\"" + num(height_ - 8) +
         "\" text-anchor=\"middle\" class=\"axis\">" + escape_html(x_.label) + "</text>\n";
  if (y_numeric_) {
    const double y_step = tick_step(y_.max - y_.min, 6);
    for (double t = std::ceil(y_.min / y_step) * y_step; t <= y_.max + 1e-9; t += y_step) {
      out += "<line x1=\"" + num(kLeft - 4) + "\" x2=\"" + num(kLeft) + "\" y1=\"" + num(py(t)) + "\" y2=\"" +
             num(py(t)) + "\" stroke=\"#666\"/><text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py(t) + 4) +
             "\" text-anchor=\"end\" class=\"tick\">" + tick_label(t, y_step) + "</text>\n";
    }
  } else {
    for (size_t i = 0; i < y_names_.size(); ++i) {
      out += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py(static_cast<double>(i) + 0.5) + 4) +
             "\" text-anchor=\"end\" class=\"tick\">" + escape_html(y_names_[i]) + "</text>\n";
    }
  }
  out += "<text transform=\"translate(14," + num((kTop + bottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"axis\">" + escape_html(y_.label) + "</text>\n";
  out += body_;
  double legend_x = kLeft + 6;
  for (const LegendEntry& entry : legend_) {
    out += "<g class=\"legend\"><line x1=\"" + num(legend_x) + "\" x2=\"" + num(legend_x + 18) + "\" y1=\"" +
           num(kTop - 12) + "\" y2=\"" + num(kTop - 12) + "\" stroke=\"" + entry.color + "\" stroke-width=\"4\"" +
           (entry.dashed ? " stroke-dasharray=\"4 3\"" : "") + "/><text x=\"" + num(legend_x + 22) + "\" y=\"" +
           num(kTop - 8) + "\">" + escape_html(entry.label) + "</text></g>\n";
    legend_x += 30 + 7.0 * static_cast<double>(entry.label.size());
  }
  out += "</svg>\n";
  return out;
}

}  // namespace headroom::reports
