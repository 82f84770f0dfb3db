// Text checks shared by the input readers and the answers: UTF-8 validity, repair and blankness.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace ragkv {

// Byte offset of the first byte that is not well-formed UTF-8 (overlong forms, surrogates and
// code points above U+10FFFF included), or npos when all of s is valid.
size_t find_invalid_utf8(std::string_view s);

// s with each maximal ill-formed subpart replaced by U+FFFD (Unicode §3.9; what Python's
// bytes.decode("utf-8", "replace") and Hugging Face's detokenisers do): generated text cut
// inside a character, or a byte-level token that is not text, still makes valid JSON.
std::string to_valid_utf8(std::string_view s);

// True when s holds only whitespace (or nothing).
bool is_blank(std::string_view s);

}  // namespace ragkv
