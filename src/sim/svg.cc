// SVG 1.1 timeline of a simulated iteration, drawn to a fixed width whatever the time
// scale. Boxes narrower than a pixel are still drawn (every action stays countable);
// the latency tail of a transfer is a thin line after its link occupancy box.
#include "harp/sim/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

namespace harp::sim {
namespace {

constexpr double kWidth = 1400, kLeft = 150, kRight = 30, kTop = 64;
constexpr double kRowH = 24, kLinkH = 12;
constexpr const char* kFwdColor = "#4c78a8";
constexpr const char* kBwdColor = "#59a14f";
constexpr const char* kInputGradColor = "#8cd17d";   // a split backward's I
constexpr const char* kWeightGradColor = "#76b7b2";  // and its W
constexpr const char* kReduceColor = "#8c8c8c";
constexpr const char* kStepColor = "#bdbdbd";
constexpr const char* kXferFwdColor = "#f58518";
constexpr const char* kXferBwdColor = "#b279a2";

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
  return out;
}

// printf into a string; every number in the picture goes through here. Sized by a
// first pass: text from the user (subcluster names, titles) has any length.
template <typename... A>
void put(std::string* out, const char* fmt, A... args) {
  const int n = std::snprintf(nullptr, 0, fmt, args...);
  HARP_CHECK(n >= 0) << fmt;
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(n) + 1);
  std::snprintf(out->data() + at, static_cast<size_t>(n) + 1, fmt, args...);
  out->resize(at + static_cast<size_t>(n));
}

// A 1-2-5 tick step giving about ten ticks over `total_ms`.
double tick_step_ms(double total_ms) {
  if (total_ms <= 0) return 1;
  const double raw = total_ms / 10;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0})
    if (f * mag >= raw) return f * mag;
  return 10 * mag;
}

// The time axis under a picture: a line from kLeft to the right margin at `axis_y`,
// ticks every 1-2-5 ms step up to `span_ms`, `px_per_ms` pixels per millisecond.
void time_axis(std::string* out, double axis_y, double span_ms, double px_per_ms) {
  put(out, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#444\"/>\n", kLeft, axis_y,
      kWidth - kRight, axis_y);
  const double step_ms = tick_step_ms(span_ms);
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step_ms))));
  for (int k = 0;; ++k) {
    const double t_ms = k * step_ms;
    if (t_ms > span_ms * (1 + 1e-9) && k > 0) break;
    const double tx = kLeft + t_ms * px_per_ms;
    put(out,
        "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#444\"/>"
        "<text class=\"tick\" x=\"%.2f\" y=\"%.1f\">%.*f</text>\n",
        tx, axis_y, tx, axis_y + 5, tx, axis_y + 17, decimals, t_ms);
    if (span_ms <= 0) break;
  }
  put(out, "<text class=\"tick\" x=\"%.0f\" y=\"%.1f\">ms</text>\n", kWidth - kRight + 14, axis_y + 17);
}

// A row of colour swatches and their names, from kLeft at height `y`.
void legend(std::string* out, double y, const std::vector<std::pair<const char*, const char*>>& entries) {
  double lx = kLeft;
  for (const auto& [color, name] : entries) {
    put(out,
        "<rect class=\"legend\" x=\"%.0f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
        "<text x=\"%.0f\" y=\"%.1f\">%s</text>\n",
        lx, y, color, lx + 16, y + 10, name);
    lx += 16 + 7.0 * std::char_traits<char>::length(name) + 18;
  }
}

class Picture {
 public:
  Picture(const SimResult& r, const plan::Plan& plan) : result_(r), plan_(plan) {
    ranks_ = static_cast<int>(r.ranks.size());
    const double span_ns = r.iteration_ns > 0 ? static_cast<double>(r.iteration_ns) : 1.0;
    px_per_ns_ = (kWidth - kLeft - kRight) / span_ns;
  }

  std::string draw(const std::string& title);

