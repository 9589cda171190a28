// DeviceBuffer<T>: an owning, non-copyable (movable) CUDA device allocation of n elements, with
// host<->device copies that check their sizes. CUDA-enabled code only. Copies are synchronous
// (cudaMemcpy); not thread-safe for concurrent use of one buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>

#include "core/check_cuda.hpp"
#include "core/error.hpp"

namespace geotrain {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0) GT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return n_; }

  // Grows (never shrinks) to at least n elements; contents are lost when it grows.
  void reserve(size_t n) {
    if (n > n_) *this = DeviceBuffer(n);
  }
  void upload(std::span<const T> host) {
    GT_ASSERT(host.size() <= n_, "upload of {} elements into {}", host.size(), n_);
    GT_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
  }
  void download(std::span<T> host) const {
    GT_ASSERT(host.size() <= n_, "download of {} elements from {}", host.size(), n_);
    GT_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, host.size_bytes(), cudaMemcpyDeviceToHost));
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace geotrain
