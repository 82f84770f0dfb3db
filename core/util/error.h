// The one error type of ragkv: thrown with a message a user can act on, caught once in cmd/.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ragkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ragkv
