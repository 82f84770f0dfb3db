// The advanced-option group and whether it is shown.
#include "cmd/help-groups.h"

namespace ragkv::cli {

namespace {
bool g_show_advanced = false;
}  // namespace

void show_advanced_options(bool show) { g_show_advanced = show; }
bool showing_advanced_options() { return g_show_advanced; }

CLI::Option* advanced(CLI::Option* o) {
  return o->group(g_show_advanced ? "Advanced (research and tuning)" : "");
}

}  // namespace ragkv::cli