 private:
  double x(Nanos t) const { return kLeft + static_cast<double>(t) * px_per_ns_; }
  double row_y(int rank) const { return kTop + rank * (kRowH + kLinkH); }
  double plot_bottom() const { return row_y(ranks_) - kLinkH; }
  void box(std::string* out, const char* cls, const char* color, Nanos start, Nanos end, double y,
           double h, const std::string& tip, const std::string& label);

  const SimResult& result_;
  const plan::Plan& plan_;
  int ranks_ = 0;
  double px_per_ns_ = 0;
};

void Picture::box(std::string* out, const char* cls, const char* color, Nanos start, Nanos end,
                  double y, double h, const std::string& tip, const std::string& label) {
  const double x0 = x(start), w = std::max(0.0, x(end) - x0);
  // A white edge separates back-to-back boxes; on boxes of a few pixels it would hide
  // the colour, so they go without.
  put(out,
      "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s>",
      cls, x0, y, w, h, color, w >= 4 ? " stroke=\"#fff\" stroke-width=\"0.6\"" : "");
  put(out, "<title>%s %.4f-%.4f ms</title></rect>\n", tip.c_str(), static_cast<double>(start) / 1e6,
      static_cast<double>(end) / 1e6);
  // Roughly 6.5 px per digit at font-size 11; skip labels that would spill over.
  if (!label.empty() && w >= 6.5 * label.size() + 4)
    put(out, "<text class=\"mb\" x=\"%.2f\" y=\"%.1f\">%s</text>\n", x0 + w / 2, y + h / 2 + 4,
        label.c_str());
}

