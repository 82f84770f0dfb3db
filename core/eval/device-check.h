// `ragkv device-check`: a device backend against the CPU reference on models of the default
// models' shapes (random weights, written for the check), each judged by teacher-forced agreement
// (core/eval/backend-agreement.h). The verdict is what `--device auto` trusts
// (core/eval/device-record.h): a GPU is used by default only on a kind of chip where this check
// passed with this build.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend/backend.h"
#include "core/eval/backend-agreement.h"
#include "core/model/random-model.h"

namespace ragkv {

struct DeviceCheckModel {
  std::string name;       // "smollm2-135m-shape/q4_1"
  RandomModelSpec spec;   // written to the work directory, unless path is set
  std::string path;       // a GGUF file to check as it is (a real model)
};

// Random-weight models of SmolLM2-135M's and Gemma 3 270M's layer shapes, with f16 weights and
// with their real files' quantised type family kept quantised on the device (Q4_1; Q8_0 for
// Gemma 3's 640-wide rows), and of Llama 3.2 1B's shape in the Q4_K_M mix (the K-quant kernels).
// Vocabularies are cut to at most 49,152 tokens so the CPU reference stays within a minute per model.
std::vector<DeviceCheckModel> default_device_check_models();

struct DeviceCheckResult {
  bool passed = false;
  nlohmann::json report;  // {"reference", "candidate", "options", "bar", "models": [{name, figures, passed}]}
};

// Runs every model on `reference` and `candidate`, random models written under work_dir (which
// must exist) and removed after use. log(line) reports progress and each model's figures.
DeviceCheckResult run_device_check(Backend& reference, Backend& candidate, const std::vector<DeviceCheckModel>& models,
                                   const std::filesystem::path& work_dir, const AgreementOptions& opt,
                                   const AgreementBar& bar, const std::function<void(const std::string&)>& log);

}  // namespace ragkv
