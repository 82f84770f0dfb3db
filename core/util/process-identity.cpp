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

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat; {0, 0} when it cannot be read. The
// command name (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
struct ProcStat {
  char state = 0;  // R, S, D, T, ...; Z: a zombie (exited, not yet reaped), X: dead
  uint64_t start_ticks = 0;
};
ProcStat proc_stat(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(s.substr(close + 1));
  ProcStat st;
  std::string field;
  for (int i = 3; i <= 22; ++i) {  // field 3 (state) is the first after ')'
    if (!(rest >> field)) return {};
    if (i == 3) st.state = field.empty() ? 0 : field[0];
  }
  try {
    st.start_ticks = std::stoull(field);
  } catch (...) {
    return {};
  }
  return st;
}

}  // namespace

ProcessIdentity this_process() {
  static const std::string host = host_name(), boot = boot_id();
  ProcessIdentity p;
  p.host = host;
  p.boot_id = boot;
  p.pid = long(::getpid());
  p.start_ticks = proc_stat(p.pid).start_ticks;
  return p;
}

ProcessState process_state(const ProcessIdentity& p) {
  const ProcessIdentity me = this_process();
  if (p.host.empty() || p.host != me.host || p.boot_id != me.boot_id || p.pid <= 0) return ProcessState::unknown;
  if (::kill(pid_t(p.pid), 0) != 0 && errno == ESRCH) return ProcessState::gone;
  const ProcStat now = proc_stat(p.pid);
  if (p.start_ticks != 0 && now.start_ticks != 0 && now.start_ticks != p.start_ticks) return ProcessState::gone;  // pid reused
  if (now.state == 'Z' || now.state == 'X') return ProcessState::gone;  // killed, not yet reaped by its parent
  return ProcessState::running;
}

}  // namespace ragkv