std::string Picture::draw(const std::string& title) {
  const double axis_y = plot_bottom() + 10;
  const double height = axis_y + 64;
  std::string out;
  out.reserve(256 + result_.spans.size() * 160);
  put(&out,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n",
      kWidth, height, kWidth, height);
  out +=
      "<style>text{font-size:12px;fill:#222}.mb{font-size:11px;fill:#fff;text-anchor:middle}"
      ".tick{font-size:10px;fill:#555;text-anchor:middle}.sub{font-size:10px;fill:#666}"
      "</style>\n";
  put(&out, "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n",
      kWidth, height);
  const double iter_ms = static_cast<double>(result_.iteration_ns) / 1e6;
  put(&out,
      "<text x=\"12\" y=\"24\" style=\"font-size:15px;font-weight:bold\">%s</text>\n"
      "<text x=\"12\" y=\"44\">iteration %.4f ms, bubble fraction %.2f%%, %d stages, "
      "%d microbatches</text>\n",
      escape(title).c_str(), iter_ms, 100.0 * result_.bubble_fraction, ranks_,
      plan_.microbatches);

  for (int r = 0; r < ranks_; ++r) {
    const double y = row_y(r);
    put(&out,
        "<rect class=\"row\" x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" "
        "fill=\"#f4f4f4\"/>\n",
        kLeft, y, kWidth - kLeft - kRight, kRowH);
    put(&out, "<text x=\"12\" y=\"%.1f\">stage %d", y + 11, r);
    if (r < plan_.num_stages() && !plan_.stages[r].subcluster_name.empty()) {
      const plan::Stage& s = plan_.stages[r];
      // A mixed stage: its replicas' device types and shares of each microbatch.
      const std::string sub = s.mixed() ? s.replica_summary() + ", " + s.shares_ratio() : s.subcluster_name;
      put(&out, "<tspan class=\"sub\" x=\"12\" dy=\"12\">%s</tspan>", escape(sub).c_str());
    }
    out += "</text>\n";
  }
  if (result_.spans.empty())
    put(&out,
        "<text x=\"%.0f\" y=\"%.1f\">(no spans recorded: simulate with record_spans)</text>\n",
        kLeft + 8, kTop + 16);

  for (const Span& sp : result_.spans) {
    const schedule::Action& a = sp.action;
    const std::string mb = a.microbatch >= 0 ? std::to_string(a.microbatch) : "";
    const std::string tip = schedule::to_string(a);
    const double y = row_y(sp.rank);
    switch (a.kind) {
      case schedule::ActionKind::kF:
        box(&out, "F", kFwdColor, sp.start_ns, sp.end_ns, y, kRowH, tip, mb);
        break;
      case schedule::ActionKind::kB:
        box(&out, "B", kBwdColor, sp.start_ns, sp.end_ns, y, kRowH, tip, mb);
        break;
      case schedule::ActionKind::kI:
        box(&out, "I", kInputGradColor, sp.start_ns, sp.end_ns, y, kRowH, tip, mb);
        break;
      case schedule::ActionKind::kW:
        box(&out, "W", kWeightGradColor, sp.start_ns, sp.end_ns, y, kRowH, tip, mb);
        break;
      case schedule::ActionKind::kReduceGrad:
        box(&out, "R", kReduceColor, sp.start_ns, sp.end_ns, y, kRowH, tip, "");
        break;
      case schedule::ActionKind::kStep:
        box(&out, "S", kStepColor, sp.start_ns, sp.end_ns, y, kRowH, tip, "");
        break;
      case schedule::ActionKind::kSendF:
      case schedule::ActionKind::kSendB: {
        // The link row under stage i carries boundary i: forward on top, backward below.
        const bool fwd = a.kind == schedule::ActionKind::kSendF;
        const int boundary = fwd ? sp.rank : sp.rank - 1;
        const double ly = row_y(boundary) + kRowH + (fwd ? 1.0 : kLinkH / 2);
        const char* color = fwd ? kXferFwdColor : kXferBwdColor;
        box(&out, fwd ? "xf" : "xb", color, sp.link_start_ns, sp.link_end_ns, ly,
            kLinkH / 2 - 1, tip, "");
        if (sp.arrive_ns > sp.link_end_ns)
          put(&out,
              "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"%s\" "
              "stroke-width=\"1\"/>\n",
              x(sp.link_end_ns), ly + kLinkH / 4, x(sp.arrive_ns), ly + kLinkH / 4, color);
        break;
      }
      default:  // receives are posts; their wait shows as the gap before the compute
        break;
    }
  }

  time_axis(&out, axis_y, iter_ms, px_per_ns_ * 1e6);
  std::vector<std::pair<const char*, const char*>> entries = {
      {kFwdColor, "forward"},
      {kBwdColor, "backward"},
      {kReduceColor, "grad all-reduce"},
      {kStepColor, "optimizer step"},
      {kXferFwdColor, "activation transfer (link row, top)"},
      {kXferBwdColor, "gradient transfer (link row, bottom)"}};
  if (std::any_of(result_.spans.begin(), result_.spans.end(),
                  [](const Span& sp) { return sp.action.kind == schedule::ActionKind::kW; }))
    entries.insert(entries.begin() + 2, {{kInputGradColor, "I: input"}, {kWeightGradColor, "W: weights"}});
  legend(&out, axis_y + 36, entries);
  out += "</svg>\n";
  return out;
}

}  // namespace

