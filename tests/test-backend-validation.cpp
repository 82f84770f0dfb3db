// The public ops of Backend check their arguments once, for every backend (core/backend/backend-ops.cpp):
// a table of misuse (wrong dtype, mismatched shapes, rows outside a tensor, counts of ids and
// positions, outputs overlapping inputs, tensors and weights of another backend) that every
// backend must refuse with a ragkv::Error naming the op, a table of valid calls (the aliasing the
// contract allows included) that every backend must accept, and the supports() answers.
//
// The tables run on the CPU backend, on the CUDA backend when a GPU is present (skipped, and
// said so, otherwise), and on a recording backend whose implementations only count their calls:
// a refused call must reach no implementation, a valid one exactly one.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/format/gguf.h"
#include "tests/test-recording-backend.h"
#include "tests/test-ops-util.h"
#include "core/util/error.h"
#ifdef RAGKV_HAVE_CUDA
#include "cuda/cuda-backend.h"
#endif

namespace {

using namespace ragkv;
using ragkv::test::RecordingBackend;
using ragkv::test::weight_from;

// Tensors and weights on the backend under test (all zero, or small finite values), plus a tensor
// and a weight of another backend.
struct Fixture {
  Backend& b;
  std::vector<float> ones64 = std::vector<float>(64, 1.f), halves = std::vector<float>(4 * 64, 0.5f),
                     quarters = std::vector<float>(4, 0.25f), table_values = ragkv::test::random_vec(10 * 64, 1);
  std::unique_ptr<Weight> vec64 = weight_from(b, ones64, 1, 64);      // norm weight [64]
  std::unique_ptr<Weight> mat = weight_from(b, halves, 4, 64);        // matrix [4][64]
  std::unique_ptr<Weight> vec4 = weight_from(b, quarters, 1, 4);      // bias [4]
  std::unique_ptr<Weight> table = weight_from(b, table_values, 10, 64);  // embedding table [10][64]
  Tensor x = zeros(DType::f32, 2, 64), y = zeros(DType::f32, 2, 64), z = zeros(DType::f32, 3, 64);
  Tensor y4 = zeros(DType::f32, 2, 4), x16 = zeros(DType::f16, 2, 64), out1 = zeros(DType::f32, 2, 1);
  Tensor kv16 = zeros(DType::f16, 4, 64), kv32 = zeros(DType::f32, 4, 64);
  Tensor big = zeros(DType::f32, 4, 64);  // for views that overlap by a row
  std::unique_ptr<Backend> other = make_cpu_backend(1);
  std::unique_ptr<Weight> foreign_mat = weight_from(*other, halves, 4, 64);
  Tensor foreign_x = other->alloc(DType::f32, 2, 64);
  const std::vector<int32_t> ids = {0, 1};  // ids, rows and positions of two rows
  AttentionParams ap = attention_params(true);
  RopeParams rp = rope_params(64);
  float eps = 1e-6f;

  explicit Fixture(Backend& backend) : b(backend) {}

