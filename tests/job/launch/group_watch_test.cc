// ctest-labels: unit
// Tests of the launchers' shared pieces (group_watch.h, signal_pipe.h): the line splitter
// that the local launcher and the engine launchers read output with, and the signal pipe.
// The watch loop itself runs under tests/job/launch/local_launcher_test.cc.
#include "heft/job/launch/group_watch.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "heft/error.h"
#include "heft/job/launch/signal_pipe.h"

namespace heft::job {
namespace {

std::vector<std::string> split(LineSplitter& lines, const std::vector<std::string>& chunks,
                               bool flush) {
  std::vector<std::string> out;
  const LineSplitter::Sink sink = [&out](std::string_view l) { out.emplace_back(l); };
  for (const std::string& c : chunks) lines.feed(c, sink);
  if (flush) lines.flush(sink);
  return out;
}

TEST(LineSplitter, JoinsLinesAcrossChunksAndDropsTheNewline) {
  LineSplitter lines;
  EXPECT_EQ(split(lines, {"ab\ncd", "e\n\n", "f"}, false),
            (std::vector<std::string>{"ab", "cde", ""}));
  // The unfinished "f" is kept for the next chunk.
  EXPECT_EQ(split(lines, {"g\n"}, false), (std::vector<std::string>{"fg"}));
}

TEST(LineSplitter, FlushDeliversALastLineWithoutNewlineOnce) {
  LineSplitter lines;
  EXPECT_EQ(split(lines, {"a\nlast"}, true), (std::vector<std::string>{"a", "last"}));
  EXPECT_TRUE(split(lines, {}, true).empty());
}

TEST(LineSplitter, ALongLineComesInPiecesOfMaxLineBytesNewlineCounted) {
  LineSplitter lines(4);
  // "abc\n" fills a piece with its newline; "abcdefgh" are two full pieces, and the newline
  // after them ends an empty line (as a worker's 64 KiB line and its '\n' do).
  EXPECT_EQ(split(lines, {"abc\nabcd", "efgh\nxy"}, true),
            (std::vector<std::string>{"abc", "abcd", "efgh", "", "xy"}));
}

TEST(LineSplitter, DefaultPiecesAreKMaxLineBytes) {
  LineSplitter lines;
  const std::string big(kMaxLineBytes + 10, 'x');
  const std::vector<std::string> out = split(lines, {big + "\n"}, false);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].size(), kMaxLineBytes);
  EXPECT_EQ(out[1].size(), 10u);
}

TEST(LineSplitter, NoLimitKeepsALongLineWhole) {
  LineSplitter lines(LineSplitter::kNoLimit);
  const std::string big(3 * kMaxLineBytes, 'y');
  const std::vector<std::string> out =
      split(lines, {big.substr(0, 1000), big.substr(1000) + "\nz\n"}, false);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], big);
  EXPECT_EQ(out[1], "z");
}

volatile sig_atomic_t g_seen = 0;
void remember(int sig) { g_seen = sig; }

TEST(SignalPipe, DeliversSignalsInOrderAndGivesTheHandlersBack) {
  struct sigaction mine {}, before {};
  mine.sa_handler = remember;
  ASSERT_EQ(::sigaction(SIGHUP, &mine, &before), 0);
  {
    SignalPipe signals;
    EXPECT_THROW(SignalPipe(), Error);  // one per process
    ::raise(SIGHUP);
    ::raise(SIGTERM);
    EXPECT_EQ(signals.pending_interrupt(), SIGHUP);  // takes nothing
    EXPECT_EQ(signals.take(), (std::vector<int>{SIGHUP, SIGTERM}));
    EXPECT_TRUE(signals.take().empty());
    EXPECT_EQ(signals.pending_interrupt(), 0);
  }
  EXPECT_EQ(g_seen, 0);
  ::raise(SIGHUP);  // our own handler again
  EXPECT_EQ(g_seen, SIGHUP);
  ::sigaction(SIGHUP, &before, nullptr);
}

}  // namespace
}  // namespace heft::job
