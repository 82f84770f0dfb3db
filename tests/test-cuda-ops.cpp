// CUDA backend ops against the CPU reference backend (DESIGN.md §3, STYLE.md "test-backend-ops").
//
// Every implemented CUDA op runs on the same random inputs as the CPU backend over a table of
// shapes (odd sizes and sizes on both sides of the kernels' block-size switches) and is compared
// element-wise with a stated tolerance:
//   f32 ops:  |cuda − cpu| ≤ 1e-5 · (1 + |cpu|)
//   f16 rope: |cuda − cpu| ≤ 2e-3 · (1 + |cpu|)   (a result may round to the neighbouring f16)
// Outputs must hold no NaN/Inf where the reference is finite (and the same NaN/Inf where it is
// not, for the special-value cases). Every CUDA output sits between two guard rows that must
// come back untouched, and the op sees it as a row slice (a non-zero byte offset).
//
// Without a GPU (CI, build machines) each case says it is skipped and returns: doctest has no
// run-time skip. Only the device query and the factory's error run everywhere.
#ifdef RAGKV_HAVE_CUDA

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/gguf.h"
#include "cuda/cuda-backend.h"

namespace {

using ragkv::Backend;
using ragkv::DType;
using ragkv::Tensor;

constexpr float kTolF32 = 1e-5f;
constexpr float kTolF16 = 2e-3f;
constexpr float kGuard = 1234.f;  // exact in f16 too

bool gpu_missing() {
  if (ragkv::cuda_device_present()) return false;
  MESSAGE("skipped: no CUDA GPU is present on this machine");
  return true;
}

struct Backends {
  std::unique_ptr<Backend> cpu = ragkv::make_cpu_backend(1);
  std::unique_ptr<Backend> gpu = ragkv::make_cuda_backend(0);
};

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Values as stored in a tensor of dtype dt: f16 inputs are rounded once on the host, so both
// backends start from the same bits.
std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = ragkv::fp32_to_fp16(v[i]);
  return h;
}

std::vector<float> round_to(DType dt, std::vector<float> v) {
  if (dt == DType::f16)
    for (float& x : v) x = ragkv::fp16_to_fp32(ragkv::fp32_to_fp16(x));
  return v;
}

void upload_values(Backend& be, const Tensor& t, const std::vector<float>& v) {
  REQUIRE(static_cast<int64_t>(v.size()) == t.numel());
  if (t.dtype == DType::f16) be.upload(t, to_f16(v).data());
  else be.upload(t, v.data());
}

std::vector<float> download_values(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::f16) {
    std::vector<uint16_t> h(v.size());
    be.download(t, h.data());
    for (size_t i = 0; i < h.size(); ++i) v[i] = ragkv::fp16_to_fp32(h[i]);
  } else {
    be.download(t, v.data());
  }
  return v;
}

Tensor make_tensor(Backend& be, DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
  Tensor t = be.alloc(dt, rows, cols);
  upload_values(be, t, v);
  return t;
}

// A tensor between two guard rows: ops see `view`; `all` includes the guards.
struct Guarded {
  Tensor all, view;
};

Guarded make_guarded(Backend& be, DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
  Guarded g;
  g.all = be.alloc(dt, rows + 2, cols);
  std::vector<float> host(static_cast<size_t>((rows + 2) * cols), kGuard);
  std::copy(v.begin(), v.end(), host.begin() + cols);
  upload_values(be, g.all, host);
  g.view = g.all.slice_rows(1, rows);
  return g;
}

// The view's values; checks that both guard rows are intact.
std::vector<float> read_guarded(Backend& be, const Guarded& g) {
  const std::vector<float> all = download_values(be, g.all);
  const int64_t cols = g.all.cols, rows = g.view.rows;
  int64_t touched = 0;
  for (int64_t j = 0; j < cols; ++j) {
    touched += all[j] != kGuard;
    touched += all[(rows + 1) * cols + j] != kGuard;
  }
  CHECK_MESSAGE(touched == 0, "the op wrote outside its output tensor");
  return {all.begin() + cols, all.begin() + (rows + 1) * cols};
}

