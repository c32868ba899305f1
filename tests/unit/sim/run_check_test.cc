// The measured proof's self-check on fake tables: a table that holds passes; a baseline
// too close, a prediction too far, a missing subject each fail with the row named.
#include "harp/sim/run_check.h"

#include <gtest/gtest.h>

namespace harp::sim {
namespace {

std::vector<RunRow> table(double harp_s, double uniform_s, double harp_predicted_s) {
  return {{"harp", "harp", "harp-1f1b", "harp-1f1b", harp_predicted_s, harp_s},
          {"homogeneous", "homogeneous", "1f1b", "1f1b", 1.40, 1.45},
          {"uniform", "uniform", "1f1b", "1f1b", 1.42, uniform_s},
          // HARP's plan under another schedule is no baseline (the same strategy).
          {"harp_as_1f1b", "harp", "1f1b", "harp-1f1b", 0.80, 0.82}};
}

TEST(RunCheck, AHoldingTablePasses) {
  EXPECT_TRUE(check_runs(table(0.70, 1.40, 0.72), {"harp", 1.3, 0.15}).ok());
  EXPECT_TRUE(check_runs(table(0.70, 1.40, 0.72), {"", 0, 0.05}).ok());  // errors only
}

TEST(RunCheck, ABaselineTooCloseIsNamed) {
  const Status s = check_runs(table(1.00, 1.20, 1.0), {"harp", 1.3, 0.15});
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("harp over uniform: 1.20x measured, below the required 1.30x"), std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("over homogeneous"), std::string::npos) << s.message();  // 1.45x holds
  EXPECT_EQ(s.message().find("harp_as_1f1b"), std::string::npos) << s.message();  // not a baseline, and within 15%
}

TEST(RunCheck, APredictionTooFarIsNamed) {
  const Status s = check_runs(table(0.70, 1.40, 0.56), {"harp", 1.3, 0.15});
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("harp: predicted -20.0% off its measurement, beyond ±15%"), std::string::npos)
      << s.message();
  // Exactly at the bound holds.
  EXPECT_TRUE(check_runs(table(1.0, 1.40, 1.15), {"", 0, 0.15}).ok());
}

TEST(RunCheck, ASubjectOrBaselineThatIsMissingIsAnInputError) {
  EXPECT_EQ(check_runs(table(0.7, 1.4, 0.7), {"nope", 1.3, 0}).code(), StatusCode::kInvalidArgument);
  const std::vector<RunRow> alone = {{"harp", "harp", "harp-1f1b", "harp-1f1b", 1, 1}};
  EXPECT_EQ(check_runs(alone, {"harp", 1.3, 0}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace harp::sim
