// What every fuzz target shares (README "Fuzzing and sanitizers"): a private scratch directory for the files a
// reader opens, the input cut into the parts of a multi-file target, the bundled models' paths,
// and the rule for errors. A reader given bad bytes must throw ragkv::Error naming the file (or
// folder) it read; any other exception, a crash, a sanitizer report, a leak or a hang is a
// finding. check() is the targets' assertion: it aborts, so libFuzzer keeps the input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/error.h"

namespace ragkv::fuzz {

// This process's scratch directory (mkdtemp under $RAGKV_FUZZ_TMPDIR, else /dev/shm, else the
// temp directory), removed when the process exits.
const std::filesystem::path& scratch_dir();
// Writes bytes to scratch_dir()/name (replacing it, creating folders) and returns the path.
std::filesystem::path write_scratch(const std::string& name, std::string_view bytes);

// The parts of a multi-file input, cut at kPartSeparator; always `n` parts (missing ones empty,
// the last takes the rest). join_parts is the inverse, for writing seeds.
inline constexpr std::string_view kPartSeparator = "\n=== ragkv fuzz part ===\n";
std::vector<std::string_view> split_parts(std::string_view data, size_t n);
std::string join_parts(const std::vector<std::string>& parts);

// The bundled models (models/ of the source tree, or $RAGKV_MODELS_DIR); aborts with a message
// when one is missing (run `make setup`).
std::filesystem::path model_file(const std::string& name);

// Aborts with the message and the condition's text when cond is false.
#define RAGKV_FUZZ_CHECK(cond, ...) ::ragkv::fuzz::check_impl((cond), #cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__))
void check_impl(bool ok, const char* cond, const char* file, int line, const std::string& message);

// Runs f on bad input: returns normally, or throws ragkv::Error whose message contains `names`
// (the file or folder the reader opened; empty: no requirement). Any other exception escapes to
// libFuzzer, which reports it as a crash. Returns true when f returned.
bool expect_ok_or_error(const std::string& names, const std::function<void()>& f);

}  // namespace ragkv::fuzz
