// device-check: the CUDA backend against the CPU on default-shaped models (core/eval/device-check.h);
// its verdict, kept per kind of chip and build (core/eval/device-record.h), is what --device auto
// trusts. Prints the report as one JSON object; progress on stderr; exit 1 when a model fails.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "cmd/command-family.h"
#include "cmd/flag-table.h"
#include "core/backend/cpu-backend.h"
#include "core/eval/baseline-cache.h"
#include "core/eval/device-check.h"
#include "core/eval/device-record.h"
#include "core/util/error.h"
#include "core/util/paths.h"
#ifdef RAGKV_HAVE_CUDA
#include "cuda/cuda-backend.h"
#endif

namespace ragkv::cli {

namespace {

namespace fs = std::filesystem;

// A temporary directory of this process, removed with what is left in it.
class ScratchDir {
 public:
  ScratchDir() : path_(fs::temp_directory_path() / fmt::format("ragkv-device-check-{}", getpid())) {
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::unique_ptr<Backend> device_under_check() {
#ifdef RAGKV_HAVE_CUDA
  if (!cuda_device_present()) fail("device-check: no CUDA device is available on this machine");
  return make_cuda_backend(0);
#else
  fail("device-check: this ragkv was built without the CUDA backend (nvcc was not found)");
#endif
}

class DeviceCommands : public CommandFamily {
 public:
  explicit DeviceCommands(CliOptions& o) : o_(o) {}

  void add_to(CLI::App& app) override {
    check_ = app.add_subcommand("device-check",
                                "Check the GPU backend against the CPU (teacher-forced agreement on default-shaped "
                                "models); --device auto uses a GPU only where this passed");
    add_flags(check_, kDeviceCheck, o_);
  }

  bool selected() const override { return bool(*check_); }

  int run() override {
    auto candidate = device_under_check();
    auto reference = make_cpu_backend(o_.dev.thread_count());
    std::vector<DeviceCheckModel> models = default_device_check_models();
    // The real default LLM too, where its file is here (it is not on a GPU machine that receives
    // only the working tree); a --model given explicitly must exist.
    if (o_.model != default_llm_path() || fs::exists(o_.model))
      models.push_back({fs::path(o_.model).filename().string(), {}, o_.model});
    else
      std::fprintf(stderr, "ragkv: device-check: %s is not here; checking the random-weight models only\n",
                   o_.model.c_str());
    const ScratchDir scratch;
    const auto log = [](const std::string& line) { std::fprintf(stderr, "ragkv: device-check: %s\n", line.c_str()); };
    const DeviceCheckResult r =
        run_device_check(*reference, *candidate, models, scratch.path(), AgreementOptions{}, AgreementBar{}, log);
    const fs::path dir = device_records_dir();
    write_device_record(dir, candidate->kernels(), engine_fingerprint(), r.passed, r.report);
    std::cout << r.report.dump(1) << "\n";
    std::fprintf(stderr, "ragkv: device-check: %s on %s; recorded in %s\n", r.passed ? "passed" : "FAILED",
                 candidate->kernels().c_str(), device_record_path(dir, candidate->kernels()).c_str());
    return r.passed ? 0 : 1;
  }

 private:
  CliOptions& o_;
  CLI::App* check_ = nullptr;
};

}  // namespace

std::unique_ptr<CommandFamily> device_commands(CliOptions& o) { return std::make_unique<DeviceCommands>(o); }

}  // namespace ragkv::cli
