#include "worker/region/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <gloo/rendezvous/store.h>
#include <nccl.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/check_cuda.hpp"
#include "core/error.hpp"

namespace geotrain::worker {
namespace {
const std::string kIdKey = "id";
}  // namespace

void NcclCommunicator::CommDeleter::operator()(ncclComm* comm) const {
  // Destructors must not throw: errors here are not reported (the process is tearing down the
  // region anyway). Abort after a failure: ncclCommDestroy could wait on a peer that is gone.
  if (*failed)
    ncclCommAbort(comm);
  else
    ncclCommDestroy(comm);
}

void NcclCommunicator::StreamDeleter::operator()(CUstream_st* stream) const {
  cudaStreamDestroy(stream);
}

NcclCommunicator::NcclCommunicator(gloo::rendezvous::Store& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : rank_(rank), size_(size) {
  GT_REQUIRE(size >= 1 && rank >= 0 && rank < size, "nccl: rank {} is not in [0, size {})", rank,
             size);
  int devices = 0;
  const cudaError_t count_rc = cudaGetDeviceCount(&devices);
  GT_REQUIRE(
      count_rc == cudaSuccess && devices > 0, "nccl: no CUDA device is visible ({})",
      count_rc == cudaSuccess ? "cudaGetDeviceCount returned 0" : cudaGetErrorString(count_rc));
  GT_REQUIRE(
      size <= devices,
      "nccl: {} ranks in the region but {} CUDA device(s) visible; NCCL needs one device per rank "
      "(lower worker.workers_per_region or use device: cpu)",
      size, devices);
  device_ = rank % devices;
  GT_CUDA_CHECK(cudaSetDevice(device_));

  ncclUniqueId id;
  static_assert(sizeof(id) == NCCL_UNIQUE_ID_BYTES);
  if (rank == 0) {
    GT_NCCL_CHECK(ncclGetUniqueId(&id));
    store.set(kIdKey, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<char> bytes;
    try {
      store.wait({kIdKey}, timeout);
      bytes = store.get(kIdKey);
    } catch (const SystemError&) {
      throw;
    } catch (const std::exception& e) {  // gloo's stores throw gloo::IoException and friends
      throw SystemError("rendezvous", "nccl unique id", __FILE__, __LINE__, e.what());
    }
    if (bytes.size() != sizeof(id.internal))
      throw SystemError(
          "rendezvous", "nccl unique id", __FILE__, __LINE__,
          fmt::format("got {} bytes, expected {}", bytes.size(), sizeof(id.internal)));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  cudaStream_t stream = nullptr;
  GT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_.reset(stream);
  ncclComm_t comm = nullptr;
  GT_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));  // blocks until every rank has joined
  comm_.reset(comm);
}

NcclCommunicator::~NcclCommunicator() {
  if (ready_ != nullptr) cudaEventDestroy(ready_);
}

void NcclCommunicator::check_device_pointer(const float* data, const char* what) const {
  cudaPointerAttributes attr{};
  GT_CUDA_CHECK(cudaPointerGetAttributes(&attr, data));
  GT_ASSERT(
      attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged,
      "nccl {}: the span must be device memory (NcclCommunicator's contract), got memory type {}",
      what, static_cast<int>(attr.type));
  GT_ASSERT(attr.device == device_, "nccl {}: the buffer is on device {}, this rank uses device {}",
            what, attr.device, device_);
}

void NcclCommunicator::allreduce_sum(FloatSpan data) {
  if (data.empty()) return;
  check_device_pointer(data.data(), "allreduce_sum");
  try {
    GT_CUDA_CHECK(cudaSetDevice(device_));
    GT_NCCL_CHECK(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum,
                                comm_.get(), stream_.get()));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void NcclCommunicator::allreduce_sum_after(FloatSpan data, CUstream_st* producer) {
  if (data.empty()) return;
  check_device_pointer(data.data(), "allreduce_sum_after");
  try {
    GT_CUDA_CHECK(cudaSetDevice(device_));
    if (ready_ == nullptr) GT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    GT_CUDA_CHECK(cudaEventRecord(ready_, producer));
    GT_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_, 0));
    GT_NCCL_CHECK(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum,
                                comm_.get(), stream_.get()));
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void NcclCommunicator::synchronize() {
  try {
    GT_CUDA_CHECK(cudaSetDevice(device_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void NcclCommunicator::broadcast(FloatSpan data, int root) {
  GT_REQUIRE(root >= 0 && root < size_, "nccl broadcast: root {} is not in [0, size {})", root,
             size_);
  if (data.empty()) return;
  check_device_pointer(data.data(), "broadcast");
  try {
    GT_CUDA_CHECK(cudaSetDevice(device_));
    GT_NCCL_CHECK(ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, root, comm_.get(),
                                stream_.get()));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  } catch (...) {
    failed_ = true;
    throw;
  }
}

}  // namespace geotrain::worker
