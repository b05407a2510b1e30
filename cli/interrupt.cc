// interrupt.cc: signal flag, handler installation and the temp-path registry (see interrupt.h).
#include "cli/interrupt.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <utility>
#include <vector>

namespace feather {
namespace {

// Written by the handler, read by polling: a lock-free atomic is async-signal-safe.
std::atomic<int> g_pending_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void OnInterrupt(int signal) {
  int expected = 0;
  if (!g_pending_signal.compare_exchange_strong(expected, signal)) {
    // Second signal before the first was acted on: the default action, now.
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  }
}

std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<std::string>& Registry() {
  static std::vector<std::string> paths;
  return paths;
}

}  // namespace

struct InterruptScope::Saved {
  struct sigaction int_action;
  struct sigaction term_action;
};

InterruptScope::InterruptScope() : saved_(new Saved{}) {
  g_pending_signal.store(0);
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write in progress is resumed, not failed with EINTR
  sigaction(SIGINT, &action, &saved_->int_action);
  sigaction(SIGTERM, &action, &saved_->term_action);
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &saved_->int_action, nullptr);
  sigaction(SIGTERM, &saved_->term_action, nullptr);
  delete saved_;
}

int PendingInterrupt() { return g_pending_signal.load(std::memory_order_relaxed); }

Interrupted::Interrupted(int signal)
    : std::runtime_error("interrupted by " + SignalName(signal)), signal_(signal) {}

void ThrowIfInterrupted() {
  if (const int signal = PendingInterrupt(); signal != 0) throw Interrupted(signal);
}

std::string SignalName(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(signal);
  }
}

TempPathGuard::TempPathGuard(std::string path) : path_(std::move(path)) {
  const std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().push_back(path_);
}

TempPathGuard::~TempPathGuard() {
  const std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<std::string>& paths = Registry();
  const auto it = std::find(paths.rbegin(), paths.rend(), path_);
  if (it != paths.rend()) paths.erase(std::next(it).base());
}

size_t RemoveRegisteredTempPaths() {
  const std::lock_guard<std::mutex> lock(RegistryMutex());
  size_t removed = 0;
  for (const std::string& path : Registry()) {
    std::error_code error;
    if (std::filesystem::remove_all(path, error) > 0 && !error) ++removed;
  }
  return removed;
}

}  // namespace feather
