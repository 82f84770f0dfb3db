// The chunk-KV subcommands: precompute, answer, eval (DESIGN.md §1). Flags are parsed into
// RagCommands; run() builds the pipeline. Errors propagate to main, which prints them once.
#pragma once
#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "cmd/device-flags.h"

namespace ragkv::cli {

struct RagFlags {  // shared by answer and eval
  std::string queries, index, store, model, embedder, on_error = "fail";
  size_t top_k = 5, limit = 0;
  double recompute_ratio = 0.15;
  int check_layers = 3;
  int max_tokens = 32;
  DeviceFlags dev;
};

class RagCommands {
 public:
  void add_to(CLI::App& app);
  bool selected() const;
  int run();  // exit code

 private:
  CLI::App *precompute_ = nullptr, *answer_ = nullptr, *eval_ = nullptr;
  // precompute
  std::string pc_index, pc_store, pc_model, pc_queries, pc_embedder;
  size_t pc_limit = 0, pc_top_k = 5;
  DeviceFlags pc_dev;
  // answer
  RagFlags an;
  std::string an_mode, an_out, an_compare, an_summary;
  // eval
  RagFlags ev;
  std::string ev_modes = "blend", ev_baseline = "full", ev_report, ev_answers;
  double ev_min_quality = 0.9;
  bool ev_resume = false;

  int run_precompute();
  int run_answer();
  int run_eval();
};

}  // namespace ragkv::cli
