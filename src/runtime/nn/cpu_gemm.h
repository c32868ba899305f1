// oneDNN's sgemm as the runtime's CPU kernels call it (linear.cc, kernels.cc; defined in
// cpu_gemm.cc). Not a public header.
#pragma once

#include <cstdint>

namespace harp::runtime {

#ifdef HARP_WITH_ONEDNN
// C = alpha op(A) op(B) + beta C, every matrix row-major with the leading dimensions
// given (op 'N': as stored, 'T': transposed; A is m x k after op, B k x n). Inside an
// OpenMP parallel region it runs on the calling thread alone; otherwise on torch's pool.
void sgemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
#endif

}  // namespace harp::runtime
