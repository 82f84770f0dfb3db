// Progress: rate-limited redraws (10 per second on a terminal, one line per 5 s otherwise).
#include "core/util/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace ragkv {

std::string format_duration(double s) {
  if (s < 60) return fmt::format("{:.1f} s", s);
  if (s < 3600) return fmt::format("{} min {:02d} s", int(s) / 60, int(s) % 60);
  return fmt::format("{} h {:02d} min", int(s) / 3600, (int(s) % 3600) / 60);
}

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(isatty(STDERR_FILENO) != 0),
      start_(clock::now()), last_print_(start_) {}

Progress::~Progress() { finish(); }

void Progress::add(int64_t n) { set(done_ + n); }

void Progress::set(int64_t done) {
  done_ = done;
  const auto now = clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (since >= (tty_ ? 0.1 : 5.0)) {
    last_print_ = now;
    print(false);
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  print(true);
}

void Progress::print(bool final) {
  const double elapsed = std::chrono::duration<double>(clock::now() - start_).count();
  const double rate = elapsed > 0 ? done_ / elapsed : 0;
  std::string line;
  if (final) {
    line = fmt::format("{}: {} {} in {} ({:.1f} {}/s)", label_, done_, unit_, format_duration(elapsed), rate, unit_);
  } else if (total_ > 0) {
    const double frac = double(done_) / double(total_);
    const double eta = rate > 0 ? (total_ - done_) / rate : 0;
    std::string bar;
    if (tty_) {
      const int width = 24, filled = int(frac * width);
      bar = fmt::format("[{:#<{}}{:.<{}}] ", "", filled, "", width - filled);
    }
    line = fmt::format("{}: {}{}/{} {} ({:.0f}%), {:.1f} {}/s, ETA {}", label_, bar, done_, total_, unit_,
                       100 * frac, rate, unit_, format_duration(eta));
  } else {
    line = fmt::format("{}: {} {}, {:.1f} {}/s", label_, done_, unit_, rate, unit_);
  }
  if (tty_) std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  else std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace ragkv
