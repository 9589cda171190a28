// OuterStep: the outer optimizer's settings (server.optimizer). The servers apply it to each
// released round (server/outer_optimizer.hpp); the leaders' eager and delayed merges predict it
// (worker/leader/overlap_merge.hpp). Read once, by read_shared_protocol (core/deployment_keys.hpp).
#pragma once

namespace geotrain {

struct OuterStep {
  float lr = 1.0f;
  float momentum = 0.0f;  // in [0, 1)
  bool nesterov = false;
};

}  // namespace geotrain