  Tensor zeros(DType dt, int64_t rows, int64_t cols) {
    Tensor t = b.alloc(dt, rows, cols);
    b.fill_zero(t);
    return t;
  }
  static AttentionParams attention_params(bool causal) {
    AttentionParams p;
    p.n_head = p.n_kv_head = 1;
    p.head_dim = 64;
    p.scale = 0.125f;
    p.causal = causal;
    return p;
  }
  static RopeParams rope_params(int n_rot) {
    RopeParams p;
    p.n_rot = n_rot;
    return p;
  }
};

struct Call {
  const char* what;
  const char* expect;  // misuse: in the error message
  void (*run)(Fixture&);
};

using V = std::vector<int32_t>;

// Each call breaks one rule of the contract in backend.h and keeps all the others.
const Call kMisuse[] = {
    {"embed: an id past the vocabulary", "outside the vocabulary of 10 tokens",
     [](Fixture& f) { f.b.embed(*f.table, V{3, 10}, f.x, 1.f); }},
    {"embed: a negative id", "token id -1 is outside the vocabulary", [](Fixture& f) { f.b.embed(*f.table, V{-1, 0}, f.x, 1.f); }},
    {"embed: 2 ids into 1 row", "embed of 2 ids", [](Fixture& f) { f.b.embed(*f.table, f.ids, f.x.slice_rows(0, 1), 1.f); }},
    {"embed: rows of 4 from a table of 64", "embed of 2 ids", [](Fixture& f) { f.b.embed(*f.table, f.ids, f.y4, 1.f); }},
    {"embed: f16 out", "embed expects out in f32", [](Fixture& f) { f.b.embed(*f.table, f.ids, f.x16, 1.f); }},
    {"embed: a table of another backend", "not loaded by this backend",
     [](Fixture& f) { f.b.embed(*f.foreign_mat, f.ids, f.x, 1.f); }},

    {"matmul: y of 64 columns for 4 outputs", "matmul [2][64]", [](Fixture& f) { f.b.matmul(f.x, *f.mat, f.y); }},
    {"matmul: x of 4 columns for 64 inputs", "matmul [2][4]", [](Fixture& f) { f.b.matmul(f.y4, *f.mat, f.y4); }},
    {"matmul: 2 rows in, 3 out", "-> [3][4]", [](Fixture& f) { f.b.matmul(f.x, *f.mat, f.big.reshape(64, 4).slice_rows(0, 3)); }},
    {"matmul: a bias of 64 values for 4 outputs", "matmul bias", [](Fixture& f) { f.b.matmul(f.x, *f.mat, f.y4, f.vec64.get()); }},
    {"matmul: f16 x", "matmul expects x in f32", [](Fixture& f) { f.b.matmul(f.x16, *f.mat, f.y4); }},
    {"matmul: y overlaps x", "overlap", [](Fixture& f) { f.b.matmul(f.x, *f.mat, f.x.reshape(32, 4).slice_rows(0, 2)); }},
    {"matmul: a weight of another backend", "not loaded by this backend", [](Fixture& f) { f.b.matmul(f.x, *f.foreign_mat, f.y4); }},
    {"matmul: x of another backend", "another backend", [](Fixture& f) { f.b.matmul(f.foreign_x, *f.mat, f.y4); }},
    {"matmul_parts: two outputs for a weight of one part", "1 parts) into 2 outputs",
     [](Fixture& f) {
       const Tensor outs[2] = {f.y4, f.big.reshape(128, 2).slice_rows(0, 2)};
       f.b.matmul_parts(f.x, *f.mat, outs);
     }},
    {"matmul_parts: two biases for one output", "with 2 biases for 1 outputs",
     [](Fixture& f) {
       const Weight* biases[2] = {f.vec4.get(), f.vec4.get()};
       f.b.matmul_parts(f.x, *f.mat, std::span(&f.y4, 1), biases);
     }},

    {"rms_norm: a weight of 4·64 values for rows of 64", "rms_norm weight", [](Fixture& f) { f.b.rms_norm(f.x, *f.mat, f.eps, f.y); }},
    {"rms_norm: shapes differ", "shapes [2][64] and [3][64] differ", [](Fixture& f) { f.b.rms_norm(f.x, *f.vec64, f.eps, f.z); }},
    {"rms_norm: f16 y", "rms_norm expects y in f32", [](Fixture& f) { f.b.rms_norm(f.x, *f.vec64, f.eps, f.x16); }},
    {"rms_norm: x and y overlap by a row", "without being the same tensor",
     [](Fixture& f) { f.b.rms_norm(f.big.slice_rows(0, 2), *f.vec64, f.eps, f.big.slice_rows(1, 2)); }},
    {"rms_norm: x of another backend", "another backend", [](Fixture& f) { f.b.rms_norm(f.foreign_x, *f.vec64, f.eps, f.y); }},

    {"rope: 3 positions for 2 rows", "rope on [2][64] with 1 heads of 64 and 3 positions",
     [](Fixture& f) { f.b.rope(f.x, V{0, 1, 2}, 1, 64, f.rp, false); }},
    {"rope: 2 heads of 64 in rows of 64", "rope on [2][64] with 2 heads", [](Fixture& f) { f.b.rope(f.x, f.ids, 2, 64, f.rp, false); }},
    {"rope: an odd n_rot", "rotates 63 dimensions",
     [](Fixture& f) { f.b.rope(f.x, f.ids, 1, 64, Fixture::rope_params(63), false); }},
    {"rope: n_rot past head_dim", "rotates 128 dimensions",
     [](Fixture& f) { f.b.rope(f.x16, f.ids, 1, 64, Fixture::rope_params(128), true); }},
    {"rope: too few frequency factors", "3 frequency factors for 32 rotated pairs",
     [](Fixture& f) {
       RopeParams p = Fixture::rope_params(64);
       p.freq_factors = {1.f, 2.f, 4.f};
       f.b.rope(f.x, f.ids, 1, 64, p, false);
     }},

    {"layer_norm: a bias of 4 values", "layer_norm bias", [](Fixture& f) { f.b.layer_norm(f.x, *f.vec64, *f.vec4, f.eps, f.y); }},
    {"layer_norm: shapes differ", "layer_norm: shapes", [](Fixture& f) { f.b.layer_norm(f.x, *f.vec64, *f.vec64, f.eps, f.z); }},
    {"layer_norm: x and y overlap by a row", "without being the same tensor",
     [](Fixture& f) { f.b.layer_norm(f.big.slice_rows(1, 2), *f.vec64, *f.vec64, f.eps, f.big.slice_rows(0, 2)); }},

    {"gelu_erf: shapes differ", "gelu_erf: shapes", [](Fixture& f) { f.b.gelu_erf(f.x, f.z); }},
    {"gelu_erf: f16 x", "gelu_erf expects x in f32", [](Fixture& f) { f.b.gelu_erf(f.x16, f.y); }},
    {"gelu_erf: x and y overlap by a row", "without being the same tensor",
     [](Fixture& f) { f.b.gelu_erf(f.big.slice_rows(0, 2), f.big.slice_rows(1, 2)); }},

    {"swiglu: out of another shape", "swiglu: shapes", [](Fixture& f) { f.b.swiglu(f.x, f.y, f.z); }},
    {"swiglu: f16 up", "swiglu expects up in f32", [](Fixture& f) { f.b.swiglu(f.x, f.x16, f.y); }},
    {"geglu: out overlaps up by a row", "geglu: up",
     [](Fixture& f) { f.b.geglu(f.x, f.big.slice_rows(0, 2), f.big.slice_rows(1, 2)); }},

    {"add: shapes differ", "add: shapes", [](Fixture& f) { f.b.add(f.x, f.z); }},
    {"add: f16 b", "add expects b in f32", [](Fixture& f) { f.b.add(f.x, f.x16); }},
    {"add: a and b overlap by a row", "without being the same tensor",
     [](Fixture& f) { f.b.add(f.big.slice_rows(0, 2), f.big.slice_rows(1, 2)); }},

    {"scatter_rows: a row past dst", "scatter_rows row 4 outside [0, 4)", [](Fixture& f) { f.b.scatter_rows(f.x, f.kv16, V{0, 4}); }},
    {"scatter_rows: a negative row", "scatter_rows row -1", [](Fixture& f) { f.b.scatter_rows(f.x, f.kv32, V{-1, 0}); }},
    {"scatter_rows: 3 rows for 2 source rows", "with 3 rows", [](Fixture& f) { f.b.scatter_rows(f.x, f.kv16, V{0, 1, 2}); }},
    {"scatter_rows: columns differ", "scatter_rows [2][4] into [4][64]", [](Fixture& f) { f.b.scatter_rows(f.y4, f.kv16, f.ids); }},
    {"scatter_rows: f16 src", "scatter_rows expects src in f32", [](Fixture& f) { f.b.scatter_rows(f.x16, f.kv16, f.ids); }},
    {"scatter_rows: src and dst overlap", "overlap", [](Fixture& f) { f.b.scatter_rows(f.x, f.x, f.ids); }},

    {"gather_rows: a row past src", "gather_rows row 4 outside [0, 4)", [](Fixture& f) { f.b.gather_rows(f.kv32, f.x, V{0, 4}); }},
    {"gather_rows: 3 rows into 2", "gather_rows of 3 rows", [](Fixture& f) { f.b.gather_rows(f.kv32, f.x, V{0, 1, 2}); }},
    {"gather_rows: f16 src", "gather_rows expects src in f32", [](Fixture& f) { f.b.gather_rows(f.kv16, f.x, f.ids); }},
    {"gather_rows: src and out overlap", "overlap", [](Fixture& f) { f.b.gather_rows(f.x, f.x, f.ids); }},

    {"row_sq_dist: out [2][64] instead of [2][1]", "into [2][64]", [](Fixture& f) { f.b.row_sq_dist(f.x, f.kv16, f.ids, f.y); }},
    {"row_sq_dist: a row past b", "row_sq_dist row 4 outside [0, 4)", [](Fixture& f) { f.b.row_sq_dist(f.x, f.kv16, V{4, 0}, f.out1); }},
    {"row_sq_dist: 1 row for 2", "with 1 rows", [](Fixture& f) { f.b.row_sq_dist(f.x, f.kv32, V{0}, f.out1); }},
    {"row_sq_dist: f16 a", "row_sq_dist expects a in f32", [](Fixture& f) { f.b.row_sq_dist(f.x16, f.kv16, f.ids, f.out1); }},
    {"row_sq_dist: columns differ", "row_sq_dist [2][4]", [](Fixture& f) { f.b.row_sq_dist(f.y4, f.kv16, f.ids, f.out1); }},
    {"row_sq_dist: out overlaps a", "overlap",
     [](Fixture& f) { f.b.row_sq_dist(f.x, f.kv16, f.ids, f.x.reshape(128, 1).slice_rows(0, 2)); }},

    {"attention: out of 4 columns", "attention shapes", [](Fixture& f) { f.b.attention(f.x, f.ids, f.kv16, f.kv16, f.ids, 2, f.ap, f.y4); }},
    {"attention: 5 keys in a 4-row cache", "n_kv 5",
     [](Fixture& f) { f.b.attention(f.x, f.ids, f.kv16, f.kv16, V{0, 1, 2, 3, 4}, 5, f.ap, f.y); }},
    {"attention: 1 query position for 2 queries", "(1 positions)",
     [](Fixture& f) { f.b.attention(f.x, V{0}, f.kv16, f.kv16, f.ids, 2, f.ap, f.y); }},
    {"attention: 1 key position for 2 keys", "(1 positions), n_kv 2",
     [](Fixture& f) { f.b.attention(f.x, f.ids, f.kv16, f.kv16, V{0}, 2, f.ap, f.y); }},
    {"attention: 4 query heads on 3 KV heads", "4 heads / 3 kv heads",
     [](Fixture& f) {
       AttentionParams p = f.ap;
       p.n_head = 4, p.n_kv_head = 3, p.head_dim = 16;
       f.b.attention(f.x, f.ids, f.kv16.reshape(4, 64), f.kv16, f.ids, 2, p, f.y);
     }},
    {"attention: no KV heads", "1 heads / 0 kv heads",
     [](Fixture& f) {
       AttentionParams p = f.ap;
       p.n_kv_head = 0;
       f.b.attention(f.x, f.ids, f.kv16, f.kv16, f.ids, 2, p, f.y);
     }},
    {"attention: f16 k with f32 v", "different dtypes", [](Fixture& f) { f.b.attention(f.x, f.ids, f.kv16, f.kv32, f.ids, 2, f.ap, f.y); }},
    {"attention: f16 q", "attention expects q in f32", [](Fixture& f) { f.b.attention(f.x16, f.ids, f.kv16, f.kv16, f.ids, 2, f.ap, f.y); }},
    {"attention: a sliding window without causal masking", "sliding window",
     [](Fixture& f) {
       AttentionParams p = Fixture::attention_params(false);
       p.sliding_window = 16;
       f.b.attention(f.x, f.ids, f.kv16, f.kv16, f.ids, 2, p, f.y);
     }},
    {"attention: segment mass without an output", "segment mass",
     [](Fixture& f) {
       SegmentMass sm{{0, 2}, nullptr};
       f.b.attention(f.x, f.ids, f.kv16, f.kv16, f.ids, 2, f.ap, f.y, &sm);
     }},
    {"attention: descending segment boundaries", "segment mass",
     [](Fixture& f) {
       std::vector<float> mass;
       SegmentMass sm{{0, 2, 1}, &mass};
       f.b.attention(f.x, f.ids, f.kv16, f.kv16, f.ids, 2, f.ap, f.y, &sm);
     }},
    {"attention: out overlaps q", "q [2][64] f32 and out", [](Fixture& f) { f.b.attention(f.x, f.ids, f.kv16, f.kv16, f.ids, 2, f.ap, f.x); }},
    {"attention: out overlaps v", "v [4][64] f32 and out",
     [](Fixture& f) { f.b.attention(f.x, f.ids, f.kv32.slice_rows(0, 2), f.kv32, f.ids, 2, f.ap, f.kv32.slice_rows(2, 2)); }},

    {"copy: shapes differ", "copy of f32 [2][64] into f32 [3][64]", [](Fixture& f) { f.b.copy(f.x, f.z); }},
    {"copy: dtypes differ", "copy of f32 [2][64] into f16", [](Fixture& f) { f.b.copy(f.x, f.x16); }},
    {"copy: overlapping rows", "overlapping", [](Fixture& f) { f.b.copy(f.big.slice_rows(0, 2), f.big.slice_rows(1, 2)); }},
    {"copy: src of another backend", "another backend", [](Fixture& f) { f.b.copy(f.foreign_x, f.y); }},

    {"a tensor without storage", "has no storage", [](Fixture& f) { f.b.gelu_erf(Tensor{}, Tensor{}); }},
    {"a view past its storage", "outside its storage",
     [](Fixture& f) {
       Tensor t = f.x;
       t.rows = 3;
       f.b.gelu_erf(t, t);
     }},

    {"load_weight: a type ragkv does not dequantise", "Q2_K",
     [](Fixture& f) {
       std::vector<uint8_t> raw(4096, 0);
       GgufTensor t;
       t.name = "q2k.weight";
       t.type = GgmlType::Q2_K;
       t.ne = {256, 2};
       t.nbytes = raw.size();
       t.data = raw.data();
       f.b.load_weight(t);
     }},
    {"load_weight: data shorter than the shape", "'short.weight'",
     [](Fixture& f) {
       std::vector<float> v(4 * 64, 0.f);
       GgufTensor t;
       t.name = "short.weight";
       t.type = GgmlType::F32;
       t.ne = {64, 4};
       t.nbytes = v.size() * 4 - 4;
       t.data = reinterpret_cast<const uint8_t*>(v.data());
       f.b.load_weight(t);
     }},
};

// Each call keeps the contract, using what it allows at its edges (aliases, repeats, empty
// positions when not causal, a segment boundary past n_kv).
const Call kValid[] = {
    {"embed", "", [](Fixture& f) { f.b.embed(*f.table, V{9, 0}, f.x, 2.f); }},
    {"matmul with a bias", "", [](Fixture& f) { f.b.matmul(f.x, *f.mat, f.y4, f.vec4.get()); }},
    {"rms_norm in place", "", [](Fixture& f) { f.b.rms_norm(f.x, *f.vec64, f.eps, f.x); }},
    {"rms_norm per head, in place (QK-norm)", "",
     [](Fixture& f) {
       std::unique_ptr<Weight> w = weight_from(f.b, f.quarters, 1, 4);
       f.b.rms_norm(f.x.reshape(32, 4), *w, f.eps, f.x.reshape(32, 4));
     }},
    {"rope on f32", "", [](Fixture& f) { f.b.rope(f.x, V{5, 9}, 1, 64, f.rp, false); }},
    {"rope on f16, partial rotation", "", [](Fixture& f) { f.b.rope(f.x16, f.ids, 2, 32, Fixture::rope_params(16), true); }},
    {"layer_norm in place", "", [](Fixture& f) { f.b.layer_norm(f.x, *f.vec64, *f.vec64, f.eps, f.x); }},
    {"gelu_erf", "", [](Fixture& f) { f.b.gelu_erf(f.x, f.y); }},
    {"gelu_erf in place", "", [](Fixture& f) { f.b.gelu_erf(f.y, f.y); }},
    {"swiglu into gate", "", [](Fixture& f) { f.b.swiglu(f.x, f.y, f.x); }},
    {"geglu into up", "", [](Fixture& f) { f.b.geglu(f.x, f.y, f.y); }},
    {"add", "", [](Fixture& f) { f.b.add(f.x, f.y); }},
    {"add to itself", "", [](Fixture& f) { f.b.add(f.x, f.x); }},
    {"scatter_rows into f16, a row twice", "", [](Fixture& f) { f.b.scatter_rows(f.x, f.kv16, V{3, 3}); }},
    {"scatter_rows into f32", "", [](Fixture& f) { f.b.scatter_rows(f.x, f.kv32, V{2, 0}); }},
    {"gather_rows", "", [](Fixture& f) { f.b.gather_rows(f.kv32, f.x, V{3, 3}); }},
    {"row_sq_dist against f16", "", [](Fixture& f) { f.b.row_sq_dist(f.x, f.kv16, V{3, 0}, f.out1); }},
    {"row_sq_dist against f32", "", [](Fixture& f) { f.b.row_sq_dist(f.x, f.kv32, f.ids, f.out1); }},
    {"attention, f16 K/V, segment mass", "",
     [](Fixture& f) {
       std::vector<float> mass;
       SegmentMass sm{{0, 1, 5}, &mass};
       f.b.attention(f.x, f.ids, f.kv16, f.kv16, V{0, 1, 7}, 2, f.ap, f.y, &sm);
     }},
    {"attention, f32 K/V, not causal, no positions", "",
     [](Fixture& f) { f.b.attention(f.x, {}, f.kv32, f.kv32, {}, 4, Fixture::attention_params(false), f.y); }},
    {"copy", "", [](Fixture& f) { f.b.copy(f.kv16.slice_rows(0, 2), f.kv16.slice_rows(2, 2)); }},
};

void expect_misuse_refused(Backend& b) {
  Fixture f(b);
  for (const Call& c : kMisuse) {
    CAPTURE(c.what);
    CHECK_THROWS_WITH_AS(c.run(f), doctest::Contains(c.expect), ragkv::Error);
  }
}

void expect_valid_accepted(Backend& b) {
  Fixture f(b);
  for (const Call& c : kValid) {
    CAPTURE(c.what);
    CHECK_NOTHROW(c.run(f));
  }
  b.synchronize();
}

// supports(): the dtypes each backend runs each op on (f32, f16).
struct SupportsRow {
  BackendOp op;
  const char* name;
  bool cpu_f32, cpu_f16, cuda_f32, cuda_f16;
};
const SupportsRow kSupports[] = {
    {BackendOp::embed, "embed", true, false, true, false},
    {BackendOp::matmul, "matmul", true, false, true, false},
    {BackendOp::rms_norm, "rms_norm", true, false, true, false},
    {BackendOp::rope, "rope", true, true, true, true},
    {BackendOp::layer_norm, "layer_norm", true, false, true, false},
    {BackendOp::gelu_erf, "gelu_erf", true, false, true, false},
    {BackendOp::swiglu, "swiglu", true, false, true, false},
    {BackendOp::geglu, "geglu", true, false, true, false},
    {BackendOp::add, "add", true, false, true, false},
    {BackendOp::scatter_rows, "scatter_rows", true, true, true, true},
    {BackendOp::gather_rows, "gather_rows", true, false, true, false},
    {BackendOp::row_sq_dist, "row_sq_dist", true, true, true, true},
    {BackendOp::attention, "attention", true, true, true, true},
};

#ifdef RAGKV_HAVE_CUDA
// "skipped: …" makes ctest report the whole case as skipped (CMakeLists.txt); a case whose CPU
// part ran says only its CUDA part was.
bool gpu_missing(bool whole_case = true) {
  if (cuda_device_present()) return false;
  if (whole_case)
    MESSAGE("skipped: no CUDA GPU is present on this machine");
  else
    MESSAGE("CUDA part skipped: no CUDA GPU is present on this machine");
  return true;
}
#endif

}  // namespace

