// Step × rank grids for terminals and error messages.
#pragma once

#include <string>
#include <vector>

#include "harp/schedule/action.h"

namespace harp::schedule {

// Rows are steps, columns ranks; cells hold action text or "." for idle. `highlight_row`
// (if >= 0) is marked with ">>" (the failing step of a validator report).
std::string format_grid(const std::vector<std::vector<std::string>>& rows_by_step,
                        int num_ranks, int highlight_row = -1);
// The same, for a window of a longer run: row k is labelled step `first_step + k`.
std::string format_grid(const std::vector<std::vector<std::string>>& rows_by_step,
                        int num_ranks, int highlight_row, int first_step);

// The per-rank grid of a schedule with actions aligned on a common clock: compute
// actions are placed on the earliest step where their dependencies are done, as in a
// unit-time pipeline (each F, B, I and W takes one step). Communication actions are omitted.
std::string format_compute_grid(const Schedule& schedule);

}  // namespace harp::schedule