std::string svg_timelines(const std::vector<std::pair<std::string, schedule::Timeline>>& panels,
                          const std::string& title) {
  constexpr double kWaitH = 6, kHeadH = 22;
  // One scale for all panels: the longest span of any.
  double span_us = 1;
  std::vector<double> origin;
  for (const auto& [heading, t] : panels) {
    double lo = 0, hi = 0;
    bool any = false;
    for (const auto& e : t.events) {
      lo = any ? std::min(lo, e.start_us) : e.start_us;
      hi = any ? std::max(hi, e.start_us + e.dur_us) : e.start_us + e.dur_us;
      any = true;
    }
    origin.push_back(lo);
    span_us = std::max(span_us, hi - lo);
  }
  const double px_per_us = (kWidth - kLeft - kRight) / span_us;
  double height = kTop;
  for (const auto& [heading, t] : panels) height += kHeadH + t.rows.size() * (kRowH + kWaitH + 4) + 8;
  const double axis_y = height;
  height += 64;
  std::string out;
  put(&out,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n",
      kWidth, height, kWidth, height);
  out += "<style>text{font-size:12px;fill:#222}.mb{font-size:11px;fill:#fff;text-anchor:middle}"
         ".tick{font-size:10px;fill:#555;text-anchor:middle}</style>\n";
  put(&out, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n", kWidth, height);
  put(&out, "<text x=\"12\" y=\"24\" style=\"font-size:15px;font-weight:bold\">%s</text>\n", escape(title).c_str());
  double y = kTop;
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const auto& [heading, t] = panels[p];
    put(&out, "<text x=\"12\" y=\"%.1f\" style=\"font-weight:bold\">%s</text>\n", y + 14, escape(heading).c_str());
    y += kHeadH;
    std::map<int, double> row_y;
    for (const auto& row : t.rows) {
      row_y[row.rank] = y;
      put(&out, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" fill=\"#f4f4f4\"/>\n", kLeft, y,
          kWidth - kLeft - kRight, kRowH);
      put(&out, "<text x=\"12\" y=\"%.1f\">%s</text>\n", y + 16, escape(row.name).c_str());
      y += kRowH + kWaitH + 4;
    }
    y += 8;
    for (const auto& e : t.events) {
      auto at = row_y.find(e.rank);
      if (at == row_y.end()) continue;
      const double x0 = kLeft + (e.start_us - origin[p]) * px_per_us;
      const double w = std::max(0.3, e.dur_us * px_per_us);
      const char* color = nullptr;
      double top = at->second, h = kRowH;
      switch (e.action.kind) {
        case schedule::ActionKind::kF: color = kFwdColor; break;
        case schedule::ActionKind::kB: color = kBwdColor; break;
        case schedule::ActionKind::kI: color = kInputGradColor; break;
        case schedule::ActionKind::kW: color = kWeightGradColor; break;
        case schedule::ActionKind::kReduceGrad: color = kReduceColor; break;
        case schedule::ActionKind::kStep: color = kStepColor; break;
        case schedule::ActionKind::kRecvF:
        case schedule::ActionKind::kRecvB:
          if (e.lane != schedule::Lane::kRecv) break;
          color = e.action.kind == schedule::ActionKind::kRecvF ? kXferFwdColor : kXferBwdColor;
          top += kRowH + 1;
          h = kWaitH;
          break;
        default: break;
      }
      if (color == nullptr) continue;
      put(&out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s><title>%s %.3f ms</title></rect>\n",
          x0, top, w, h, color, w >= 4 && h == kRowH ? " stroke=\"#fff\" stroke-width=\"0.6\"" : "",
          schedule::to_string(e.action).c_str(), e.dur_us / 1e3);
      const std::string mb = e.action.microbatch >= 0 && h == kRowH ? std::to_string(e.action.microbatch) : "";
      if (!mb.empty() && w >= 6.5 * mb.size() + 4)
        put(&out, "<text class=\"mb\" x=\"%.2f\" y=\"%.1f\">%s</text>\n", x0 + w / 2, top + h / 2 + 4, mb.c_str());
    }
  }
  time_axis(&out, axis_y, span_us / 1e3, px_per_us * 1e3);
  std::vector<std::pair<const char*, const char*>> entries = {{kFwdColor, "forward"},
                                                               {kBwdColor, "backward"},
                                                               {kReduceColor, "grad all-reduce"},
                                                               {kStepColor, "optimizer step"},
                                                               {kXferFwdColor, "waiting for an activation"},
                                                               {kXferBwdColor, "waiting for a gradient"}};
  bool split = false;
  for (const auto& [heading, t] : panels)
    for (const auto& e : t.events) split = split || e.action.kind == schedule::ActionKind::kW;
  if (split) entries.insert(entries.begin() + 2, {{kInputGradColor, "I: input"}, {kWeightGradColor, "W: weights"}});
  legend(&out, axis_y + 36, entries);
  out += "</svg>\n";
  return out;
}

std::string svg_timeline(const SimResult& result, const plan::Plan& plan,
                         const std::string& title) {
  return Picture(result, plan).draw(title);
}

}  // namespace harp::sim
