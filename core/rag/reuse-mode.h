// The reuse modes of `answer` and `eval` (DESIGN.md §1): what a prompt's prefill may take from
// chunk caches.
//   full    no reuse: the prompt computed from scratch (the oracle);
//   prefix  the exact prefix [BOS][instruction][chunk 1] taken from the store, the rest computed —
//           the same calls as `full`, so its output is bit-identical;
//   reuse   every cached chunk reused at its new position with RoPE fixed, only the question
//           (and chunks without a cache) computed: the "full KV reuse" baseline;
//   blend   CacheBlend: reuse, then selectively recompute the High-KV-Deviation tokens, chosen by
//           gradual filtering over the first layers (CacheBlend §4.2–4.3);
//   craft   Cache-Craft: per chunk the cached variant with the lowest Cache Fix Overhead, its most
//           contextualised tokens recomputed, an exact chain reused as is, and the recompute of
//           chunks the question does not focus on stopped early (cache-craft.txt §3);
//   auto    the default with a store: per chunk, an exact chain where one exists, craft's fix where
//           the chunk has variant metadata, and blend's selection (the default method) for the rest.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ragkv {

enum class ReuseMode : uint8_t { full, prefix, reuse, blend, craft, auto_ };
const char* reuse_mode_name(ReuseMode m);
ReuseMode parse_reuse_mode(const std::string& s);  // Error listing the modes
bool is_reuse_mode(const std::string& s);
std::string reuse_mode_list();                     // "full, prefix, reuse, blend, craft or auto"
std::vector<std::string> reuse_mode_names();       // for flag validators

}  // namespace ragkv
