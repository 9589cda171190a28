// TensorMotion: how far each tensor of the global model moves in a round, measured by a region's
// leader on the updates it pulls. Every incremental pull adds, per tensor, the squared norm of the
// update (the change in the region's view of the global model) and of the values after it; a
// tensor's relative update is sqrt(sum |update|^2 / sum |values|^2), the RMS size of one pull's
// change against the tensor's size. A tensor that barely moves in a round loses little by being a
// round or two late: this is how the tensors that may lag (`model.critical`, the rest going
// asynchronously under the staleness bound) are chosen by measurement rather than by name
// (`geotrain critical RUN_DIR`, docs/training.md "Choosing the tensors that may lag").
//
// Not thread-safe: the leader's exchange thread adds; rows() is read after the exchanges ended.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"

namespace geotrain::worker {

class TensorMotion {
 public:
  struct Row {
    std::string name;
    uint64_t elements = 0;
    bool critical = false;
    double relative_update = 0.0;  // sqrt(sum |update|^2 / sum |values after|^2); 0 when unmoved
  };

  TensorMotion() = default;
  explicit TensorMotion(const ParamTable& layout);

  // An update applied to the table's elements [at, at + update.size()), `after` the values it
  // left there (the same size). InputError when the range lies outside the table.
  void add(uint64_t at, ConstFloatSpan update, ConstFloatSpan after);
  // One row per tensor, in the table's order.
  std::vector<Row> rows() const;

 private:
  struct Sums {
    double update = 0.0;
    double values = 0.0;
  };
  std::vector<TensorInfo> tensors_;
  std::vector<Sums> sums_;
};

}  // namespace geotrain::worker
