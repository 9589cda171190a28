#include "worker/leader/device_leader_params.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check_cuda.hpp"
#include "core/error.hpp"
#include "kernels/overlap_cuda.cuh"

namespace geotrain::worker {
namespace {

// A copy of r between a host table and a device table, on `stream`.
void copy_range(float* to, const float* from, const ElementRange& r, cudaMemcpyKind kind,
                cudaStream_t stream) {
  GT_CUDA_CHECK(
      cudaMemcpyAsync(to + r.offset, from + r.offset, r.count * sizeof(float), kind, stream));
}

}  // namespace

DeviceLeaderParams::DeviceLeaderParams(float* x, size_t n, cudaStream_t stream,
                                       std::function<void()> changed, OverlapMode mode,
                                       OuterStepConfig outer, uint32_t regions,
                                       ConstFloatSpan global)
    : x_(x),
      n_(n),
      stream_(stream),
      changed_(std::move(changed)),
      mode_(mode),
      outer_(outer),
      regions_(regions),
      rule_(OverlapMerge::rule_for(mode, outer, regions)),
      global_(n),
      after_start_(n),
      scratch_(n) {
  GT_REQUIRE(global.size() == n, "leader parameters: {} global values for {} parameters",
             global.size(), n);
  // The host rule's checks (lr, momentum), and its start: zero momentum and delayed shares.
  OuterStepModel check_outer(outer, 0);
  global_.upload(global);
  after_start_.upload(global);
  if (OverlapMerge::keeps_momentum(mode, outer)) momentum_ = DeviceBuffer<float>(n);
  if (OverlapMerge::keeps_others(mode)) {
    last_push_ = DeviceBuffer<float>(n);
    others_ = DeviceBuffer<float>(n);
  }
  for (auto* b : {&momentum_, &last_push_, &others_})
    if (b->size() > 0) GT_CUDA_CHECK(cudaMemsetAsync(b->get(), 0, n * sizeof(float), stream_));
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

HostTable DeviceLeaderParams::host_table(size_t n) {
  float* p = nullptr;
  GT_CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(float)));
  std::memset(p, 0, n * sizeof(float));
  return {p, n, [](float* q) { cudaFreeHost(q); }};
}

kernels::OverlapArrays DeviceLeaderParams::arrays() {
  auto data = [](DeviceBuffer<float>& b) { return b.size() > 0 ? b.get() : nullptr; };
  return {data(global_), data(after_start_), data(momentum_), data(last_push_), data(others_)};
}

void DeviceLeaderParams::check(const ElementRange& r, size_t host_size, const char* what) const {
  GT_ASSERT(r.end() <= n_ && host_size == n_, "{}: range [{}, {}) of {}, host table of {}", what,
            r.offset, r.end(), n_, host_size);
}

void DeviceLeaderParams::start(const ElementRange& r, FloatSpan push) {
  check(r, push.size(), "overlap start");
  kernels::cuda::overlap_start(rule_, arrays(), x_, scratch_.get(), r.offset, r.count, stream_);
  copy_range(push.data(), scratch_.get(), r, cudaMemcpyDeviceToHost, stream_);
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // push is read by the exchange thread next
  dirty_ = true;
}

void DeviceLeaderParams::merge(const ElementRange& r, ConstFloatSpan global) {
  check(r, global.size(), "overlap merge");
  copy_range(scratch_.get(), global.data(), r, cudaMemcpyHostToDevice, stream_);
  kernels::cuda::overlap_merge(rule_, arrays(), x_, scratch_.get(), r.offset, r.count, stream_);
  dirty_ = true;
}

void DeviceLeaderParams::take_global(const ElementRange& r, ConstFloatSpan global) {
  check(r, global.size(), "take_global");
  copy_range(x_, global.data(), r, cudaMemcpyHostToDevice, stream_);
  for (auto* to : {&global_, &after_start_})
    copy_range(to->get(), x_, r, cudaMemcpyDeviceToDevice, stream_);
  dirty_ = true;
}

void DeviceLeaderParams::read(const ElementRange& r, FloatSpan to) {
  check(r, to.size(), "read");
  copy_range(to.data(), x_, r, cudaMemcpyDeviceToHost, stream_);
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void DeviceLeaderParams::commit() {
  if (dirty_ && changed_) changed_();
  dirty_ = false;
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::unique_ptr<OverlapMerge> DeviceLeaderParams::to_host(FloatSpan x) {
  commit();
  read({0, n_}, x);
  auto download = [&](const DeviceBuffer<float>& b) {
    std::vector<float> v(b.size());
    if (!v.empty()) b.download(v);
    return v;
  };
  OverlapState state{download(global_), download(after_start_), download(momentum_),
                     download(last_push_), download(others_)};
  return std::make_unique<OverlapMerge>(mode_, outer_, regions_, std::move(state));
}

}  // namespace geotrain::worker
