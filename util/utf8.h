// Text checks shared by the input readers: UTF-8 validity and blankness.
#pragma once
#include <cstddef>
#include <string_view>

namespace ragkv {

// Byte offset of the first byte that is not well-formed UTF-8 (overlong forms, surrogates and
// code points above U+10FFFF included), or npos when all of s is valid.
size_t find_invalid_utf8(std::string_view s);

// True when s holds only whitespace (or nothing).
bool is_blank(std::string_view s);

}  // namespace ragkv
