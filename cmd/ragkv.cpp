// ragkv's main: every command family's flags on one CLI11 app, then the chosen command. All
// errors surface here once, as one line on stderr and a non-zero exit (2 for usage errors).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "cmd/cli-options.h"
#include "cmd/command-family.h"
#include "cmd/help-groups.h"

namespace {

// OpenMP worker threads busy-wait between parallel regions by default (libgomp: about 3 ms of
// spinning); on a shared or oversubscribed machine (ctest -j, other jobs) that stalls every region
// behind descheduled spinners (measured: 7 s instead of 0.3 s for a short prefill on a loaded
// 2-core machine). Sleeping at once (OMP_WAIT_POLICY=PASSIVE) has the opposite cost: every
// parallel region then wakes its workers through the kernel, and a decode step of a small model
// is ~120 short regions — SmolLM2 decoded at 2 threads at 55–67 tokens/s against 104–112 at one.
// ragkv therefore runs PASSIVE with a short spin first (GOMP_SPINCOUNT=10000: libgomp estimates
// ~100,000 spins per ms, so a worker spins about 0.1 ms before it sleeps), which catches the next
// region of a decode step and gives the cores back soon after the work stops (SmolLM2 at 2
// threads: 113–127 tokens/s; bench/results/README.md, "CPU speed and memory against llama.cpp"). A policy or spin count the user
// set is kept (ctest sets PASSIVE). The runtime reads them when it loads, before main, hence the
// re-exec.
void ensure_openmp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("RAGKV_NO_REEXEC")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  if (!std::getenv("GOMP_SPINCOUNT")) setenv("GOMP_SPINCOUNT", "10000", 1);
  setenv("RAGKV_NO_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace

int main(int argc, char** argv) {
  ensure_openmp_wait_policy(argv);
  // --help-all is --help with the advanced options shown too.
  static char help[] = "--help";
  bool help_all = false;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help-all") argv[i] = help, help_all = true;
  ragkv::cli::show_advanced_options(help_all);
  CLI::App app{"ragkv: retrieval-augmented generation with chunk-KV reuse"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ragkv 0.1.0");
  if (!help_all) app.footer("--help-all on a command also lists its advanced options.");
  ragkv::cli::CliOptions options;  // every flag's value (cmd/flag-table.h)
  std::vector<std::unique_ptr<ragkv::cli::CommandFamily>> families;
  families.push_back(ragkv::cli::model_commands(options));
  families.push_back(ragkv::cli::index_commands(options));
  families.push_back(ragkv::cli::rag_commands(options));
  families.push_back(ragkv::cli::bench_commands(options));
  families.push_back(ragkv::cli::store_commands(options));
  families.push_back(ragkv::cli::device_commands(options));
  for (auto& f : families) f->add_to(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (auto& f : families)
      if (f->selected()) return f->run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ragkv: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
