// Grid printers: column padding, the ">>" marker, and the unit-time compute grid of
// small schedules placed by hand.
#include "harp/schedule/grid.h"

#include <gtest/gtest.h>

#include "harp/schedule/generators.h"
#include "harp/schedule/lowering.h"

namespace harp::schedule {
namespace {

TEST(FormatGrid, PadsColumnsAndMarksRow) {
  const std::vector<std::vector<std::string>> rows = {
      {"0F0", ""}, {"0SEND_F0", "1RECV_F0"}, {".", "1F0"}};
  EXPECT_EQ(format_grid(rows, 2, 1),
            "   step  rank 0    rank 1\n"
            "      0  0F0       .\n"
            ">>    1  0SEND_F0  1RECV_F0\n"
            "      2  .         1F0\n");
  EXPECT_EQ(format_grid(rows, 2, -1, 98),
            "   step  rank 0    rank 1\n"
            "     98  0F0       .\n"
            "     99  0SEND_F0  1RECV_F0\n"
            "    100  .         1F0\n");
}

TEST(FormatGrid, EmptyGridHasHeaderOnly) {
  EXPECT_EQ(format_grid({}, 3), "   step  rank 0  rank 1  rank 2\n");
}

TEST(FormatComputeGrid, OneFOneBTwoStages) {
  // r0 F0@0 F1@1; r1 F0@1 B0@2 F1@3 B1@4; r0 B0 waits for r1's B0 (ends 3) -> @3, B1 -> @5.
  const char* const expected =
      "   step  rank 0  rank 1\n"
      "      0  0F0     .\n"
      "      1  0F1     1F0\n"
      "      2  .       1B0\n"
      "      3  0B0     1F1\n"
      "      4  .       1B1\n"
      "      5  0B1     .\n";
  EXPECT_EQ(format_compute_grid(generate_1f1b(2, 2)), expected);
  // Communication actions are left out, so the lowered schedule draws the same.
  EXPECT_EQ(format_compute_grid(lower(generate_1f1b(2, 2)).value()), expected);
}

TEST(FormatComputeGrid, GpipeThreeStagesTakesTwoTimesMPlusSMinusOneSteps) {
  const std::string grid = format_compute_grid(generate_gpipe(3, 2));
  EXPECT_EQ(grid,
            "   step  rank 0  rank 1  rank 2\n"
            "      0  0F0     .       .\n"
            "      1  0F1     1F0     .\n"
            "      2  .       1F1     2F0\n"
            "      3  .       .       2F1\n"
            "      4  .       .       2B0\n"
            "      5  .       1B0     2B1\n"
            "      6  0B0     1B1     .\n"
            "      7  0B1     .       .\n");
}

TEST(FormatComputeGrid, StuckScheduleSaysSo) {
  Schedule s = parse_schedule_text("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1F0 1B0 1B1\n").value();
  const std::string grid = format_compute_grid(s);
  EXPECT_NE(grid.find("      0  0F0     .\n"), std::string::npos) << grid;
  EXPECT_NE(grid.find("stuck: rank 0 cannot start 0B0"), std::string::npos) << grid;
  EXPECT_NE(grid.find("stuck: rank 1 cannot start 1F1"), std::string::npos) << grid;
}

}  // namespace
}  // namespace harp::schedule
