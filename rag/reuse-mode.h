// The reuse modes of `answer` and `eval` (DESIGN.md §1): what a prompt's prefill may take from
// chunk caches.
//   full    no reuse: the prompt computed from scratch (the oracle);
//   prefix  the exact prefix [BOS][instruction][chunk 1] taken from the store, the rest computed —
//           the same calls as `full`, so its output is bit-identical;
//   reuse   every cached chunk reused at its new position with RoPE fixed, only the question
//           (and chunks without a cache) computed: the "full KV reuse" baseline;
//   blend   CacheBlend: reuse, then selectively recompute the High-KV-Deviation tokens, chosen by
//           gradual filtering over the first layers (CacheBlend §4.2–4.3).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ragkv {

enum class ReuseMode : uint8_t { full, prefix, reuse, blend };
const char* reuse_mode_name(ReuseMode m);
ReuseMode parse_reuse_mode(const std::string& s);  // Error listing the modes
bool is_reuse_mode(const std::string& s);
std::string reuse_mode_list();                     // "full, prefix, reuse or blend"
std::vector<std::string> reuse_mode_names();       // for flag validators

}  // namespace ragkv
