// Check macros for CUDA runtime, cuBLAS and NCCL calls. Include only from CUDA-enabled code
// (files built when GEOTRAIN_HAVE_CUDA is on). Each throws SystemError naming the API, the
// failing expression, file:line and the library's own error string.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error_types.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define GEOTRAIN_CHECK_HAS_NCCL 1
#endif

namespace geotrain::detail {

inline void cuda_check(cudaError_t rc, const char* expr, const char* file, int line) {
  if (rc != cudaSuccess) [[unlikely]]
    throw SystemError("CUDA", expr, file, line,
                      std::string(cudaGetErrorString(rc)) + " (" + cudaGetErrorName(rc) + ")");
}

inline void cublas_check(cublasStatus_t rc, const char* expr, const char* file, int line) {
  if (rc != CUBLAS_STATUS_SUCCESS) [[unlikely]]
    throw SystemError("cuBLAS", expr, file, line,
                      std::string(cublasGetStatusString(rc)) + " (status " +
                          std::to_string(static_cast<int>(rc)) + ")");
}

#ifdef GEOTRAIN_CHECK_HAS_NCCL
inline void nccl_check(ncclResult_t rc, const char* expr, const char* file, int line) {
  if (rc != ncclSuccess) [[unlikely]]
    throw SystemError("NCCL", expr, file, line,
                      std::string(ncclGetErrorString(rc)) + " (result " +
                          std::to_string(static_cast<int>(rc)) + ")");
}
#endif

}  // namespace geotrain::detail

#define GT_CUDA_CHECK(expr) ::geotrain::detail::cuda_check((expr), #expr, __FILE__, __LINE__)
#define GT_CUBLAS_CHECK(expr) ::geotrain::detail::cublas_check((expr), #expr, __FILE__, __LINE__)
#define GT_NCCL_CHECK(expr) ::geotrain::detail::nccl_check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: catches launch-configuration errors at the launch site.
#define GT_CUDA_CHECK_LAUNCH() GT_CUDA_CHECK(cudaGetLastError())
