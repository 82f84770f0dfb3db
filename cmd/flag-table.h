// Every flag of the CLI, declared once in one table, each tagged with the subcommands that take it
// (as llama.cpp's common/arg.cpp does): its name, one-sentence help, check and default, the field
// of CliOptions it sets, its help group, the subcommands where it is required, and those where it
// is advanced (shown by --help-all only).
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <vector>

#include "cmd/cli-options.h"

namespace ragkv::cli {

// The subcommands, as bits.
enum Cmd : uint32_t {
  kGenerate = 1u << 0,
  kTokenize = 1u << 1,
  kMakeTestModel = 1u << 2,
  kBuildIndex = 1u << 3,
  kSearch = 1u << 4,
  kPrecompute = 1u << 5,
  kAnswer = 1u << 6,
  kEval = 1u << 7,
  kBenchPrefill = 1u << 8,
  kBenchReuse = 1u << 9,
  kBenchRetrieval = 1u << 10,
  kBenchCache = 1u << 11,
  kStoreVerify = 1u << 12,
  kStoreRepair = 1u << 13,
  kStoreStats = 1u << 14,
  kStoreGc = 1u << 15,
  kMerge = 1u << 16,
  kDeviceCheck = 1u << 17,
  kBenchDevice = 1u << 18,
};
inline constexpr uint32_t kAll = ~0u;
// The commands that compute on a device (--device, --threads).
inline constexpr uint32_t kComputing = kGenerate | kBuildIndex | kSearch | kPrecompute | kAnswer | kEval | kBenchPrefill |
                                       kBenchReuse | kBenchRetrieval | kBenchCache | kStoreRepair;

// The help groups, in the order --help lists them.
enum class FlagGroup { inputs, retrieval, model_device, modes, generation, store_tiers, scheduling, gate, index, bench, test_model };

struct Flag {
  uint32_t cmds;          // the subcommands that take it
  uint32_t required = 0;  // where it must be given
  uint32_t advanced = 0;  // where only --help-all shows it
  FlagGroup group;
  std::function<CLI::Option*(CLI::App*, CliOptions&)> add;  // declares it on one subcommand
};

// The table (cmd/flag-table.cpp: the engine's flags; cmd/flag-table-tools.cpp: the benchmarks',
// the index's, the store's and make-test-model's).
std::vector<Flag> engine_flags();
std::vector<Flag> tool_flags();

// Declares on `sub` every flag tagged with `cmd`, bound to `o`, grouped and marked as the table says.
void add_flags(CLI::App* sub, Cmd cmd, CliOptions& o);

}  // namespace ragkv::cli
