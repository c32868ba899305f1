#include "harp/common/status.h"

namespace harp {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kInfeasible: return "infeasible";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status invalid_argument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status io_error(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
Status infeasible(std::string m) { return Status(StatusCode::kInfeasible, std::move(m)); }
Status failed_precondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}

}  // namespace harp
