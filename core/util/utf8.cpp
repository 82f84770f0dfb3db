// UTF-8 validation (RFC 3629 §4's well-formed byte sequences), repair with U+FFFD, and blank-text checks.
#include "core/util/utf8.h"

#include <algorithm>
#include <cctype>

namespace ragkv {

namespace {

// The well-formed sequence at p[i] (i < n): its length, or 0 when there is none, with in *bad the
// length of the maximal subpart to replace (Unicode §3.9, "U+FFFD substitution of maximal
// subparts": a lead byte and the continuation bytes that still fit its allowed ranges).
size_t sequence_at(const unsigned char* p, size_t n, size_t i, size_t* bad) {
  const unsigned c = p[i];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
    if (c == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // no overlong 4-byte forms
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *bad = 1;  // continuation byte without a lead, 0xC0/0xC1, 0xF5..0xFF
    return 0;
  }
  size_t k = 1;
  if (i + 1 < n && p[i + 1] >= lo && p[i + 1] <= hi) {
    k = 2;
    while (k < len && i + k < n && (p[i + k] & 0xC0) == 0x80) ++k;
  }
  if (k == len) return len;
  *bad = k;
  return 0;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = sequence_at(p, s.size(), i, &bad);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string to_valid_utf8(std::string_view s) {
  if (find_invalid_utf8(s) == std::string_view::npos) return std::string(s);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size() + 8);
  size_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = sequence_at(p, s.size(), i, &bad);
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += bad;
    }
  }
  return out;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

}  // namespace ragkv
