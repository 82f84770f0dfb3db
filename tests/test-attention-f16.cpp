// The tolerance the tensor-core attention is held to (tests/attention-f16-bound.h), checked where
// no GPU is: a host mirror of cuda/attention-mma.cu's rounding (q and P to f16, f32 sums, online
// softmax per key tile) stays within the derived per-element bound of the f32 CPU backend and
// under the NMSE limit on every case, while a mirror with a mask off by one key or two key rows
// swapped does not — so the bound is tight enough to catch the errors a kernel makes. The same
// for key totals and segment mass on tensor cores (tests/attention-mass-f16-bound.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "tests/attention-f16-bound.h"
#include "tests/attention-mass-f16-bound.h"

namespace {

using namespace ragkv::test;

const ProblemSpec kCases[] = {
    {"prefill, GQA 4, head_dim 128", 128, 8, 2, 160, 160},
    {"prefill continued, GQA 8, head_dim 64", 64, 8, 1, 64, 700},
    {"recompute rows, shuffled keys, head_dim 128", 128, 4, 4, 90, 900, true},
    {"recompute rows, Gemma 3 shape, softcap", 256, 4, 1, 50, 400, true, 0, 2.f},
    {"sliding window 100, head_dim 32", 32, 6, 3, 120, 600, false, 100},
    {"encoder, non-causal", 64, 4, 4, 40, 300, false, 0, 0.f, false},
};

int tile_keys(int head_dim) { return head_dim == 256 ? 32 : 64; }  // the kernel's BN

}  // namespace

TEST_CASE("attention f16 bound: the kernel's host mirror stays within the derived bound of the f32 reference") {
  double worst_nmse = 0;
  uint32_t seed = 100;
  for (const ProblemSpec& s : kCases) {
    CAPTURE(s.what);
    const AttentionProblem p = make_problem(s, seed++);
    const std::vector<float> ref = cpu_attention(p);
    const std::vector<float> mirror = attention_f16_mirror(p, tile_keys(s.head_dim));
    const BoundCheck c = check_against_bound(mirror, ref, attention_f16_bound(p));
    MESSAGE(std::string(s.what) << ": worst error / bound " << c.worst_ratio << ", NMSE " << c.nmse);
    CHECK(c.nonfinite == 0);
    CHECK(c.over == 0);
    CHECK(c.nmse <= kMmaNmse / 20);  // the limit keeps a margin over the rounding the mirror has
    CHECK(c.nmse > 0);               // the rounding is there: the mirror is not the reference
    worst_nmse = std::max(worst_nmse, c.nmse);
  }
  MESSAGE("largest NMSE of the mirror: " << worst_nmse << " (limit " << kMmaNmse << ")");
}

TEST_CASE("attention f16 bound: a mask off by one key or two swapped key rows break it") {
  const ProblemSpec s = {"prefill, GQA 4", 128, 8, 2, 160, 160};
  const AttentionProblem p = make_problem(s, 7);
  const std::vector<float> ref = cpu_attention(p);
  const std::vector<double> bound = attention_f16_bound(p);

  AttentionProblem off_by_one = p;  // every query also sees the key after it
  for (auto& qp : off_by_one.q_pos) ++qp;
  const BoundCheck a = check_against_bound(attention_f16_mirror(off_by_one, 64), ref, bound);
  CHECK(a.over > 0);
  CHECK(a.nmse > 20 * kMmaNmse);

  AttentionProblem swapped = p;  // V rows 10 and 11 exchanged (an indexing slip)
  const int64_t cols = int64_t(p.n_kv_head) * p.head_dim;
  std::swap_ranges(swapped.v.begin() + 10 * cols, swapped.v.begin() + 11 * cols, swapped.v.begin() + 11 * cols);
  const BoundCheck b = check_against_bound(attention_f16_mirror(swapped, 64), ref, bound);
  CHECK(b.over > 0);
  CHECK(b.nmse > 20 * kMmaNmse);
}

