// The files a command has read, so that no output it writes replaces one of them
// (check_output_path, document.h): data loss such as `harp trace runs --svg
// RUN/metrics.jsonl` replacing the run's records, or `harp testbed probe --csv` naming its
// own cluster file. Every reader of the common layer notes what it opens (by device and
// inode, so another name for the same file is caught too); the check applies once a
// command calls protect_inputs(): the commands that only read their inputs and write new
// files. (`harp train` and the launchers rewrite their own state on purpose: a resumed
// run's checkpoint pointer, an elastic run's plan.)
#pragma once

#include <string>

namespace harp {

// From now on, check_output_path refuses any file this process has read. Idempotent.
void protect_inputs();
// Notes a file the process has read (the common readers call it); ignored for paths that
// do not exist.
void note_input(const std::string& path);
// Clears what was read and switches the check off: the start of a command.
void forget_inputs();
// The input `path` would replace when protect_inputs() is on, or "" (none, or off).
std::string input_replaced_by(const std::string& path);

}  // namespace harp