TEST_CASE("backend validation: supports() answers per op and dtype, and ops are named") {
  auto cpu = make_cpu_backend(1);
  for (const SupportsRow& r : kSupports) {
    CAPTURE(r.name);
    CHECK(std::string(backend_op_name(r.op)) == r.name);
    CHECK(cpu->supports(r.op, DType::f32) == r.cpu_f32);
    CHECK(cpu->supports(r.op, DType::f16) == r.cpu_f16);
    // Nothing outside what the interface defines.
    CHECK(backend_op_defined(r.op, DType::f32) == (r.cpu_f32 || r.cuda_f32));
    CHECK(backend_op_defined(r.op, DType::f16) == (r.cpu_f16 || r.cuda_f16));
  }
#ifdef RAGKV_HAVE_CUDA
  if (gpu_missing(/*whole_case=*/false)) return;
  auto gpu = make_cuda_backend(0);
  for (const SupportsRow& r : kSupports) {
    CAPTURE(r.name);
    CHECK(gpu->supports(r.op, DType::f32) == r.cuda_f32);
    CHECK(gpu->supports(r.op, DType::f16) == r.cuda_f16);
  }
#endif
}

TEST_CASE("backend validation: the CPU backend refuses every misuse and accepts every valid call") {
  auto cpu = make_cpu_backend(1);
  expect_misuse_refused(*cpu);
  expect_valid_accepted(*cpu);
}