// Element-wise comparison with |got − ref| ≤ tol · (1 + |ref|); NaN/Inf must match exactly.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, float tol,
                  bool ref_must_be_finite = true) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, nonfinite_got = 0, nonfinite_ref = 0, worst_at = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = ref[i], g = got[i];
    if (!std::isfinite(r)) {
      ++nonfinite_ref;
      const bool same = std::isnan(r) ? std::isnan(g) : g == r;
      bad += !same;
      continue;
    }
    if (!std::isfinite(g)) {
      ++nonfinite_got;
      continue;
    }
    const double err = std::fabs(double(g) - double(r)) / (1.0 + std::fabs(double(r)));
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
    bad += err > tol;
  }
  CAPTURE(worst);
  CAPTURE(worst_at);
  CAPTURE(tol);
  if (ref_must_be_finite) CHECK(nonfinite_ref == 0);
  CHECK(nonfinite_got == 0);
  CHECK(bad == 0);
}

// A hand-built F32 vector tensor, as load_weight would see it from a GGUF file.
ragkv::GgufTensor f32_vector(const std::string& name, const std::vector<float>& v) {
  ragkv::GgufTensor t;
  t.name = name;
  t.type = ragkv::GgmlType::F32;
  t.ne = {static_cast<int64_t>(v.size())};
  t.nbytes = v.size() * sizeof(float);
  t.data = reinterpret_cast<const uint8_t*>(v.data());
  return t;
}

const int64_t kRows[] = {1, 7, 33};
const int64_t kCols[] = {1, 64, 576, 1000, 1023, 1024, 2049};

}  // namespace

TEST_CASE("cuda: device query never throws; the factory fails cleanly without a device") {
  bool present = false;
  CHECK_NOTHROW(present = ragkv::cuda_device_present());
  if (!present) {
    MESSAGE("no CUDA GPU is present: checking only that make_cuda_backend fails with ragkv::Error");
    CHECK_THROWS_AS(ragkv::make_cuda_backend(0), ragkv::Error);
    return;
  }
  auto gpu = ragkv::make_cuda_backend(0);
  CHECK(gpu->kind() == ragkv::DeviceKind::cuda);
  CHECK(gpu->name().rfind("cuda:0", 0) == 0);
  CHECK_THROWS_AS(ragkv::make_cuda_backend(-1), ragkv::Error);
  CHECK_THROWS_AS(ragkv::make_cuda_backend(1 << 20), ragkv::Error);
}

TEST_CASE("cuda: upload, download and fill_zero keep to the tensor") {
  if (gpu_missing()) return;
  Backends be;
  for (DType dt : {DType::f32, DType::f16}) {
    for (int64_t rows : kRows) {
      for (int64_t cols : {int64_t(1), int64_t(63), int64_t(1000)}) {
        CAPTURE(rows);
        CAPTURE(cols);
        const auto v = round_to(dt, random_values(size_t(rows * cols), 11));
        Guarded g = make_guarded(*be.gpu, dt, rows, cols, v);
        CHECK(read_guarded(*be.gpu, g) == v);
        be.gpu->fill_zero(g.view);
        CHECK(read_guarded(*be.gpu, g) == std::vector<float>(v.size(), 0.f));
      }
    }
  }
}

