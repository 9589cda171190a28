#include "worker/region/gloo_communicator.hpp"

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

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

}  // namespace geotrain::worker
