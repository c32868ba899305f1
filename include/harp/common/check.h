// HARP_CHECK: the broken-invariant kind of error (docs/errors.md). A failed check is a
// bug in HARP: it prints file:line, the condition, both operands for the _EQ/_LT forms
// and any streamed context, then aborts. Never used for bad user input.
#pragma once

#include <sstream>
#include <string>

namespace harp::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const std::string& condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Makes `HARP_CHECK(c) << x` a statement of type void in both branches.
struct Voidify {
  void operator&(std::ostream&) {}
};

template <typename A, typename B>
std::string check_operands(const A& a, const B& b) {
  std::ostringstream s;
  s << " (" << a << " vs " << b << ")";
  return s.str();
}

}  // namespace harp::internal

#define HARP_CHECK(cond)                 \
  (cond) ? (void)0                       \
         : ::harp::internal::Voidify() & \
               ::harp::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define HARP_CHECK_OP_(a, op, b)                                                         \
  ((a)op(b)) ? (void)0                                                                   \
             : ::harp::internal::Voidify() &                                             \
                   ::harp::internal::CheckFailure(__FILE__, __LINE__,                    \
                                                  #a " " #op " " #b +                    \
                                                      ::harp::internal::check_operands( \
                                                          (a), (b)))                     \
                       .stream()

#define HARP_CHECK_EQ(a, b) HARP_CHECK_OP_(a, ==, b)
#define HARP_CHECK_NE(a, b) HARP_CHECK_OP_(a, !=, b)
#define HARP_CHECK_LT(a, b) HARP_CHECK_OP_(a, <, b)
#define HARP_CHECK_LE(a, b) HARP_CHECK_OP_(a, <=, b)
#define HARP_CHECK_GT(a, b) HARP_CHECK_OP_(a, >, b)
#define HARP_CHECK_GE(a, b) HARP_CHECK_OP_(a, >=, b)
