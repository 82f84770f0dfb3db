// --device / --threads, shared by every compute subcommand (DESIGN.md §1).
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <thread>

namespace ragkv::cli {

struct DeviceFlags {
  std::string device = "auto";
  int threads = 0;
  void add_to(CLI::App* app) {
    app->add_option("--device", device, "Compute device: cpu, cuda or auto")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
        ->capture_default_str();
    app->add_option("--threads", threads, "CPU threads (0: one per core)")->check(CLI::NonNegativeNumber);
  }
  int thread_count() const { return threads > 0 ? threads : int(std::thread::hardware_concurrency()); }
};

}  // namespace ragkv::cli
