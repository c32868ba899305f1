#include "harp/common/check.h"

#include <cstdio>
#include <cstdlib>

namespace harp::internal {

CheckFailure::CheckFailure(const char* file, int line, const std::string& condition) {
  stream_ << "HARP_CHECK failed at " << file << ":" << line << ": " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n(this is a bug in HARP; please report it)\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace harp::internal
