// NcclCommunicator: Communicator over NCCL, one GPU per rank (GPU workers).
//
// MEMORY: the spans passed to allreduce_sum and broadcast are DEVICE memory (cudaMalloc'd on
// this rank's device), not host memory as for GlooCommunicator: the Communicator interface's
// spans borrow device buffers here. A host pointer is refused (GT_ASSERT: our bug).
//
// Owns: the NCCL communicator and a CUDA stream (created on this rank's device) that every
// collective runs on. Each call blocks until its collective has completed on the stream, so
// the buffer may be read or reused as soon as it returns. Not thread-safe: one thread.
//
// Rendezvous: rank 0 calls ncclGetUniqueId and publishes the id's bytes under the key "id" of
// the gloo::rendezvous::Store the caller gives (e.g. a ServerStore with prefix
// "nccl/<region>/"; a PrefixStore over a HashStore when ranks are threads in tests); the other
// ranks wait for it (up to `timeout`, then SystemError). Each rank selects device
// `rank % cudaGetDeviceCount()` (cudaSetDevice, also left current for the calling thread) and
// calls ncclCommInitRank, which blocks until all `size` ranks have joined. NCCL allows one rank
// per device in a communicator, so `size` may not exceed the visible device count (InputError).
//
// Destruction: ncclCommDestroy after successful use; ncclCommAbort once a call has failed, so
// that a dead peer cannot make the destructor hang. Then the stream is destroyed.
#pragma once

#include <chrono>
#include <memory>

#include "worker/region/communicator.hpp"

// Opaque handles, so that this header needs neither <nccl.h> nor <cuda_runtime.h>.
struct ncclComm;
struct CUstream_st;
struct CUevent_st;

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace geotrain::worker {

class NcclCommunicator final : public Communicator {
 public:
  // InputError when rank is not in [0, size), when no CUDA device is visible, or when size
  // exceeds the device count. SystemError (from GT_CUDA_CHECK / GT_NCCL_CHECK or the store)
  // when the rendezvous or communicator creation fails.
  NcclCommunicator(gloo::rendezvous::Store& store, int rank, int size,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }  // the CUDA device this rank's buffers must live on
  // `data` is device memory on device(); in place, blocking (see the header comment).
  void allreduce_sum(FloatSpan data) override;
  void broadcast(FloatSpan data, int root) override;
  // Asynchronous AllReduce for overlapping with backward: the collective is queued on this
  // rank's NCCL stream behind an event recorded now on `producer` (the compute stream that
  // writes `data`), and the call returns at once. `data` must stay valid and unwritten by
  // `producer` until synchronize() returns.
  void allreduce_sum_after(FloatSpan data, CUstream_st* producer);
  // Waits until every collective queued on the NCCL stream has completed.
  void synchronize();

 private:
  struct CommDeleter {
    bool* failed;
    void operator()(ncclComm* comm) const;
  };
  struct StreamDeleter {
    void operator()(CUstream_st* stream) const;
  };
  void check_device_pointer(const float* data, const char* what) const;

  int rank_, size_;
  int device_ = 0;
  bool failed_ = false;
  // allreduce_sum_after's event, re-recorded for each call: a stream waits on the record that
  // is the most recent when cudaStreamWaitEvent is called, so one event serves every bucket.
  CUevent_st* ready_ = nullptr;  // a call has failed: destroy by ncclCommAbort
  // Declared in this order so that the communicator is destroyed before its stream.
  std::unique_ptr<CUstream_st, StreamDeleter> stream_;
  std::unique_ptr<ncclComm, CommDeleter> comm_{nullptr, CommDeleter{&failed_}};
};

}  // namespace geotrain::worker
