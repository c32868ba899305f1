// Step × rank grids: the terminal picture of a schedule (`harp schedule show`) and the
// context of a validator deadlock report. The compute grid is a unit-time pipeline, not
// a simulation: it ignores communication and real compute times (the simulator has them).
#include "harp/schedule/grid.h"

#include <algorithm>

namespace harp::schedule {
namespace {

void pad_to(std::string* s, size_t width) {
  if (s->size() < width) s->append(width - s->size(), ' ');
}

void rtrim(std::string* s) {
  while (!s->empty() && s->back() == ' ') s->pop_back();
}

}  // namespace

std::string format_grid(const std::vector<std::vector<std::string>>& rows_by_step,
                        int num_ranks, int highlight_row) {
  return format_grid(rows_by_step, num_ranks, highlight_row, 0);
}

std::string format_grid(const std::vector<std::vector<std::string>>& rows_by_step,
                        int num_ranks, int highlight_row, int first_step) {
  const int rows = static_cast<int>(rows_by_step.size());
  auto cell = [&](int row, int rank) -> std::string {
    const auto& r = rows_by_step[row];
    if (rank >= static_cast<int>(r.size()) || r[rank].empty()) return ".";
    return r[rank];
  };
  const std::string step_header = "step";
  size_t step_width = step_header.size();
  if (rows > 0) step_width = std::max(step_width, std::to_string(first_step + rows - 1).size());
  std::vector<size_t> width(std::max(num_ranks, 0));
  for (int c = 0; c < num_ranks; ++c) {
    width[c] = ("rank " + std::to_string(c)).size();
    for (int row = 0; row < rows; ++row) width[c] = std::max(width[c], cell(row, c).size());
  }
  auto line = [&](const std::string& marker, const std::string& step,
                  const std::vector<std::string>& cells) {
    std::string out = marker;
    pad_to(&out, 3);
    out.append(step_width - step.size(), ' ');
    out += step;
    for (int c = 0; c < num_ranks; ++c) {
      out += "  ";
      std::string v = cells[c];
      pad_to(&v, width[c]);
      out += v;
    }
    rtrim(&out);
    return out + "\n";
  };
  std::vector<std::string> header(std::max(num_ranks, 0));
  for (int c = 0; c < num_ranks; ++c) header[c] = "rank " + std::to_string(c);
  std::string text = line("", step_header, header);
  for (int row = 0; row < rows; ++row) {
    std::vector<std::string> cells(std::max(num_ranks, 0));
    for (int c = 0; c < num_ranks; ++c) cells[c] = cell(row, c);
    text += line(row == highlight_row ? ">>" : "", std::to_string(first_step + row), cells);
  }
  return text;
}

std::string format_compute_grid(const Schedule& schedule) {
  const int S = static_cast<int>(schedule.actions.size());
  int M = std::max(schedule.num_microbatches, 0);
  for (const auto& list : schedule.actions)
    for (const Action& a : list) M = std::max(M, a.microbatch + 1);
  // finish[r][m] of F and B on rank r; -1 while not placed. Ranks play their stage.
  std::vector<std::vector<int>> f_end(S, std::vector<int>(M, -1)), b_end = f_end;
  std::vector<size_t> next(S, 0);
  std::vector<int> free_at(S, 0);
  std::vector<std::vector<std::string>> rows;
  auto skip_non_compute = [&](int r) {
    const auto& list = schedule.actions[r];
    while (next[r] < list.size() && (!list[next[r]].is_compute() || list[next[r]].microbatch < 0))
      ++next[r];
  };
  // Placement order does not matter: a start time depends only on finish times that are
  // already fixed, so sweeping until no rank moves gives the unique earliest placement.
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < S; ++r) {
      skip_non_compute(r);
      if (next[r] == schedule.actions[r].size()) continue;
      const Action& a = schedule.actions[r][next[r]];
      const int m = a.microbatch;
      int start = free_at[r];
      if (a.kind == ActionKind::kF && r > 0) {
        if (f_end[r - 1][m] < 0) continue;
        start = std::max(start, f_end[r - 1][m]);
      }
      if (a.is_input_backward()) {
        if (f_end[r][m] < 0) continue;
        if (r < S - 1) {
          if (b_end[r + 1][m] < 0) continue;
          start = std::max(start, b_end[r + 1][m]);
        }
      }
      if (a.kind == ActionKind::kW && b_end[r][m] < 0) continue;  // after its own I
      if (a.kind != ActionKind::kW) (a.kind == ActionKind::kF ? f_end : b_end)[r][m] = start + 1;
      free_at[r] = start + 1;
      if (static_cast<int>(rows.size()) <= start)
        rows.resize(start + 1, std::vector<std::string>(S));
      rows[start][r] = to_string(a);
      ++next[r];
      progress = true;
    }
  }
  std::string text = format_grid(rows, S);
  for (int r = 0; r < S; ++r) {
    if (next[r] < schedule.actions[r].size())
      text += "stuck: rank " + std::to_string(r) + " cannot start " +
              to_string(schedule.actions[r][next[r]]) + " (its input is never produced)\n";
  }
  return text;
}

}  // namespace harp::schedule
