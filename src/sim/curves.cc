// Training curves (see curves.h).
#include "harp/sim/curves.h"

#include "harp/common/fields.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "harp/common/document.h"

namespace harp::sim {
namespace {

constexpr const char* kColors[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d"};
constexpr double kPanelW = 520, kPanelH = 230, kMargin = 56;

std::string num(double v) {
  char buf[32];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof buf, a != 0 && (a >= 1e5 || a < 1e-2) ? "%.2g" : a >= 100 ? "%.0f" : "%.3g", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

// One panel at (x0, y0): axes with the ranges' ends as ticks, a polyline per run.
void panel(std::ostringstream& svg, double x0, double y0, const std::string& label,
           const std::vector<const std::vector<std::pair<double, double>>*>& series) {
  double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
  for (const auto* s : series)
    for (const auto& [x, y] : *s)
      if (std::isfinite(x) && std::isfinite(y)) {
        xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
  const double w = kPanelW - kMargin - 16, h = kPanelH - 2 * 34;
  const double left = x0 + kMargin, top = y0 + 34;
  svg << "<text x=\"" << left << "\" y=\"" << y0 + 22 << "\" style=\"font-weight:bold\">" << escape(label)
      << "</text>\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w << "\" height=\"" << h
      << "\" fill=\"#fafafa\" stroke=\"#999\"/>\n";
  if (xmin > xmax) {
    svg << "<text x=\"" << left + 10 << "\" y=\"" << top + h / 2 << "\" fill=\"#888\">no data</text>\n";
    return;
  }
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax == ymin) ymax = ymin + (ymin == 0 ? 1 : std::fabs(ymin) * 0.1);
  auto px = [&](double x) { return left + (x - xmin) / (xmax - xmin) * w; };
  auto py = [&](double y) { return top + h - (y - ymin) / (ymax - ymin) * h; };
  for (const auto& [v, at] : {std::pair{ymin, top + h}, {ymax, top}})
    svg << "<text x=\"" << left - 6 << "\" y=\"" << at + 4 << "\" text-anchor=\"end\" class=\"tick\">" << num(v)
        << "</text>\n";
  for (const auto& [v, at] : {std::pair{xmin, left}, {xmax, left + w}})
    svg << "<text x=\"" << at << "\" y=\"" << top + h + 16 << "\" text-anchor=\"middle\" class=\"tick\">" << num(v)
        << "</text>\n";
  svg << "<text x=\"" << left + w / 2 << "\" y=\"" << top + h + 30 << "\" text-anchor=\"middle\" class=\"tick\">step</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    std::ostringstream points;
    for (const auto& [x, y] : *series[i])
      if (std::isfinite(x) && std::isfinite(y)) points << px(x) << "," << py(y) << " ";
    const char* color = kColors[i % (sizeof kColors / sizeof *kColors)];
    svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.6\" points=\"" << points.str()
        << "\"/>\n";
    if (series[i]->size() == 1)
      svg << "<circle cx=\"" << px(series[i]->front().first) << "\" cy=\"" << py(series[i]->front().second)
          << "\" r=\"3\" fill=\"" << color << "\"/>\n";
  }
}

}  // namespace

StatusOr<RunCurves> load_curves(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / "metrics.jsonl").string();
  HARP_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  RunCurves c;
  c.name = std::filesystem::path(dir).filename().string();
  if (c.name.empty()) c.name = std::filesystem::path(dir).parent_path().filename().string();
  std::istringstream lines(text);
  int n = 0;
  for (std::string line; std::getline(lines, line);) {
    ++n;
    if (line.empty()) continue;
    auto j = parse_json_text(line, shown_path(file) + " line " + std::to_string(n));
    if (!j.ok()) return j.status();
    if (!j->is_object()) return invalid_argument(shown_path(file) + ": line " + std::to_string(n) + " is not an object");
    // Figures a run writes are far from a double's limits; one near them (a damaged file)
    // would overflow the chart's axis range into NaN coordinates, so it is refused.
    Status bad;
    auto number = [&](const char* key, double* v) {
      if (!j->contains(key) || !(*j)[key].is_number()) return false;
      *v = (*j)[key].get<double>();
      const bool step_like = std::string(key) == "step" || std::string(key) == "eval_after_steps";
      const bool ok = step_like ? whole_number_in((*j)[key], 0, std::int64_t{1} << 40).has_value()
                                : std::isfinite(*v) && std::fabs(*v) <= 1e15;
      if (!ok && bad.ok())
        bad = invalid_argument(shown_path(file) + ": line " + std::to_string(n) + ": " + key + " = " +
                               (*j)[key].dump().substr(0, 40) + ": " +
                               (step_like ? "must be a whole number from 0 to 2^40" : "must be within +-1e15") +
                               "; the file is damaged: restore it, or leave the run out");
      return ok;
    };
    double step = 0, v = 0;
    if (number("eval_after_steps", &step) && number("val_loss", &v)) {
      c.val_loss.emplace_back(step, v);
      continue;
    }
    if (!bad.ok()) return bad;
    if (!number("step", &step)) {
      if (!bad.ok()) return bad;
      continue;
    }
    if (number("loss", &v)) c.loss.emplace_back(step, v);
    if (number("tokens_per_s", &v)) c.tokens_per_s.emplace_back(step, v);
    if (number("iteration_s", &v)) c.iteration_ms.emplace_back(step, v * 1e3);
    if (!bad.ok()) return bad;
  }
  if (c.loss.empty() && c.val_loss.empty())
    return invalid_argument(shown_path(file) + ": holds no step or validation records; it is written by harp train");
  return c;
}

std::string curves_svg(const std::vector<RunCurves>& runs, const std::string& title) {
  const double legend_h = 22.0 * static_cast<double>(runs.size()) + 10;
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
      << 2 * kPanelW + 20 << "\" height=\"" << 2 * kPanelH + 50 + legend_h
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      << "<style>.tick{font-size:10px;fill:#555}</style>\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
      << "<text x=\"12\" y=\"24\" style=\"font-size:15px;font-weight:bold\">" << escape(title) << "</text>\n";
  using Series = std::vector<std::pair<double, double>> RunCurves::*;
  const std::pair<const char*, Series> panels[] = {{"training loss", &RunCurves::loss},
                                                   {"validation loss", &RunCurves::val_loss},
                                                   {"tokens/s", &RunCurves::tokens_per_s},
                                                   {"iteration time (ms)", &RunCurves::iteration_ms}};
  for (int k = 0; k < 4; ++k) {
    std::vector<const std::vector<std::pair<double, double>>*> series;
    for (const auto& r : runs) series.push_back(&(r.*panels[k].second));
    panel(svg, 10 + (k % 2) * kPanelW, 36 + (k / 2) * kPanelH, panels[k].first, series);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const double y = 2 * kPanelH + 50 + 22.0 * static_cast<double>(i);
    svg << "<rect x=\"" << 10 + kMargin << "\" y=\"" << y << "\" width=\"14\" height=\"4\" fill=\""
        << kColors[i % (sizeof kColors / sizeof *kColors)] << "\"/><text x=\"" << 30 + kMargin << "\" y=\"" << y + 6
        << "\">" << escape(runs[i].name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace harp::sim
