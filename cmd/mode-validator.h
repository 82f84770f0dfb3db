// The CLI11 checks of one mode spec (core/rag/mode-spec.h), shared by the rag and bench command
// families, and of one margin-fallback rule (core/rag/fallback-rule.h).
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "core/rag/fallback-rule.h"
#include "core/rag/mode-spec.h"
#include "core/util/error.h"

namespace ragkv {

inline CLI::Validator mode_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          parse_mode_spec(s);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      },
      "MODE[/METHOD][@R][~P][+freq]");
}

inline CLI::Validator fallback_rule_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          parse_fallback_rule(s);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      },
      "M[/C]");
}

}  // namespace ragkv
