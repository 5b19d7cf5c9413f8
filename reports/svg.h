// A small SVG plotting helper for the HTML report: a chart with a plot area,
// linear axes with ticks and unit labels, and primitives in data coordinates.
// Output is plain SVG text, no scripts, viewable offline.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace headroom::reports {

// Escapes text for HTML/SVG content and attribute values.
std::string escape_html(std::string_view text);

struct Axis {
  double min = 0;
  double max = 1;
  std::string label;  // with its unit, e.g. "memory (GiB)"
};

struct LegendEntry {
  std::string label;
  std::string color;
  bool dashed = false;
};

class SvgChart {
 public:
  // extra_bottom: pixels reserved under the x axis (rotated labels).
  SvgChart(std::string id, int width, int height, Axis x, Axis y, int extra_bottom = 0);

  double px(double x) const;  // data -> pixel
  double py(double y) const;

  // Points in x order. Curves denser than the plot's pixels are thinned to the
  // first, lowest, highest and last point of each pixel column, so peaks stay
  // exact and a curve costs at most ~4 points per pixel of width.
  void polyline(const std::vector<std::pair<double, double>>& points, const std::string& color,
                double stroke_width = 1.5, bool dashed = false);
  // Reference lines across the plot; label_at_start puts the label at the left
  // (hline) or left of the line (vline) so that neighbouring lines stay legible.
  void hline(double y, const std::string& color, const std::string& label, bool dashed = true,
             bool label_at_start = false);
  void vline(double x, const std::string& color, const std::string& label, bool dashed = true,
             bool label_at_start = false);
  void rect(double x0, double y0, double x1, double y1, const std::string& color,
            const std::string& tooltip = "");
  void marker(double x, double y, const std::string& color, const std::string& label);
  void text(double x, double y, const std::string& text, const std::string& anchor = "start");
  // Text hanging down from pixel_y (below the plot: plot_bottom() + 22 clears the
  // ticks), rotated -90 degrees and centred on data x; the tooltip holds the full text.
  void rotated_label(double x, double pixel_y, const std::string& text, const std::string& tooltip);
  void legend(const std::vector<LegendEntry>& entries);
  // Category labels on the y axis instead of numeric ticks (Gantt rows, bars).
  void y_categories(const std::vector<std::string>& names);

  std::string render() const;  // <svg id=...> ... </svg>
  int plot_bottom() const { return height_ - bottom_; }

 private:
  std::vector<std::pair<double, double>> thin(const std::vector<std::pair<double, double>>& points) const;

  std::string id_;
  int width_;
  int height_;
  Axis x_;
  Axis y_;
  int bottom_ = kBottom;
  bool y_numeric_ = true;
  std::vector<std::string> y_names_;
  std::string body_;
  std::vector<LegendEntry> legend_;
  static constexpr int kLeft = 70;
  static constexpr int kRight = 20;
  static constexpr int kTop = 30;
  static constexpr int kBottom = 48;
};

}  // namespace headroom::reports
