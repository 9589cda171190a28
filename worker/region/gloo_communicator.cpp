#include "worker/region/gloo_communicator.hpp"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <exception>

#include "core/error.hpp"
#include "worker/stopped.hpp"

namespace geotrain::worker {
namespace {
// A collective that failed leaves the context unusable, whatever the cause (a peer's closed
// connection, a timeout): the group is broken.
[[noreturn]] void rethrow_as_group_broken(const char* what_call, const std::exception& e) {
  throw GroupBroken("Gloo", what_call, __FILE__, __LINE__, e.what());
}
}  // namespace

GlooCommunicator::GlooCommunicator(gloo::rendezvous::Store& store, int rank, int size,
                                   const GlooOptions& options)
    : rank_(rank), size_(size) {
  GT_REQUIRE(size >= 1 && rank >= 0 && rank < size, "gloo: rank {} is not in [0, size {})", rank,
             size);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(store, device);
    // connectFullMesh returns once this rank's pairs are connected, not the others': a rank that
    // closed its context at once (a group formed and left) would cut a slower rank's handshake.
    // The barrier makes the group whole before anyone can leave it.
    gloo::BarrierOptions barrier(context);
    barrier.setTag(tag_++);
    gloo::barrier(barrier);
    context_ = std::move(context);
  } catch (const InputError&) {
    throw;
  } catch (const Stopped&) {
    throw;
  } catch (const std::exception& e) {
    // A member that died while the others connected: the group to form is broken already.
    rethrow_as_group_broken("connectFullMesh", e);
  }
}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::allreduce_sum(FloatSpan data) {
  if (data.empty() || size_ == 1) return;
  try {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag_++);
    gloo::allreduce(opts);
  } catch (const std::exception& e) {
    rethrow_as_group_broken("allreduce", e);
  }
}

void GlooCommunicator::broadcast(FloatSpan data, int root) {
  GT_REQUIRE(root >= 0 && root < size_, "gloo broadcast: root {} is not in [0, size {})", root,
             size_);
  if (data.empty() || size_ == 1) return;
  try {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setRoot(root);
    opts.setTag(tag_++);
    gloo::broadcast(opts);
  } catch (const std::exception& e) {
    rethrow_as_group_broken("broadcast", e);
  }
}

void GlooCommunicator::reduce_scatter_sum(FloatSpan data, std::span<const uint64_t> counts) {
  check_counts(data.size(), counts);
  if (size_ == 1) return;
  const auto k = static_cast<size_t>(size_);
  std::vector<uint64_t> offsets(k, 0);
  for (size_t r = 1; r < k; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  const uint64_t longest = *std::max_element(counts.begin(), counts.end());
  const uint64_t mine = counts[rank_];
  const uint64_t cap = std::min(kPieceElements, longest);  // a small model's scratch is small
  send_.resize(k * cap);
  receive_.resize(k * cap);
  float* out = data.data() + offsets[rank_];
  try {
    for (uint64_t at = 0; at < longest; at += kPieceElements) {
      // Piece `at` of every rank's range, packed in rank order; this rank receives piece `at` of
      // its own range from every rank.
      std::vector<int64_t> send_counts(k), receive_counts(k);
      size_t packed = 0;
      for (size_t r = 0; r < k; ++r) {
        const uint64_t n = counts[r] > at ? std::min(kPieceElements, counts[r] - at) : 0;
        std::copy_n(data.data() + offsets[r] + at, n, send_.data() + packed);
        send_counts[r] = static_cast<int64_t>(n);
        packed += n;
      }
      const uint64_t piece = mine > at ? std::min(kPieceElements, mine - at) : 0;
      std::fill(receive_counts.begin(), receive_counts.end(), static_cast<int64_t>(piece));
      gloo::AlltoallvOptions opts(context_);
      opts.setInput(send_.data(), send_counts);
      opts.setOutput(receive_.data(), receive_counts);
      opts.setTag(tag_++);
      gloo::alltoallv(opts);
      // The sum in rank order: the same bits on every rank.
      for (uint64_t i = 0; i < piece; ++i) {
        float s = receive_[i];
        for (size_t r = 1; r < k; ++r) s += receive_[r * piece + i];
        out[at + i] = s;
      }
    }
  } catch (const std::exception& e) {
    rethrow_as_group_broken("alltoallv", e);
  }
}

void GlooCommunicator::allgather(FloatSpan data, std::span<const uint64_t> counts) {
  check_counts(data.size(), counts);
  if (size_ == 1 || data.empty()) return;
  try {
    gloo::AllgathervOptions opts(context_);
    opts.setOutput(data.data(), std::vector<size_t>(counts.begin(), counts.end()));
    opts.setTag(tag_++);
    gloo::allgatherv(opts);
  } catch (const std::exception& e) {
    rethrow_as_group_broken("allgatherv", e);
  }
}

}  // namespace geotrain::worker