TEST_CASE("cuda: rms_norm matches the CPU backend") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 100;
  for (int64_t rows : kRows) {
    for (int64_t cols : kCols) {
      for (float eps : {1e-6f, 1e-5f}) {
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(eps);
        auto x = random_values(size_t(rows * cols), ++seed);
        // Rows of very different magnitudes, and an all-zero row (y = 0, not NaN).
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) x[r * cols + j] *= std::pow(10.f, float(r % 7) - 3.f);
        if (rows > 1)
          for (int64_t j = 0; j < cols; ++j) x[cols + j] = 0.f;
        const auto wv = random_values(size_t(cols), ++seed, -1.5f, 1.5f);
        const auto gt = f32_vector("blk.0.attn_norm.weight", wv);
        auto w_cpu = be.cpu->load_weight(gt);
        auto w_gpu = be.gpu->load_weight(gt);
        CHECK(w_gpu->out_features == 1);
        CHECK(w_gpu->in_features == cols);

        Tensor x_cpu = make_tensor(*be.cpu, DType::f32, rows, cols, x);
        Tensor y_cpu = be.cpu->alloc(DType::f32, rows, cols);
        be.cpu->rms_norm(x_cpu, *w_cpu, eps, y_cpu);
        const auto ref = download_values(*be.cpu, y_cpu);

        // Out of place: y written, x untouched.
        Guarded xg = make_guarded(*be.gpu, DType::f32, rows, cols, x);
        Guarded yg = make_guarded(*be.gpu, DType::f32, rows, cols, std::vector<float>(x.size(), 0.f));
        be.gpu->rms_norm(xg.view, *w_gpu, eps, yg.view);
        expect_close(read_guarded(*be.gpu, yg), ref, kTolF32);
        CHECK(read_guarded(*be.gpu, xg) == x);
        // In place: x and y alias.
        be.gpu->rms_norm(xg.view, *w_gpu, eps, xg.view);
        expect_close(read_guarded(*be.gpu, xg), ref, kTolF32);
      }
    }
  }
}

