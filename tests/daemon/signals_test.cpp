// common/signals.hpp: a signal sent to the process reaches wait() even when it lands in a thread
// that a library started before route() (as OpenBLAS starts its pool before main()), where the
// default action of SIGTERM would have ended the process.
#include "common/signals.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <future>
#include <thread>

namespace leap {
namespace {

TEST(Signals, ASignalLandingInAForeignThreadReachesWait) {
  std::promise<void> stop;
  // A "library" thread with no signal blocked, started before route(): the kernel may deliver
  // process-directed signals to it while it waits (a futex wait takes signals like any other).
  std::thread foreign([done = stop.get_future()] {
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    done.wait();
  });
  ASSERT_TRUE(signals::route({SIGTERM, SIGHUP}).ok());
  for (int round = 0; round < 20; ++round) {
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
    EXPECT_EQ(signals::wait(std::chrono::seconds(5)), SIGTERM) << "round " << round;
    ASSERT_EQ(::kill(::getpid(), SIGHUP), 0);
    EXPECT_EQ(signals::wait(std::chrono::seconds(5)), SIGHUP) << "round " << round;
  }
  // Nothing pending: wait() gives up after its timeout.
  EXPECT_EQ(signals::wait(std::chrono::milliseconds(50)), 0);
  stop.set_value();
  foreign.join();
}

}  // namespace
}  // namespace leap
