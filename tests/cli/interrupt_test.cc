// interrupt_test.cc: cli/interrupt.h in process: a signal raised inside an InterruptScope is
// recorded (not acted on) and turned into Interrupted at the next poll with the shell's exit
// status; the scope restores the previous handler; registered temp paths are removed on request
// and unregistered when their guard goes.
#include "cli/interrupt.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

namespace feather {
namespace {

namespace fs = std::filesystem;

TEST(InterruptTest, SignalIsRecordedAndPolled) {
  const InterruptScope scope;
  EXPECT_FALSE(InterruptRequested());
  EXPECT_NO_THROW(ThrowIfInterrupted());
  ASSERT_EQ(raise(SIGINT), 0);  // recorded by the handler; the process keeps running
  EXPECT_EQ(PendingInterrupt(), SIGINT);
  try {
    ThrowIfInterrupted();
    ADD_FAILURE() << "expected Interrupted";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGINT);
    EXPECT_EQ(e.exit_code(), 130);
    EXPECT_STREQ(e.what(), "interrupted by SIGINT");
  }
}

TEST(InterruptTest, SigtermExitsWith143AndANewScopeStartsClear) {
  {
    const InterruptScope scope;
    ASSERT_EQ(raise(SIGTERM), 0);
    EXPECT_EQ(PendingInterrupt(), SIGTERM);
    EXPECT_EQ(Interrupted(PendingInterrupt()).exit_code(), 143);
  }
  const InterruptScope next;
  EXPECT_FALSE(InterruptRequested());
}

TEST(InterruptTest, ScopeRestoresThePreviousHandler) {
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &before), 0);
  {
    const InterruptScope scope;
    struct sigaction during {};
    ASSERT_EQ(sigaction(SIGINT, nullptr, &during), 0);
    EXPECT_NE(during.sa_handler, before.sa_handler);
  }
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(InterruptTest, RegisteredTempPathsAreRemovedOnRequestOnly) {
  const fs::path dir = fs::path(::testing::TempDir()) / "feather_interrupt_temp";
  fs::remove_all(dir);
  fs::create_directories(dir / "partial" / "sub");
  std::ofstream(dir / "partial" / "sub" / "file") << "x";
  std::ofstream(dir / "kept") << "y";
  { const TempPathGuard kept((dir / "kept").string()); }  // unregistered: never removed
  {
    const TempPathGuard guard((dir / "partial").string());
    EXPECT_TRUE(fs::exists(dir / "partial"));  // the guard alone deletes nothing
    EXPECT_EQ(RemoveRegisteredTempPaths(), 1u);
    EXPECT_FALSE(fs::exists(dir / "partial"));
  }
  EXPECT_EQ(RemoveRegisteredTempPaths(), 0u);
  EXPECT_TRUE(fs::exists(dir / "kept"));
  fs::remove_all(dir);
}

TEST(InterruptTest, SignalNames) {
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGHUP), "signal " + std::to_string(SIGHUP));
}

}  // namespace
}  // namespace feather
