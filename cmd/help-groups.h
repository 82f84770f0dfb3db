// Which options `--help` shows: those a user needs daily. Research and tuning knobs are marked
// advanced and shown, in a group of their own, only by `--help-all`.
#pragma once
#include <CLI/CLI.hpp>

namespace ragkv::cli {

// Called once by main, before any option is added: whether the command line asks for --help-all.
void show_advanced_options(bool show);
bool showing_advanced_options();
// Marks o as advanced: hidden from --help, listed under its own heading by --help-all.
CLI::Option* advanced(CLI::Option* o);

}  // namespace ragkv::cli
