// interrupt.h: SIGINT and SIGTERM as a polled request to stop, plus the temp paths to remove then.
//
// Use it in a command that writes results (`feather run`; later `feather sweep`):
//   InterruptScope scope;                      // handlers on; the previous ones back at scope end
//   ... ThrowIfInterrupted();                  // at safe points: between stages, in the serving
//                                              // loop's progress callback
//   TempPathGuard guard(temp_dir);             // while a temp path exists
//   catch (const Interrupted& e) { RemoveRegisteredTempPaths(); print e.what(); return
//                                  e.exit_code(); }
// The handler only records the signal (async-signal-safe), so nothing is ever torn down in the
// middle of writing a file: the code that polls unwinds normally, finished outputs stay as they
// are, and temp paths still registered are deleted. A second SIGINT/SIGTERM while the first is
// pending is not polled: it terminates the process at once (the default action), for a user who
// does not want to wait for the next safe point.
//
// Exit status of an interrupted command: 128 + signal number (130 for SIGINT, 143 for SIGTERM),
// the shell's convention. Polling is O(1) (one relaxed atomic load); the registry is a small
// vector guarded by a mutex (paths are registered and removed by the main thread).
#pragma once

#include <stdexcept>
#include <string>

namespace feather {

// Installs the SIGINT and SIGTERM handlers for its lifetime (scopes may nest; the innermost
// restores what it replaced). Clears a pending interrupt on entry.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct Saved;
  Saved* saved_;
};

// The signal received since the innermost InterruptScope was entered, or 0.
[[nodiscard]] int PendingInterrupt();
[[nodiscard]] inline bool InterruptRequested() { return PendingInterrupt() != 0; }

// Thrown at a safe point after SIGINT/SIGTERM. what(): "interrupted by SIGINT".
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal);
  [[nodiscard]] int signal() const { return signal_; }
  [[nodiscard]] int exit_code() const { return 128 + signal_; }

 private:
  int signal_;
};

// Throws Interrupted when a signal is pending.
void ThrowIfInterrupted();

// "SIGINT", "SIGTERM", else "signal N".
[[nodiscard]] std::string SignalName(int signal);

// Registers `path` (a file or directory) as temporary for the guard's lifetime: on an interrupt
// RemoveRegisteredTempPaths() deletes it. The guard itself never deletes anything (the code that
// made the path removes or renames it on its normal and error paths).
class TempPathGuard {
 public:
  explicit TempPathGuard(std::string path);
  ~TempPathGuard();
  TempPathGuard(const TempPathGuard&) = delete;
  TempPathGuard& operator=(const TempPathGuard&) = delete;

 private:
  std::string path_;
};

// Deletes every registered temp path that still exists (recursively); never throws. Returns how
// many were deleted.
size_t RemoveRegisteredTempPaths();

}  // namespace feather
