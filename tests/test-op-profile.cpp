// The CUDA backend's per-op profile (cuda/op-profile.h): the table's arithmetic and JSON on the
// host, and, where a GPU is present, a backend under RAGKV_CUDA_PROFILE writing one entry per op.
#ifdef RAGKV_HAVE_CUDA

#include <doctest/doctest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/util/file-io.h"
#include "cuda/cuda-backend.h"
#include "cuda/op-profile.h"
#include "tests/test-tempdir.h"

namespace {

using namespace ragkv;

const nlohmann::json* find_op(const nlohmann::json& section, const std::string& op, const std::string& phase) {
  for (const nlohmann::json& e : section["ops"])
    if (e["op"] == op && e["phase"] == phase) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("op profile table: sections in order, phases by row count, totals, idle time and the order by time") {
  CHECK(OpTimeTable::phase_of(1) == "decode");
  CHECK(OpTimeTable::phase_of(8) == "decode");
  CHECK(OpTimeTable::phase_of(9) == "prefill");

  OpTimeTable t;
  CHECK(t.empty());
  t.add("prefill", "matmul/gemm-f16", 4096, 3.0, 0.5);
  t.add("prefill", "matmul/gemm-f16", 4096, 1.0, -0.25);  // a negative idle time (clock noise) counts as 0
  t.add("prefill", "attention/mma", 4096, 2.0, 0.0);
  t.add("prefill", "matmul/gemv-f16", 1, 0.25, 0.125);
  t.add("blend", "attention/f32+mass", 32, 0.5, 1.0);
  CHECK_FALSE(t.empty());
  const nlohmann::json j = nlohmann::json::parse(t.json("cuda:0 (test)", "cuda:0 (test)+mma-attention", 9.5));
  CHECK(j["device"] == "cuda:0 (test)");
  CHECK(j["span_ms"].get<double>() == doctest::Approx(9.5));
  REQUIRE(j["sections"].size() == 2);
  CHECK(j["sections"][1]["section"] == "blend");
  CHECK(j["sections"][1]["phases"]["prefill"]["idle_ms"].get<double>() == doctest::Approx(1.0));
  const nlohmann::json& p = j["sections"][0];
  CHECK(p["section"] == "prefill");
  CHECK(p["phases"]["prefill"]["busy_ms"].get<double>() == doctest::Approx(6.0));
  CHECK(p["phases"]["prefill"]["idle_ms"].get<double>() == doctest::Approx(0.5));
  CHECK(p["phases"]["prefill"]["ops"] == 3);
  CHECK(p["phases"]["decode"]["busy_ms"].get<double>() == doctest::Approx(0.25));
  CHECK(p["phases"]["decode"]["idle_ms"].get<double>() == doctest::Approx(0.125));
  REQUIRE(p["ops"].size() == 3);
  CHECK(p["ops"][0]["op"] == "matmul/gemm-f16");  // longest first
  CHECK(p["ops"][1]["op"] == "attention/mma");
  CHECK(p["ops"][2]["op"] == "matmul/gemv-f16");
  const nlohmann::json& gemm = p["ops"][0];
  CHECK(gemm["calls"] == 2);
  CHECK(gemm["rows"] == 8192);
  CHECK(gemm["ms_per_call"].get<double>() == doctest::Approx(2.0));
  CHECK(gemm["share_of_phase"].get<double>() == doctest::Approx(4.0 / 6.0));
  CHECK(p["ops"][2]["share_of_phase"].get<double>() == doctest::Approx(1.0));
}

TEST_CASE("cuda profile: RAGKV_CUDA_PROFILE writes one entry per op the backend ran") {
  if (!cuda_device_present()) {
    MESSAGE("skipped: no CUDA GPU is present on this machine");
    return;
  }
  const test::TempDir dir("op-profile");
  const std::string path = (dir.path / "profile.json").string();
  ::setenv("RAGKV_CUDA_PROFILE", path.c_str(), 1);
  {
    auto gpu = make_cuda_backend(0);
    Tensor a = gpu->alloc(DType::f32, 4, 256), b = gpu->alloc(DType::f32, 4, 256);
    gpu->fill_zero(a);
    gpu->set_profile_section("sum");
    gpu->fill_zero(b);
    gpu->add(a, b);
    std::vector<float> host(4 * 256, 1.f);
    gpu->download(a, host.data());
    CHECK(host[0] == 0.f);
  }
  ::unsetenv("RAGKV_CUDA_PROFILE");
  const nlohmann::json j = nlohmann::json::parse(read_file(path));
  CHECK(j["kernels"].get<std::string>().find("cuda:0") == 0);
  REQUIRE(j["sections"].size() == 2);
  const nlohmann::json& first = j["sections"][0];
  const nlohmann::json& sum = j["sections"][1];
  CHECK(first["section"] == "");
  CHECK(sum["section"] == "sum");
  const nlohmann::json* zero = find_op(first, "fill_zero", "decode");
  const nlohmann::json* add = find_op(sum, "add", "decode");
  const nlohmann::json* download = find_op(sum, "download", "decode");
  REQUIRE(zero);
  REQUIRE(add);
  REQUIRE(download);
  CHECK((*zero)["calls"] == 1);
  CHECK(find_op(sum, "fill_zero", "decode"));
  CHECK((*add)["calls"] == 1);
  CHECK((*add)["ms"].get<double>() > 0.0);
  CHECK(sum["phases"]["decode"]["ops"] == 3);
  CHECK(j["span_ms"].get<double>() >= (*add)["ms"].get<double>());
}

#endif  // RAGKV_HAVE_CUDA
