// Base64 (RFC 4648, standard alphabet, padded): binary blobs inside JSON lines.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace ragkv {

std::string base64_encode(std::string_view bytes);
// The bytes, or nothing when text is not padded standard base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace ragkv
