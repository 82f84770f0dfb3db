// One table of names per enum, for printing a value and parsing a flag or a file field back
// (modes, KV tiers, input problems): the name list and the error message come from the same
// table, so they cannot drift apart.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/util/error.h"

namespace ragkv {

template <typename E, size_t N>
struct EnumNames {
  std::array<std::pair<E, const char*>, N> entries;

  const char* name(E e) const {
    for (const auto& [v, n] : entries)
      if (v == e) return n;
    return "?";
  }
  // Error "unknown WHAT 'x' (expected a, b or c)".
  E parse(std::string_view s, const char* what) const {
    for (const auto& [v, n] : entries)
      if (s == n) return v;
    fail("unknown {} '{}' (expected {})", what, s, list());
  }
  bool contains(std::string_view s) const {
    for (const auto& [v, n] : entries)
      if (s == n) return true;
    return false;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [v, n] : entries) out.push_back(n);
    return out;
  }
  // "a, b or c"
  std::string list() const {
    std::string out;
    for (size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += entries[i].second;
    }
    return out;
  }
};

}  // namespace ragkv
