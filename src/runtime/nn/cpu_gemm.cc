// oneDNN's sgemm, the lowest piece of the runtime's CPU layers (see cpu_gemm.h): the
// linear layer and the fused kernels both stand on it, neither on the other.
#include "cpu_gemm.h"

#include "harp/common/check.h"
#include "harp/runtime/nn/gemm.h"

#ifdef HARP_WITH_ONEDNN
#include <dlfcn.h>

#include <oneapi/dnnl/dnnl.h>
#endif

namespace harp::runtime {

#ifdef HARP_WITH_ONEDNN
namespace {

// Debian's libdnnl is opened here with RTLD_DEEPBIND, not linked. PyPI's libtorch carries a
// oneDNN of its own and exports some of its template statics (the once-flags that guard the
// set-up of sgemm's JIT kernels); a linked libdnnl bound those names to libtorch's copies,
// its kernels were never set up, and dnnl_sgemm returned dnnl_unimplemented. Bound deep,
// the library resolves its own names first. HARP_DNNL_LIBRARY is the path CMake found.
using Sgemm = decltype(&dnnl_sgemm);

Sgemm load_sgemm() {
  void* lib = dlopen(HARP_DNNL_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  HARP_CHECK(lib != nullptr) << "cannot open oneDNN (" << HARP_DNNL_LIBRARY << "): " << dlerror()
                             << "; install libdnnl-dev (make deps) or rebuild with -DHARP_WITH_ONEDNN=OFF";
  auto f = reinterpret_cast<Sgemm>(dlsym(lib, "dnnl_sgemm"));
  HARP_CHECK(f != nullptr) << "no dnnl_sgemm in " << HARP_DNNL_LIBRARY;
  return f;
}

}  // namespace
#endif

bool onednn_available() {
#ifdef HARP_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

#ifdef HARP_WITH_ONEDNN
void sgemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C = beta C
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  static const Sgemm dnnl = load_sgemm();
  const dnnl_status_t status = dnnl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  HARP_CHECK(status == dnnl_success) << "oneDNN sgemm failed (status " << static_cast<int>(status) << ") for m " << m
                                     << ", n " << n << ", k " << k;
}
#endif

}  // namespace harp::runtime
