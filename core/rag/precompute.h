// `ragkv precompute` (DESIGN.md §4 "Chunk caches"): every selected chunk computed in the canonical
// context [BOS][instruction prefix][chunk] and its per-layer K and V stored f16 in the store. The
// prefix itself is stored too (chunk id "@prefix"), so serving never recomputes it. Resumable:
// chunks whose file already verifies are skipped. Processes sharing a store claim each chunk
// before computing it (core/kv/claimed-work.h), so each chunk is computed once among them.
//
// K is stored as computed — rotated for the positions the chunk had in its canonical context
// (first_pos in the header) — and rotated by the position difference when reused elsewhere.
// Removing RoPE before storing would lose bits in f16 (remove, round, re-apply differs from the
// original rounding), and an exact prefix hit must be bit-identical to a recomputed one; rotating
// by Δ = p_new − p_old is the same operation (RoPE rotations compose; DESIGN.md §4).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/kv/claim-set.h"
#include "core/kv/kv-store.h"
#include "core/model/model.h"
#include "core/rag/prompt.h"

namespace ragkv {

struct Chunk;
class DonorFinder;

struct PrecomputeStats {
  size_t computed = 0, skipped = 0;  // skipped: already in the store and intact
  size_t claimed_by_other = 0;       // computed by another process meanwhile (waited for)
  size_t taken_over = 0;             // of computed: chunks whose stale claim was taken over
  int64_t tokens = 0;                // chunk tokens computed (whole, or built from a donor)
  int64_t token_layers = 0;          // token-layers computed, every pass (a whole chunk: tokens × layers)
  size_t from_donor = 0;             // of computed: chunks built from a donor's cache (core/rag/donor-reuse.h)
  int64_t donor_shared_tokens = 0;   // their tokens whose KV the donors gave
  int64_t donor_repaired_tokens = 0;  // of those, recomputed on the last layer (the repair)
  uint64_t bytes_written = 0;
  double seconds = 0;
};

// Stores the prefix and every chunk of `chunks` missing from store, each claimed through claims
// (nullptr: a ClaimSet of the default lease, for this call). progress(done, total) counts the
// missing chunks only: (0, total) once they are known, then after each one computed here or by
// another process. The prefix is not claimed: every run computes it anyway (its rows come first
// in every chunk's context); of two writers of its file the last rename wins, byte-identical.
// donors (`--donor-reuse on`, after `build-index --update`): a chunk whose canonical cache is
// missing and that has a donor (core/rag/donor-reuse.h) is stored as a donor cache built from it,
// and a chunk with a valid donor cache counts as stored; null: every chunk missing its canonical
// cache is computed whole.
PrecomputeStats precompute_chunks(const Model& model, const PromptFormat& format, const KvStore& store,
                                  const std::vector<const Chunk*>& chunks,
                                  const std::function<void(size_t, size_t)>& progress = {},
                                  ClaimSet* claims = nullptr, const DonorFinder* donors = nullptr);

}  // namespace ragkv
