// The CLI11 checks of one mode spec (core/rag/mode-spec.h), shared by the rag and bench command
// families, and of one margin-fallback rule (core/rag/fallback-rule.h).
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "core/rag/fallback-rule.h"
#include "core/rag/mode-spec.h"
#include "core/util/error.h"

namespace ragkv {

// A check that runs `parse` on the value and reports its Error's message.
template <class Parse>
CLI::Validator parsing_validator(Parse parse, const char* what) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          parse(s);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      },
      what);
}

inline CLI::Validator mode_validator() {
  return parsing_validator([](const std::string& s) { parse_mode_spec(s); }, "MODE[/METHOD][@R][~P][+freq]");
}

inline CLI::Validator fallback_rule_validator() {
  return parsing_validator([](const std::string& s) { parse_fallback_rule(s); }, "M[/C]");
}

}  // namespace ragkv
