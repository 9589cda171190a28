// The socket addresses geotrain takes, checked with one rule wherever one is named (a config's
// server.endpoints and routes, a --endpoint flag) and where a socket is opened:
//   tcp://HOST:PORT   PORT 0..65535, or * (0 and *: the kernel picks a port when binding)
//   inproc://NAME     in one process (tests)
//   ipc://PATH        a Unix socket
// Pure functions; no I/O.
#pragma once

#include <string>

namespace geotrain {

// InputError naming `what` (e.g. "server.endpoints.us-east", empty for none) and the endpoint
// when it is not one of the forms above.
void require_endpoint(const std::string& endpoint, const std::string& what = "");

}  // namespace geotrain
