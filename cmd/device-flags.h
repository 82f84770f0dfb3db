// The values of --device / --threads (declared in cmd/flag-table.cpp; DESIGN.md §1), and the one
// place a backend is chosen: the engine, the retriever and the benchmarks take a Backend& made here.
#pragma once
#include <memory>
#include <string>

#include "core/backend/backend.h"

namespace ragkv::cli {

struct DeviceFlags {
  std::string device = "auto";
  int threads = 0;
  int thread_count() const;  // --threads, or one per core
  // The backend for --device: cpu, cuda (Error when no GPU or no CUDA build), or auto (cuda when
  // a GPU is present in a CUDA build and `ragkv device-check` passed on it with this build, else
  // the CPU, saying why on stderr when a GPU was there).
  std::unique_ptr<Backend> make_backend() const;
};

bool cuda_available();  // a CUDA device is usable in this process (and this build has CUDA)

}  // namespace ragkv::cli
