// Who a process is, in a form another process can check later (claims between processes): the
// host name, the kernel's boot id, the pid and the pid's start time. A pid names a process only on
// the machine and boot that issued it, and only while it runs: a pid reused by a new process has
// another start time, and after a reboot the boot id differs.
#pragma once
#include <cstdint>
#include <string>

namespace ragkv {

struct ProcessIdentity {
  std::string host;          // gethostname(2)
  std::string boot_id;       // /proc/sys/kernel/random/boot_id; "" where the kernel has none
  long pid = 0;
  uint64_t start_ticks = 0;  // field 22 of /proc/<pid>/stat (clock ticks after boot); 0: unknown
};

// This process, now (the pid is read on every call: a forked child is another process).
ProcessIdentity this_process();

enum class ProcessState {
  running,  // on this machine and boot, the pid alive with the same start time
  gone,     // on this machine and boot, and no longer running (the pid free or reused, or a zombie)
  unknown,  // another machine or boot: nothing here can tell
};
ProcessState process_state(const ProcessIdentity& p);

}  // namespace ragkv
