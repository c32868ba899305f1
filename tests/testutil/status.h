// Status checks for tests: HARP_ASSERT_OK(expr) and HARP_EXPECT_OK(expr) accept a Status
// or a StatusOr and print the error's message when it is not ok;
// HARP_ASSERT_OK_AND_ASSIGN(lhs, expr) unwraps a StatusOr or fails the test.
#pragma once

#include <gtest/gtest.h>

#include "harp/common/status.h"

namespace harp::testing {

inline const Status& status_of(const Status& s) { return s; }
template <typename T>
Status status_of(const StatusOr<T>& s) {
  return s.status();
}

}  // namespace harp::testing

#define HARP_ASSERT_OK(expr)                                                        \
  do {                                                                              \
    const ::harp::Status harp_status_ = ::harp::testing::status_of(expr);            \
    ASSERT_TRUE(harp_status_.ok()) << #expr << ": " << harp_status_.to_string();     \
  } while (0)
#define HARP_EXPECT_OK(expr)                                                        \
  do {                                                                              \
    const ::harp::Status harp_status_ = ::harp::testing::status_of(expr);            \
    EXPECT_TRUE(harp_status_.ok()) << #expr << ": " << harp_status_.to_string();     \
  } while (0)
#define HARP_CONCAT_INNER_(a, b) a##b
#define HARP_CONCAT_(a, b) HARP_CONCAT_INNER_(a, b)
#define HARP_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  HARP_ASSERT_OK_AND_ASSIGN_IMPL_(HARP_CONCAT_(harp_statusor_, __LINE__), lhs, expr)
#define HARP_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)              \
  auto tmp = (expr);                                                 \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.status().to_string(); \
  lhs = std::move(tmp).value()
