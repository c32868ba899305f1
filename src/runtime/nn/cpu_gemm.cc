// oneDNN's sgemm, the lowest piece of the runtime's CPU layers (see cpu_gemm.h): the
// linear layer and the fused kernels both stand on it, neither on the other.
#include "cpu_gemm.h"

#include "harp/common/check.h"
#include "harp/runtime/nn/gemm.h"

#ifdef HARP_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace harp::runtime {

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
  const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  HARP_CHECK(status == dnnl_success) << "oneDNN sgemm failed (status " << static_cast<int>(status) << ") for m " << m
                                     << ", n " << n << ", k " << k;
}
#endif

}  // namespace harp::runtime
