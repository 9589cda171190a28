// The exception types of core/error.hpp, without fmt, so that CUDA sources (whose compiler
// cannot digest fmt's compile-time format checks) can include them through check_cuda.hpp.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace geotrain {

// Bad input from outside the process: a message, a config value, a file.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A call into a system library failed. what() reads "<api> error at file:line: <expr>: <detail>".
class SystemError : public std::runtime_error {
 public:
  SystemError(std::string_view api, std::string_view expr, std::string_view file, int line,
              std::string_view detail);
  const std::string& api() const { return api_; }

 private:
  std::string api_;
};

}  // namespace geotrain
