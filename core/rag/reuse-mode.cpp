// Names of the reuse modes, for flags, reports and eval records.
#include "core/rag/reuse-mode.h"

#include "core/util/enum-names.h"

namespace ragkv {

namespace {
constexpr EnumNames<ReuseMode, 6> kModeNames{{{
    {ReuseMode::full, "full"},
    {ReuseMode::prefix, "prefix"},
    {ReuseMode::reuse, "reuse"},
    {ReuseMode::blend, "blend"},
    {ReuseMode::craft, "craft"},
    {ReuseMode::auto_, "auto"},
}}};
}  // namespace

const char* reuse_mode_name(ReuseMode m) { return kModeNames.name(m); }
ReuseMode parse_reuse_mode(const std::string& s) { return kModeNames.parse(s, "mode"); }
bool is_reuse_mode(const std::string& s) { return kModeNames.contains(s); }
std::string reuse_mode_list() { return kModeNames.list(); }
std::vector<std::string> reuse_mode_names() { return kModeNames.names(); }

}  // namespace ragkv
