// A family of subcommands (DESIGN.md §1): its flags, whether the parsed command line chose one of
// them, and running it. cmd/ragkv.cpp adds every family to one CLI11 app and runs the chosen one.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>

namespace ragkv::cli {

class CommandFamily {
 public:
  virtual ~CommandFamily() = default;
  virtual void add_to(CLI::App& app) = 0;
  virtual bool selected() const = 0;
  virtual int run() = 0;  // the exit code; errors propagate to main
};

// Each family reads its options from the one CliOptions every flag is bound to (cmd/flag-table.h).
struct CliOptions;
std::unique_ptr<CommandFamily> model_commands(CliOptions& o);  // generate, tokenize, make-test-model
std::unique_ptr<CommandFamily> index_commands(CliOptions& o);  // build-index, search
std::unique_ptr<CommandFamily> rag_commands(CliOptions& o);    // precompute, answer, eval, merge
std::unique_ptr<CommandFamily> bench_commands(CliOptions& o);  // bench prefill, reuse, retrieval, cache
std::unique_ptr<CommandFamily> store_commands(CliOptions& o);  // store verify, repair, stats, gc
std::unique_ptr<CommandFamily> device_commands(CliOptions& o); // device-check

}  // namespace ragkv::cli
