#include "wire/context.hpp"

#include <zmq.hpp>

namespace geotrain::wire {

Context::Context(int io_threads) : context_(std::make_unique<zmq::context_t>(io_threads)) {}

Context::~Context() = default;

}  // namespace geotrain::wire
