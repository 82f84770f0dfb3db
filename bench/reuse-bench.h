// `ragkv bench reuse`: time to first token of one RAG prompt in each reuse mode, side by side
// with `full` in the same run, and for each place the chunk KV can start from (RAGCache §4's
// tiers): cold on disk, in the OS page cache, in host memory, already in the backend's memory
// (GPU memory on CUDA), or only on a Redis server (the remote tier, core/kv/redis-tier.h).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend/backend.h"
#include "core/rag/plan.h"
#include "core/rag/mode-spec.h"
#include "core/rag/reuse-mode.h"

namespace ragkv {

// Where the chunk KV starts when a prefill needs it.
enum class KvStart : uint8_t {
  disk,        // the chunk files' pages dropped from the page cache before each prefill
  page_cache,  // the files read before (the warm-up), so their pages are cached
  host,        // every layer read and verified into host memory before the prefill (KvTiers host)
  device,      // every layer already in the backend's memory (KvTiers device), copied from there
  remote,      // only on the remote tier: the local files removed before each prefill, so planning
               // fetches, verifies and installs each one (its time in the TTFT)
};
const char* kv_start_name(KvStart t);
KvStart parse_kv_start(const std::string& s);  // Error listing them
std::vector<std::string> kv_start_names();  // every one, remote last

struct ReuseBenchOptions {
  std::string model_path;
  int threads = 0;         // the backend's CPU threads, for the report
  int chunks = 6;          // retrieved chunks in the prompt
  int chunk_tokens = 512;  // tokens per chunk (real prose, cut at a word boundary)
  std::vector<ModeSpec> modes = {ModeSpec(ReuseMode::full), ModeSpec(ReuseMode::prefix), ModeSpec(ReuseMode::reuse),
                                 ModeSpec(ReuseMode::blend)};  // variants too: blend/prophet@0.2
  std::vector<KvStart> tiers = {KvStart::disk, KvStart::page_cache, KvStart::host, KvStart::device};
  std::string remote;      // the remote tier's redis:// URL: the stores write through to it (KvStart::remote)
  BlendParams blend;
  int repetitions = 3;     // timed prefills per (mode, tier), after one warm-up
  std::string store_dir;   // where the chunk caches are precomputed; empty: a temporary store,
                           // removed at the end
  // KV encodings of the chunk caches (precompute --kv-bits: 16, 8, 4): one store each (with
  // several, STORE/f16, STORE/q8, ...), every cached mode and tier timed on each, side by side.
  std::vector<int> kv_bits = {16};
  // The loading controller (CacheBlend §5.1, Cache-Craft Eq. 16) on every cached row, as answer
  // applies it: per segment load or recompute, the preload depth. The machine is measured (or read
  // from cost_profile, written there when measured) once, before the rows.
  bool load_control = false;
  std::string cost_profile;
};

// Precomputes the prompt's chunks into the store, then times the TTFT (planning — cache lookups,
// headers, remote fetches — and the prefill up to the first token's logits) per mode and tier.
// Reports best and median, the median's ratio to `full`'s, the recompute fraction, loader time and
// the part of it compute did not hide, and the first token's agreement and KL with `full`. `full`
// needs no store: it is timed once per run.
// With several kv_bits, each cached row names its store's encoding (kv_dtype) and the bytes its
// chunk files hold (kv_file_bytes; kv_bytes_loaded is the f16 KV they decode to). With
// load_control, each cached row also says how many segments the controller sent to recompute.
nlohmann::json bench_reuse(Backend& backend, const ReuseBenchOptions& opt);

}  // namespace ragkv
