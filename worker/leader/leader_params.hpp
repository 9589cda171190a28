// LeaderParams: a region leader's local parameters as StreamingSync changes them at its exchanges,
// with the overlap rule's state (worker/leader/overlap_merge.hpp) kept beside them. On the host
// (HostLeaderParams: the span the caller passes, and OverlapMerge) or in GPU memory
// (ResidentTraining::leader_params, worker/leader/device_leader_params.hpp: the device-resident
// model's own parameters, the rule's passes as CUDA kernels, bit for bit the host's), so that a
// model trained on a GPU is not copied to the host and back, nor merged there, at every exchange.
//
// The exchange's buffers (the values pushed, the global values pulled) are host memory and
// whole-table; each call reads or writes only the range it names. Not thread-safe: StreamingSync's
// caller thread only.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "core/fragments.hpp"
#include "core/span.hpp"
#include "worker/leader/overlap_merge.hpp"

namespace geotrain::worker {

// A whole-table host buffer of the exchange (the values pushed, the global values pulled), made by
// LeaderParams::host_table in the memory its copies are fastest from: page-locked for a device,
// whose copies from pageable memory go through the driver's staging buffers at a fraction of the
// bus's speed. Contents start as zeros. Move-only.
class HostTable {
 public:
  using Free = void (*)(float*);
  HostTable() = default;
  HostTable(float* data, size_t n, Free free) : data_(data), size_(n), free_(free) {}
  ~HostTable() { reset(); }
  HostTable(HostTable&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), free_(o.free_) {}
  HostTable& operator=(HostTable&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(free_, o.free_);
    return *this;
  }
  HostTable(const HostTable&) = delete;
  HostTable& operator=(const HostTable&) = delete;

  size_t size() const { return size_; }
  FloatSpan span() const { return {data_, size_}; }
  operator FloatSpan() const { return span(); }
  operator ConstFloatSpan() const { return span(); }

 private:
  void reset() {
    if (data_ != nullptr) free_(data_);
    data_ = nullptr;
  }
  float* data_ = nullptr;
  size_t size_ = 0;
  Free free_ = nullptr;
};

class LeaderParams {
 public:
  virtual ~LeaderParams() = default;

  // A host table of n zeros for the exchange's buffers (HostTable); in ordinary memory here.
  virtual HostTable host_table(size_t n);

  // The overlap rule's START on r: push[r] takes the values to push, and x[r] becomes
  // theta_g + proxy(q) (OverlapMerge::start).
  virtual void start(const ElementRange& r, FloatSpan push) = 0;
  // The rule's MERGE on r with the new global values global[r] (OverlapMerge::merge).
  virtual void merge(const ElementRange& r, ConstFloatSpan global) = 0;
  // x[r] = global[r], a blocking exchange's result; the rule, if any, measures from it.
  virtual void take_global(const ElementRange& r, ConstFloatSpan global) = 0;
  // to[r] = x[r].
  virtual void read(const ElementRange& r, FloatSpan to) = 0;
  // After a round boundary's changes: whatever the parameters feed (a GPU model's weight copies)
  // follows them, and the work is done when it returns.
  virtual void commit() {}
  // Hands the parameters and the rule to the host, once: `x` takes the values, and the rule's
  // state comes back (null without a rule). This object is not used afterwards.
  virtual std::unique_ptr<OverlapMerge> to_host(FloatSpan x) = 0;
};

// The host's: a span bound for each call (bind), and the rule (null without overlap).
class HostLeaderParams final : public LeaderParams {
 public:
  explicit HostLeaderParams(std::unique_ptr<OverlapMerge> rule = nullptr)
      : rule_(std::move(rule)) {}
  void bind(FloatSpan x) { x_ = x; }
  FloatSpan span() const { return x_; }
  OverlapMerge* rule() { return rule_.get(); }

  void start(const ElementRange& r, FloatSpan push) override;
  void merge(const ElementRange& r, ConstFloatSpan global) override;
  void take_global(const ElementRange& r, ConstFloatSpan global) override;
  void read(const ElementRange& r, FloatSpan to) override;
  std::unique_ptr<OverlapMerge> to_host(FloatSpan x) override;

 private:
  std::unique_ptr<OverlapMerge> rule_;
  FloatSpan x_;
};

// Makes a device's LeaderParams with the rule of (mode, outer, regions) starting from the global
// values `global` (StreamingConfig::device_params).
using MakeLeaderParams = std::function<std::unique_ptr<LeaderParams>(
    OverlapMode mode, OuterStepConfig outer, uint32_t regions, ConstFloatSpan global)>;

}  // namespace geotrain::worker
