// The exit codes every command returns (docs/errors.md), shared by the command line and
// the libraries that run a whole job for it (the elastic controller).
#pragma once

namespace harp {

constexpr int kExitOk = 0;
constexpr int kExitInput = 1;       // bad input file or I/O
constexpr int kExitUsage = 2;       // bad command line
constexpr int kExitInfeasible = 3;  // no plan fits
constexpr int kExitCheck = 4;       // a --check did not hold (harp trace runs)

}  // namespace harp
