// Edited-chunk KV reuse (`precompute` after `build-index --update`, DESIGN.md §4 "Chunk caches"):
// a new chunk with no cache takes its KV from the cache of the earlier version of it — the
// previous index generation's chunk of the same document with the most tokens in common. The
// two token sequences are aligned (a longest common subsequence); each aligned span's KV is the
// donor's, re-positioned by the Δ-rotation every reuse uses (RoPE rotations compose, DESIGN.md §4);
// the inserted and changed tokens are computed; and since the tokens after an edit attend a
// changed prefix, a repair budget of them is recomputed, chosen by blend's KV-deviation selection
// (CacheBlend §4.1, gradual filtering §4.3) over the aligned tokens after the first edit. Tokens
// before the first edit see the same prefix as in the donor and keep its KV as it is.
//
// The result is stored as the chunk's *donor cache* (ChunkKvMeta::donor, kv/<16 hex>.donor.rkv):
// a non-exact kind that only the sparse modes reuse — never `prefix`, the knowledge tree's exact
// path or `--require exact` — with the donor recorded in its header and in answers' provenance.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kv/kv-store.h"
#include "core/model/model.h"
#include "core/rag/cache-keys.h"
#include "core/rag/prompt.h"

namespace ragkv {

struct Chunk;

// Tokens [begin, begin + n) of the new chunk are tokens [donor_begin, donor_begin + n) of the donor.
struct AlignedSpan {
  int64_t begin = 0, donor_begin = 0, n = 0;
  bool operator==(const AlignedSpan&) const = default;
};

// A longest common subsequence of the two token sequences as maximal spans (ascending in both),
// the earliest match preferred on ties; empty when either is empty or their product exceeds
// max_cells (the alignment table's size).
std::vector<AlignedSpan> align_tokens(std::span<const int32_t> now, std::span<const int32_t> before,
                                      size_t max_cells = size_t(1) << 24);

struct DonorParams {
  // Of the aligned tokens after the first edit, the share recomputed (blend's r); 0: only the
  // inserted and changed tokens are computed (the donor's KV unrepaired, for comparison).
  double repair_ratio = 0.15;
  // A donor must share at least this share of the new chunk's tokens (else computing it whole
  // costs little more, and the repaired KV would be mostly recomputed anyway).
  double min_shared = 0.5;
};

// The donor chosen for one chunk.
struct DonorMatch {
  const Chunk* donor = nullptr;
  ChunkKvMeta key;                  // the donor's canonical cache
  std::vector<AlignedSpan> spans;
  int64_t shared = 0;               // tokens in the spans
};

// What building one chunk from its donor cost.
struct DonorBuild {
  int64_t computed_token_layers = 0;  // every row computed on every layer (the changed tokens, the repair)
  int64_t repaired_tokens = 0;        // aligned tokens recomputed on the last layer
};

// The previous index generation's chunks, found by document; their tokens computed on first use.
class DonorFinder {
 public:
  DonorFinder(const PromptFormat& format, const CacheKeys& keys, const KvStore& store, const std::vector<Chunk>& previous,
              DonorParams params = {});
  // The earlier chunk of c's document sharing the most tokens with ids whose canonical cache is
  // in the store (not c itself); nullopt when none shares params.min_shared of them.
  std::optional<DonorMatch> find(const Chunk& c, const std::vector<int32_t>& ids) const;
  const DonorParams& params() const { return params_; }

 private:
  const PromptFormat& format_;
  const CacheKeys& keys_;
  const KvStore& store_;
  DonorParams params_;
  std::map<std::string, std::vector<const Chunk*>> by_doc_;
  struct Tokens {
    std::vector<int32_t> ids;
    std::vector<uint64_t> bigrams;  // distinct, sorted
  };
  mutable std::map<const Chunk*, Tokens> tokens_;  // tokenized on first use
};

// Builds chunk `chunk_id` (tokens ids) from match's donor cache into rows [n_prefix, n_prefix +
// ids.size()) of kv, whose rows [0, n_prefix) hold the instruction prefix (precompute's first
// forward) and stay as they are. CacheFileError when the donor's cache fails its checks (the
// caller computes the chunk instead).
DonorBuild build_from_donor(const Model& model, const PromptFormat& format, const CacheKeys& keys, const KvStore& store,
                            const DonorMatch& match, const std::string& chunk_id, const std::vector<int32_t>& ids,
                            const DonorParams& params, KvCache& kv, Workspace& ws);

}  // namespace ragkv
