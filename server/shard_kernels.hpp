// The loops a shard runs over its values on every push and pull besides the optimizer step
// (server/outer_optimizer.hpp), each fused so that one call is one pass over the shard: on a
// server the pushes and pulls of large shards are bound by memory bandwidth, and every pass
// costs about what a memcpy of the shard costs.
//
// Pure loops over the caller's buffers; nothing allocates, blocks or checks sizes beyond asserts.
#pragma once

#include "core/span.hpp"

namespace geotrain::server {

// True when no element is NaN or infinite.
bool all_finite(ConstFloatSpan x);

// Lossy downlink, the input of the error-feedback encode: g = values - sent, then sent = values.
void take_change(ConstFloatSpan values, FloatSpan sent, FloatSpan g);

}  // namespace geotrain::server