#ifdef RAGKV_HAVE_CUDA
TEST_CASE("backend validation: the CUDA backend refuses every misuse and accepts every valid call") {
  if (gpu_missing()) return;
  auto gpu = make_cuda_backend(0);
  expect_misuse_refused(*gpu);
  expect_valid_accepted(*gpu);
}
#endif

TEST_CASE("backend validation: a refused call reaches no implementation, a valid one exactly one") {
  RecordingBackend rec;
  Fixture f(rec);
  for (const Call& c : kMisuse) {
    CAPTURE(c.what);
    rec.impl_calls = 0;
    CHECK_THROWS_WITH_AS(c.run(f), doctest::Contains(c.expect), ragkv::Error);
    CHECK(rec.impl_calls == 0);
  }
  for (const Call& c : kValid) {
    CAPTURE(c.what);
    rec.impl_calls = 0;
    CHECK_NOTHROW(c.run(f));
    // The per-head rms_norm row loads its weight first.
    CHECK(rec.impl_calls == (std::string(c.what).rfind("rms_norm per head", 0) == 0 ? 2 : 1));
  }
}

TEST_CASE("backend validation: an op on a dtype the backend does not support fails loudly, naming it") {
  RecordingBackend rec;
  rec.unsupported = {{BackendOp::rope, DType::f16}, {BackendOp::attention, DType::f32},
                     {BackendOp::scatter_rows, DType::f16}};
  Fixture f(rec);
  rec.impl_calls = 0;
  CHECK_THROWS_WITH_AS(f.b.rope(f.x16, f.ids, 1, 64, f.rp, false),
                       doctest::Contains("internal: the recording backend does not support rope on f16"), ragkv::Error);
  CHECK_THROWS_WITH_AS(f.b.attention(f.x, f.ids, f.kv32, f.kv32, f.ids, 2, f.ap, f.y),
                       doctest::Contains("does not support attention on f32"), ragkv::Error);
  CHECK_THROWS_WITH_AS(f.b.scatter_rows(f.x, f.kv16, f.ids), doctest::Contains("does not support scatter_rows on f16"),
                       ragkv::Error);
  CHECK(rec.impl_calls == 0);
  // The other dtype of each still runs.
  f.b.rope(f.x, f.ids, 1, 64, f.rp, false);
  f.b.attention(f.x, f.ids, f.kv16, f.kv16, f.ids, 2, f.ap, f.y);
  f.b.scatter_rows(f.x, f.kv32, f.ids);
  CHECK(rec.impl_calls == 3);
}
