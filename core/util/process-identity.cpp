// Process identity from gethostname, /proc/sys/kernel/random/boot_id and /proc/<pid>/stat.
#include "core/util/process-identity.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>

namespace ragkv {

namespace {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return {};
  return host;
}

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// Field 22 (starttime) of /proc/<pid>/stat; 0 when it cannot be read. The command name (field 2)
// may hold spaces and parentheses, so fields are counted after its last ')'.
uint64_t start_ticks(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(s.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)  // field 3 (state) is the first after ')'
    if (!(rest >> field)) return 0;
  try {
    return std::stoull(field);
  } catch (...) {
    return 0;
  }
}

}  // namespace

ProcessIdentity this_process() {
  static const std::string host = host_name(), boot = boot_id();
  ProcessIdentity p;
  p.host = host;
  p.boot_id = boot;
  p.pid = long(::getpid());
  p.start_ticks = start_ticks(p.pid);
  return p;
}

ProcessState process_state(const ProcessIdentity& p) {
  const ProcessIdentity me = this_process();
  if (p.host.empty() || p.host != me.host || p.boot_id != me.boot_id || p.pid <= 0) return ProcessState::unknown;
  if (::kill(pid_t(p.pid), 0) != 0 && errno == ESRCH) return ProcessState::gone;
  const uint64_t now = start_ticks(p.pid);
  if (p.start_ticks != 0 && now != 0 && now != p.start_ticks) return ProcessState::gone;  // pid reused
  return ProcessState::running;
}

}  // namespace ragkv
