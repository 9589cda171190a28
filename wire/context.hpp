// wire::Context: the messaging context a process makes its sockets in. Layers above wire/ hold one
// and hand it down (a server, a leader's links, a region's store); only wire/ opens sockets in it,
// so ZeroMQ's types stay behind wire/. One per process is the rule; an independent loop in the
// same process (cli/cmd_server.cpp's standby shards) has its own.
//
// Owns ZeroMQ's context (RAII: closing it waits for the sockets made in it to close first, so it
// must outlive them). Thread-safe, as ZeroMQ's context is.
#pragma once

#include <memory>

namespace zmq {
class context_t;
}  // namespace zmq

namespace geotrain::wire {

class Context {
 public:
  // `io_threads`: ZeroMQ's I/O threads (1, its default, serves a server or a leader; a benchmark
  // that moves gigabytes per second may want more).
  explicit Context(int io_threads = 1);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // ZeroMQ's context, for wire/'s sockets and for tests and benchmarks that speak raw ZeroMQ as an
  // independent client of a server.
  zmq::context_t& zmq() { return *context_; }

 private:
  std::unique_ptr<zmq::context_t> context_;
};

}  // namespace geotrain::wire
