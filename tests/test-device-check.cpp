// The device check behind --device auto: teacher-forced agreement of two backends
// (core/eval/backend-agreement.h), the check over a list of models (core/eval/device-check.h) and
// the records auto trusts (core/eval/device-record.h). The GPU side runs only on a GPU
// (scripts/gpu-validate.sh); here both sides are the CPU backend, which must agree with itself
// exactly, and two different models, which must fail the bar.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend/cpu-backend.h"
#include "core/eval/backend-agreement.h"
#include "core/eval/device-check.h"
#include "core/eval/device-record.h"
#include "core/model/model.h"
#include "core/model/random-model.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"
#ifdef RAGKV_HAVE_CUDA
#include "cuda/cuda-backend.h"
#endif

namespace {

namespace fs = std::filesystem;
using namespace ragkv;

RandomModelSpec tiny_spec(uint64_t seed) {
  RandomModelSpec s;
  s.n_layer = 2, s.n_embd = 64, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 128, s.n_ctx = 256;
  s.seed = seed;
  return s;
}

std::string tiny_model(const test::TempDir& t, const std::string& name, uint64_t seed) {
  const std::string path = (t.path / name).string();
  write_random_model(tiny_spec(seed), path);
  return path;
}

AgreementOptions small_options() {
  AgreementOptions o;
  o.prompts = 3, o.prompt_tokens = 24, o.steps = 8;
  return o;
}

}  // namespace

TEST_CASE("backend agreement: a backend agrees with itself exactly, two different models fail the bar") {
  const test::TempDir t("agreement");
  auto cpu = make_cpu_backend(1);
  const std::string a = tiny_model(t, "a.gguf", 42), b = tiny_model(t, "b.gguf", 43);
  const Model ma(a, *cpu), ma2(a, *cpu), mb(b, *cpu);
  int prompts_seen = 0;
  const AgreementFigures same = teacher_forced_agreement(ma, ma2, small_options(), [&](int) { ++prompts_seen; });
  CHECK(prompts_seen == 3);
  CHECK(same.steps == 24);
  CHECK(same.top1_equal == 24);
  CHECK(same.first_token_kl_max == 0.0);
  CHECK(same.step_kl_max == 0.0);
  CHECK(same.prefill_logits_rel_l2_max == 0.0);
  CHECK(AgreementBar{}.met_by(same));

  const AgreementFigures other = teacher_forced_agreement(ma, mb, small_options());
  CHECK(other.steps == 24);
  CHECK(other.top1_rate() < 0.95);
  CHECK(other.first_token_kl_mean > 1e-3);
  CHECK(other.prefill_logits_rel_l2_max > 0.1);
  CHECK_FALSE(AgreementBar{}.met_by(other));
  // The bar is checked on all three figures: any one past its limit fails.
  AgreementFigures kl_off = same;
  kl_off.first_token_kl_mean = 2e-3;
  CHECK_FALSE(AgreementBar{}.met_by(kl_off));
  AgreementFigures top1_off = same;
  top1_off.top1_equal = 22;  // 22 of 24 = 0.917
  CHECK_FALSE(AgreementBar{}.met_by(top1_off));
  AgreementFigures l2_off = same;
  l2_off.prefill_logits_rel_l2_max = 0.02;
  CHECK_FALSE(AgreementBar{}.met_by(l2_off));
  CHECK_FALSE(AgreementBar{}.met_by(AgreementFigures{}));  // nothing compared is no pass
}

TEST_CASE("backend agreement: different vocabularies and a context too short are errors") {
  const test::TempDir t("agreement-errors");
  auto cpu = make_cpu_backend(1);
  RandomModelSpec wide = tiny_spec(42);
  wide.n_vocab = 300;
  const std::string a = tiny_model(t, "a.gguf", 42), w = (t.path / "w.gguf").string();
  write_random_model(wide, w);
  const Model ma(a, *cpu), mw(w, *cpu);
  CHECK_THROWS_WITH_AS(teacher_forced_agreement(ma, mw, small_options()),
                       doctest::Contains("vocabularies differ (262 and 300 tokens)"), Error);
  AgreementOptions longer = small_options();
  longer.prompt_tokens = 250;
  CHECK_THROWS_WITH_AS(teacher_forced_agreement(ma, ma, longer),
                       doctest::Contains("250 prompt tokens + 8 steps exceed the model's context of 256"), Error);
}

TEST_CASE("device check: every model is judged, the report says which failed, random models are removed") {
  const test::TempDir t("device-check");
  auto cpu = make_cpu_backend(1);
  const std::string other = tiny_model(t, "other.gguf", 43);
  std::vector<DeviceCheckModel> models = {{"tiny/f32", tiny_spec(42), ""}};
  std::vector<std::string> lines;
  const auto log = [&](const std::string& l) { lines.push_back(l); };
  const DeviceCheckResult ok = run_device_check(*cpu, *cpu, models, t.path, small_options(), AgreementBar{}, log);
  CHECK(ok.passed);
  CHECK(ok.report["passed"] == true);
  REQUIRE(ok.report["models"].size() == 1);
  CHECK(ok.report["models"][0]["name"] == "tiny/f32");
  CHECK(ok.report["models"][0]["figures"]["top1_rate"] == 1.0);
  CHECK(ok.report["options"]["steps"] == 8);
  CHECK_FALSE(fs::exists(t.path / "device-check-0.gguf"));
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.back().find("tiny/f32: top-1 equal on 24 of 24 steps") != std::string::npos);

  // A model given by path is checked as it is and kept.
  const DeviceCheckResult two = run_device_check(*cpu, *cpu, {{"tiny/f32", tiny_spec(42), ""}, {"by-path", {}, other}},
                                                 t.path, small_options(), AgreementBar{}, log);
  CHECK(two.passed);
  REQUIRE(two.report["models"].size() == 2);
  CHECK(two.report["models"][1]["name"] == "by-path");
  CHECK(two.report["models"][1]["passed"] == true);
  CHECK(fs::exists(other));
  // Nothing to check is no pass.
  CHECK_FALSE(run_device_check(*cpu, *cpu, {}, t.path, small_options(), AgreementBar{}, log).passed);
  // A bar nothing can meet fails every model.
  AgreementBar impossible;
  impossible.max_first_token_kl = -1;
  const DeviceCheckResult fail_all = run_device_check(*cpu, *cpu, models, t.path, small_options(), impossible, log);
  CHECK_FALSE(fail_all.passed);
  CHECK(fail_all.report["models"][0]["passed"] == false);
  CHECK(lines.back().find("FAIL") != std::string::npos);
}

