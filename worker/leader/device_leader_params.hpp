// DeviceLeaderParams: LeaderParams (worker/leader/leader_params.hpp) over parameters in GPU memory
// (the device-resident model's fp32 master copy), with the overlap rule's state on the device and
// its passes as CUDA kernels (kernels/overlap_cuda.cuh), bit for bit the host's OverlapMerge (the
// `gpu` suite holds them equal). A round boundary then costs the PCIe copies of the fragment's
// values pushed and pulled (the exchange itself still runs on the host) and one pass of the rule
// on the device, instead of the whole model's copy to the host and back and the rule's passes on
// the host. Memory: beside the parameters, the rule's arrays (two to five tables) and one scratch
// table, on the device. CUDA-enabled code only.
//
// Every call runs on `stream` (the model's, so the steps before and after are ordered with it);
// copies to the host have completed when a call returns, copies from it have been staged.
// commit() calls `changed` (the model's weight copies follow) and waits for the stream.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "core/device_buffer.hpp"
#include "kernels/overlap_math.hpp"
#include "worker/leader/leader_params.hpp"

namespace geotrain::worker {

class DeviceLeaderParams final : public LeaderParams {
 public:
  // x: the n parameters on the device (not owned); `global`: the global values the rule starts
  // from (host, n).
  DeviceLeaderParams(float* x, size_t n, cudaStream_t stream, std::function<void()> changed,
                     OverlapMode mode, OuterStepConfig outer, uint32_t regions,
                     ConstFloatSpan global);

  // Page-locked (cudaMallocHost): the copies of start() and merge() run at the bus's speed.
  HostTable host_table(size_t n) override;
  void start(const ElementRange& r, FloatSpan push) override;
  void merge(const ElementRange& r, ConstFloatSpan global) override;
  void take_global(const ElementRange& r, ConstFloatSpan global) override;
  void read(const ElementRange& r, FloatSpan to) override;
  void commit() override;
  std::unique_ptr<OverlapMerge> to_host(FloatSpan x) override;

 private:
  void check(const ElementRange& r, size_t host_size, const char* what) const;
  kernels::OverlapArrays arrays();

  float* x_;
  size_t n_;
  cudaStream_t stream_;
  std::function<void()> changed_;
  OverlapMode mode_;
  OuterStepConfig outer_;
  uint32_t regions_;
  kernels::OverlapRule rule_;
  DeviceBuffer<float> global_, after_start_, momentum_, last_push_, others_;
  DeviceBuffer<float> scratch_;  // the values pushed, or the global values pulled
  bool dirty_ = false;           // changed since the last commit()
};

}  // namespace geotrain::worker