TEST_CASE("cuda: rope matches the CPU backend (f32/f16, normal/NeoX, freq factors, inverse)") {
  if (gpu_missing()) return;
  Backends be;
  struct Case {
    const char* what;
    int n_heads, head_dim, n_rot;
    bool neox;
    float base, scale;
    bool factors;
  };
  const Case cases[] = {
      {"SmolLM2 q: 9 heads of 64", 9, 64, 64, false, 100000.f, 1.f, false},
      {"kv: 3 heads of 64", 3, 64, 64, false, 10000.f, 1.f, false},
      {"gemma3 global: NeoX, 4 heads of 256, scale 1/8", 4, 256, 256, true, 1000000.f, 0.125f, false},
      {"llama3: freq factors, 8 heads of 128", 8, 128, 128, false, 500000.f, 1.f, true},
      {"partial rotation: 32 of 80", 5, 80, 32, false, 10000.f, 1.f, false},
      {"partial rotation NeoX: 32 of 80", 5, 80, 32, true, 10000.f, 1.f, false},
      {"NeoX, odd head count, factors, scale 1/2", 7, 96, 64, true, 10000.f, 0.5f, true},
  };
  uint32_t seed = 200;
  for (const Case& c : cases) {
    ragkv::RopeParams p;
    p.n_rot = c.n_rot;
    p.freq_base = c.base;
    p.freq_scale = c.scale;
    p.neox = c.neox;
    if (c.factors) p.freq_factors = random_values(size_t(c.n_rot / 2), ++seed, 1.f, 8.f);
    const int64_t cols = int64_t(c.n_heads) * c.head_dim;
    for (int64_t rows : kRows) {
      // Positions from 0 to long contexts (θ reaches thousands of radians), in no order.
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      std::mt19937 rng(++seed);
      for (int64_t r = 0; r < rows; ++r) pos[r] = r == 0 ? 0 : int32_t(rng() % 32768);
      for (DType dt : {DType::f32, DType::f16}) {
        for (bool inverse : {false, true}) {
          CAPTURE(c.what);
          CAPTURE(rows);
          CAPTURE(ragkv::dtype_name(dt));
          CAPTURE(inverse);
          const auto x = round_to(dt, random_values(size_t(rows * cols), ++seed));
          Tensor x_cpu = make_tensor(*be.cpu, dt, rows, cols, x);
          be.cpu->rope(x_cpu, pos, c.n_heads, c.head_dim, p, inverse);
          const auto ref = download_values(*be.cpu, x_cpu);

          Guarded xg = make_guarded(*be.gpu, dt, rows, cols, x);
          be.gpu->rope(xg.view, pos, c.n_heads, c.head_dim, p, inverse);
          const auto got = read_guarded(*be.gpu, xg);
          expect_close(got, ref, dt == DType::f32 ? kTolF32 : kTolF16);

          // Dimensions ≥ n_rot are not touched at all.
          int64_t changed = 0;
          for (int64_t r = 0; r < rows; ++r)
            for (int h = 0; h < c.n_heads; ++h)
              for (int d = c.n_rot; d < c.head_dim; ++d) {
                const int64_t i = r * cols + int64_t(h) * c.head_dim + d;
                changed += got[i] != x[i];
              }
          CHECK(changed == 0);

          // Rotating back restores the input (f32; f16 rounds twice).
          if (dt == DType::f32) {
            be.gpu->rope(xg.view, pos, c.n_heads, c.head_dim, p, !inverse);
            expect_close(read_guarded(*be.gpu, xg), x, kTolF32);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda: swiglu and geglu match the CPU backend") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 300;
  for (bool gelu : {false, true}) {
    for (int64_t rows : kRows) {
      for (int64_t cols : kCols) {
        CAPTURE(gelu);
        CAPTURE(rows);
        CAPTURE(cols);
        const auto gate = random_values(size_t(rows * cols), ++seed, -8.f, 8.f);
        const auto up = random_values(size_t(rows * cols), ++seed);
        Tensor g_cpu = make_tensor(*be.cpu, DType::f32, rows, cols, gate);
        Tensor u_cpu = make_tensor(*be.cpu, DType::f32, rows, cols, up);
        Tensor o_cpu = be.cpu->alloc(DType::f32, rows, cols);
        if (gelu) be.cpu->geglu(g_cpu, u_cpu, o_cpu);
        else be.cpu->swiglu(g_cpu, u_cpu, o_cpu);
        const auto ref = download_values(*be.cpu, o_cpu);

        Guarded gg = make_guarded(*be.gpu, DType::f32, rows, cols, gate);
        Guarded ug = make_guarded(*be.gpu, DType::f32, rows, cols, up);
        Guarded og = make_guarded(*be.gpu, DType::f32, rows, cols, std::vector<float>(gate.size(), 0.f));
        if (gelu) be.gpu->geglu(gg.view, ug.view, og.view);
        else be.gpu->swiglu(gg.view, ug.view, og.view);
        expect_close(read_guarded(*be.gpu, og), ref, kTolF32);
        CHECK(read_guarded(*be.gpu, gg) == gate);
        CHECK(read_guarded(*be.gpu, ug) == up);
      }
    }
  }
}

TEST_CASE("cuda: swiglu, geglu and add agree with the CPU on special values") {
  if (gpu_missing()) return;
  Backends be;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> gate = {0.f, -0.f, 1e-30f, -1e-30f, 20.f, -20.f, 50.f, -50.f,
                                   100.f, -100.f, inf, -inf, nan, 3.f, -3.f, 1e-3f};
  const std::vector<float> up = {1.f, -1.f, 2.f, 0.5f, -3.f, 1.f, 0.f, 2.f,
                                 -1.f, 1.f, 1.f, 1.f, 1.f, inf, -inf, nan};
  const int64_t n = int64_t(gate.size());
  for (int op = 0; op < 3; ++op) {
    CAPTURE(op);
    Tensor g_cpu = make_tensor(*be.cpu, DType::f32, 1, n, gate);
    Tensor u_cpu = make_tensor(*be.cpu, DType::f32, 1, n, up);
    Tensor o_cpu = be.cpu->alloc(DType::f32, 1, n);
    Guarded gg = make_guarded(*be.gpu, DType::f32, 1, n, gate);
    Guarded ug = make_guarded(*be.gpu, DType::f32, 1, n, up);
    Guarded og = make_guarded(*be.gpu, DType::f32, 1, n, std::vector<float>(gate.size(), 0.f));
    if (op == 0) {
      be.cpu->swiglu(g_cpu, u_cpu, o_cpu);
      be.gpu->swiglu(gg.view, ug.view, og.view);
    } else if (op == 1) {
      be.cpu->geglu(g_cpu, u_cpu, o_cpu);
      be.gpu->geglu(gg.view, ug.view, og.view);
    } else {
      be.cpu->add(g_cpu, u_cpu);
      be.gpu->add(gg.view, ug.view);
    }
    const auto ref = download_values(*be.cpu, op == 2 ? g_cpu : o_cpu);
    const auto got = read_guarded(*be.gpu, op == 2 ? gg : og);
    expect_close(got, ref, kTolF32, /*ref_must_be_finite=*/false);
  }
}

TEST_CASE("cuda: add matches the CPU backend") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 400;
  for (int64_t rows : kRows) {
    for (int64_t cols : kCols) {
      CAPTURE(rows);
      CAPTURE(cols);
      const auto a = random_values(size_t(rows * cols), ++seed, -100.f, 100.f);
      const auto b = random_values(size_t(rows * cols), ++seed);
      Tensor a_cpu = make_tensor(*be.cpu, DType::f32, rows, cols, a);
      Tensor b_cpu = make_tensor(*be.cpu, DType::f32, rows, cols, b);
      be.cpu->add(a_cpu, b_cpu);
      const auto ref = download_values(*be.cpu, a_cpu);

      Guarded ag = make_guarded(*be.gpu, DType::f32, rows, cols, a);
      Guarded bg = make_guarded(*be.gpu, DType::f32, rows, cols, b);
      be.gpu->add(ag.view, bg.view);
      expect_close(read_guarded(*be.gpu, ag), ref, kTolF32);
      CHECK(read_guarded(*be.gpu, bg) == b);

      // a += a (both operands the same tensor) doubles exactly.
      be.gpu->add(bg.view, bg.view);
      std::vector<float> twice(b);
      for (float& v : twice) v *= 2.f;
      CHECK(read_guarded(*be.gpu, bg) == twice);
    }
  }
}

TEST_CASE("cuda: ops that are not implemented yet fail loudly") {
  if (gpu_missing()) return;
  Backends be;
  auto& gpu = *be.gpu;
  const std::vector<float> vec(64, 1.f);
  auto w = gpu.load_weight(f32_vector("output_norm.weight", vec));

  // Matrices and non-F32 vectors are refused at load.
  const std::vector<float> mat(64 * 4, 1.f);
  ragkv::GgufTensor m = f32_vector("blk.0.attn_q.weight", mat);
  m.ne = {64, 4};
  CHECK_THROWS_AS(gpu.load_weight(m), ragkv::Error);
  ragkv::GgufTensor h = f32_vector("blk.0.attn_norm.weight", vec);
  h.type = ragkv::GgmlType::F16;
  CHECK_THROWS_AS(gpu.load_weight(h), ragkv::Error);

  Tensor x = gpu.alloc(DType::f32, 2, 64);
  Tensor y = gpu.alloc(DType::f32, 2, 64);
  Tensor kv = gpu.alloc(DType::f16, 4, 64);
  const std::vector<int32_t> ids = {0, 1};
  CHECK_THROWS_WITH_AS(gpu.matmul(x, *w, y), "CUDA backend: op 'matmul' is not implemented yet",
                       ragkv::Error);
  CHECK_THROWS_WITH_AS(gpu.embed(*w, ids, x, 1.f), "CUDA backend: op 'embed' is not implemented yet",
                       ragkv::Error);
  CHECK_THROWS_WITH_AS(gpu.scatter_rows(x, kv, ids),
                       "CUDA backend: op 'scatter_rows' is not implemented yet", ragkv::Error);
  CHECK_THROWS_WITH_AS(gpu.gather_rows(x, y, ids),
                       "CUDA backend: op 'gather_rows' is not implemented yet", ragkv::Error);
  ragkv::AttentionParams ap;
  ap.n_head = ap.n_kv_head = 1;
  ap.head_dim = 64;
  ap.scale = 0.125f;
  CHECK_THROWS_WITH_AS(gpu.attention(x, ids, kv, kv, ids, 2, ap, y),
                       "CUDA backend: op 'attention' is not implemented yet", ragkv::Error);

  // A weight of another backend, and mismatched shapes, are refused too.
  auto w_cpu = be.cpu->load_weight(f32_vector("output_norm.weight", vec));
  CHECK_THROWS_AS(gpu.rms_norm(x, *w_cpu, 1e-6f, y), ragkv::Error);
  Tensor z = gpu.alloc(DType::f32, 3, 64);
  CHECK_THROWS_AS(gpu.add(x, z), ragkv::Error);
  CHECK_THROWS_AS(gpu.swiglu(x, y, z), ragkv::Error);
}

#endif  // RAGKV_HAVE_CUDA