TEST_CASE("device check: the default list covers the default models' shapes, f16 and quantised") {
  const auto models = default_device_check_models();
  REQUIRE(models.size() == 5);
  int quantised = 0;
  for (const auto& m : models) {
    CAPTURE(m.name);
    CHECK(m.path.empty());
    CHECK(m.spec.n_vocab <= 49152);
    CHECK(m.spec.n_ctx >= 128 + 64);  // the default prompt and steps fit
    quantised += m.spec.q4_k_m || (m.spec.weight_type != GgmlType::F16 && m.spec.weight_type != GgmlType::F32);
  }
  CHECK(quantised == 3);
  CHECK(models[2].spec.arch == "gemma3");
  CHECK(models[4].spec.q4_k_m);
}

TEST_CASE("device records: auto trusts only a passed check of the same backend by the same binary") {
  const test::TempDir t("device-records");
  const fs::path dir = t.path / "records";
  const std::string gpu = "cuda:0 (NVIDIA H100 80GB HBM3)+quant-weights";
  const std::string bin = "0123456789abcdef";

  DeviceVerdict v = device_qualified(dir, gpu, bin);
  CHECK_FALSE(v.qualified);
  CHECK(v.reason.find("`ragkv device-check` has not run on " + gpu) != std::string::npos);

  write_device_record(dir, gpu, bin, true, {{"models", nlohmann::json::array()}});
  const fs::path file = device_record_path(dir, gpu);
  CHECK(file.filename() == "cuda-0--NVIDIA-H100-80GB-HBM3--quant-weights.json");
  CHECK(fs::exists(file));
  CHECK(device_qualified(dir, gpu, bin).qualified);

  v = device_qualified(dir, gpu, "fedcba9876543210");  // a rebuilt ragkv
  CHECK_FALSE(v.qualified);
  CHECK(v.reason.find("another ragkv build") != std::string::npos);
  v = device_qualified(dir, "cuda:0 (NVIDIA H100 80GB HBM3)+f16-weights", bin);  // other weight storage
  CHECK_FALSE(v.qualified);

  write_device_record(dir, gpu, bin, false, {});
  v = device_qualified(dir, gpu, bin);
  CHECK_FALSE(v.qualified);
  CHECK(v.reason.find("failed on " + gpu) != std::string::npos);

  // A damaged or foreign record is "not qualified", never an exception.
  write_file_atomic(file, {"{\"format\": \"ragkv-device-check/1\", \"passed\": tr"});
  v = device_qualified(dir, gpu, bin);
  CHECK_FALSE(v.qualified);
  CHECK(v.reason.find("unreadable device-check record") != std::string::npos);
  write_file_atomic(file, {R"({"format": "something-else/1", "kernels": "x", "binary": "0123456789abcdef", "passed": true})"});
  CHECK_FALSE(device_qualified(dir, gpu, bin).qualified);
  write_file_atomic(file, {"[1, 2]"});
  CHECK_FALSE(device_qualified(dir, gpu, bin).qualified);
  CHECK_FALSE(device_qualified(fs::path(), gpu, bin).qualified);
}

TEST_CASE("device records: the directory is RAGKV_DEVICE_RECORDS, else under XDG_CACHE_HOME, else HOME") {
  const test::ScopedEnv records("RAGKV_DEVICE_RECORDS", "/r"), xdg("XDG_CACHE_HOME", "/x"), home("HOME", "/h");
  CHECK(device_records_dir() == fs::path("/r"));
  {
    const test::ScopedEnv none("RAGKV_DEVICE_RECORDS", "");
    CHECK(device_records_dir() == fs::path("/x/ragkv/devices"));
    const test::ScopedEnv no_xdg("XDG_CACHE_HOME", "");
    CHECK(device_records_dir() == fs::path("/h/.cache/ragkv/devices"));
  }
}

TEST_CASE("cli: device-check without a GPU says so and exits 1") {
#ifdef RAGKV_HAVE_CUDA
  if (cuda_device_present()) {
    MESSAGE("skipped: a GPU is present (scripts/gpu-validate.sh runs device-check there)");
    return;
  }
  const char* expected = "no CUDA device is available on this machine";
#else
  const char* expected = "built without the CUDA backend";
#endif
  const test::Run r = test::run_ragkv("device-check --threads 1");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(expected) != std::string::npos);
  CHECK(r.out.empty());
}

TEST_CASE("cli: bench device without a GPU says so and exits 1") {
#ifdef RAGKV_HAVE_CUDA
  if (cuda_device_present()) {
    MESSAGE("skipped: a GPU is present (scripts/gpu-validate.sh runs bench device there)");
    return;
  }
  const char* expected = "no CUDA device is available on this machine";
#else
  const char* expected = "built without the CUDA backend";
#endif
  const test::Run r = test::run_ragkv("bench device --repetitions 1");
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(expected) != std::string::npos);
  CHECK(r.out.empty());
}
