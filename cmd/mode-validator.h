// The CLI11 check of one mode spec (core/rag/mode-spec.h), shared by the rag and bench command families.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

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

}  // namespace ragkv
