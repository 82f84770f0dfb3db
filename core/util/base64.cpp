// Base64 encoding and strict decoding (RFC 4648 §4).
#include "core/util/base64.h"

#include <array>
#include <cstdint>

namespace ragkv {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> decode_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[uint8_t(kAlphabet[i])] = int8_t(i);
  return t;
}
constexpr std::array<int8_t, 256> kDecode = decode_table();
}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=y=" style
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      int8_t d = 0;
      if (j >= 4 - pad) {
        if (c != '=') return std::nullopt;
      } else {
        d = kDecode[uint8_t(c)];
        if (d < 0) return std::nullopt;
      }
      v = v << 6 | uint32_t(d);
    }
    out += char(v >> 16);
    if (pad < 2) out += char((v >> 8) & 0xff);
    if (pad < 1) out += char(v & 0xff);
  }
  return out;
}

}  // namespace ragkv
