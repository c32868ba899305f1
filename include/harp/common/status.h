// Status and StatusOr: the returned kind of error (docs/errors.md). Things that can go
// wrong in a correct program (bad input, missing file, infeasible plan) are returned;
// broken invariants use HARP_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "harp/common/check.h"

namespace harp {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a value in an input breaks a rule; the message names field and fix
  kNotFound,         // a named file, entry or preset does not exist
  kIoError,          // reading or writing a file failed
  kInfeasible,       // a well-formed problem has no solution (not a bug, not bad syntax)
  kFailedPrecondition,  // inputs are valid alone but do not fit together
  kInternal,         // something that should not happen but is reported, not aborted
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status invalid_argument(std::string message);
Status not_found(std::string message);
Status io_error(std::string message);
Status infeasible(std::string message);
Status failed_precondition(std::string message);

// Either a value or a non-ok Status. value() on an error is a bug (checked).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    HARP_CHECK(!status_.ok()) << "StatusOr built from an ok Status without a value";
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& {
    HARP_CHECK(ok()) << status_.to_string();
    return *value_;
  }
  T& value() & {
    HARP_CHECK(ok()) << status_.to_string();
    return *value_;
  }
  T&& value() && {
    HARP_CHECK(ok()) << status_.to_string();
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace harp

// Returns from the enclosing function if `expr` (a Status) is not ok.
#define HARP_RETURN_IF_ERROR(expr)                \
  do {                                            \
    ::harp::Status harp_status_ = (expr);         \
    if (!harp_status_.ok()) return harp_status_;  \
  } while (0)

#define HARP_CONCAT_INNER_(a, b) a##b
#define HARP_CONCAT_(a, b) HARP_CONCAT_INNER_(a, b)
// HARP_ASSIGN_OR_RETURN(auto x, f()): assigns the value or returns the error.
#define HARP_ASSIGN_OR_RETURN(lhs, expr) \
  HARP_ASSIGN_OR_RETURN_IMPL_(HARP_CONCAT_(harp_statusor_, __LINE__), lhs, expr)
#define HARP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