// Key totals: all of the question's rows (first_row 0) or only the last rows of a prefill or of
// recompute rows (first_row > 0), as prophet's first pass asks them of a layer's attention.
TEST_CASE("key totals f16 bound: the kernels' host mirror stays within the derived bound of the CPU's totals") {
  uint32_t seed = 200;
  for (const ProblemSpec& s : kCases) {
    for (const int64_t first_row : {int64_t(0), s.n_q - 12}) {
      CAPTURE(s.what);
      CAPTURE(first_row);
      const AttentionProblem p = make_problem(s, seed++);
      const std::vector<float> ref = cpu_key_totals(p, first_row);
      const std::vector<float> mirror = key_totals_f16_mirror(p, first_row, tile_keys(s.head_dim));
      const BoundCheck c = check_against_bound(mirror, ref, key_totals_f16_bound(p, first_row));
      MESSAGE(std::string(s.what) << ", from row " << first_row << ": worst error / bound " << c.worst_ratio);
      CHECK(c.nonfinite == 0);
      CHECK(c.over == 0);
      CHECK(c.nmse > 0);  // the rounding is there: the mirror is not the reference
    }
  }
}

TEST_CASE("key totals f16 bound: a mask off by one key or two swapped key rows break it") {
  const ProblemSpec s = {"prefill, GQA 4", 128, 8, 2, 160, 160};
  const AttentionProblem p = make_problem(s, 8);
  const int64_t first_row = 120;
  const std::vector<float> ref = cpu_key_totals(p, first_row);
  const std::vector<double> bound = key_totals_f16_bound(p, first_row);

  AttentionProblem off_by_one = p;  // every query also sees the key after it
  for (auto& qp : off_by_one.q_pos) ++qp;
  CHECK(check_against_bound(key_totals_f16_mirror(off_by_one, first_row, 64), ref, bound).over > 0);

  AttentionProblem swapped = p;  // K rows 10 and 11 exchanged (an indexing slip)
  const int64_t cols = int64_t(p.n_kv_head) * p.head_dim;
  std::swap_ranges(swapped.k.begin() + 10 * cols, swapped.k.begin() + 11 * cols, swapped.k.begin() + 11 * cols);
  CHECK(check_against_bound(key_totals_f16_mirror(swapped, first_row, 64), ref, bound).over > 0);

  // Totals of every row where only the question's were asked for.
  CHECK(check_against_bound(key_totals_f16_mirror(p, 0, 64), ref, bound).over > 0);
}

// Segment mass (Cache-Craft's attention per chunk), every row and head.
TEST_CASE("segment mass f16 bound: the kernel's host mirror stays within the derived bound of the CPU's mass") {
  uint32_t seed = 300;
  for (const ProblemSpec& s : kCases) {
    CAPTURE(s.what);
    const AttentionProblem p = make_problem(s, seed++);
    const std::vector<int64_t> segs = test_segments(p.n_kv, /*tile_edges=*/s.n_kv > 256);
    const std::vector<float> ref = cpu_segment_mass(p, segs);
    const std::vector<float> mirror = segment_mass_f16_mirror(p, segs, tile_keys(s.head_dim));
    const BoundCheck c = check_against_bound(mirror, ref, segment_mass_f16_bound(p, segs));
    MESSAGE(std::string(s.what) << ": worst error / bound " << c.worst_ratio);
    CHECK(c.nonfinite == 0);
    CHECK(c.over == 0);
    CHECK(c.nmse > 0);  // the rounding is there: the mirror is not the reference
  }
}

TEST_CASE("segment mass f16 bound: a mask off by one key or a boundary off by one break it") {
  const ProblemSpec s = {"prefill, GQA 4", 128, 8, 2, 160, 160};
  const AttentionProblem p = make_problem(s, 9);
  const std::vector<int64_t> segs = test_segments(p.n_kv);
  const std::vector<float> ref = cpu_segment_mass(p, segs);
  const std::vector<double> bound = segment_mass_f16_bound(p, segs);

  AttentionProblem off_by_one = p;  // every query also sees the key after it
  for (auto& qp : off_by_one.q_pos) ++qp;
  CHECK(check_against_bound(segment_mass_f16_mirror(off_by_one, segs, 64), ref, bound).over > 0);

  std::vector<int64_t> shifted = segs;  // one key counted in the next segment
  shifted[3] += 1;
  CHECK(check_against_bound(segment_mass_f16_mirror(p, shifted, 64), ref, bound).over > 0);
}
