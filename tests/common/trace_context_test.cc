// W3C traceparent parsing and the ids of new traces and spans; the parsing
// of /proc/<pid>/stat lines for the process_* metrics.
#include "server/common/trace_context.h"

#include <gtest/gtest.h>

#include <set>

#include "server/common/process_stats.h"

namespace ropeserve {
namespace {

constexpr const char* kExample = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";  // the spec's example

TEST(TraceContext, ParsesTheSpecExample) {
  auto t = TraceContext::Parse(kExample);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->TraceIdHex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(t->SpanIdHex(), "00f067aa0ba902b7");
  EXPECT_TRUE(t->sampled);
  EXPECT_EQ(t->ToTraceparent(), kExample);
  auto unsampled = TraceContext::Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled);
  // Only bit 0 of the flags means "sampled".
  EXPECT_FALSE(TraceContext::Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02")->sampled);
  EXPECT_TRUE(TraceContext::Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03")->sampled);
}

TEST(TraceContext, RejectsWhatTheSpecRejects) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",        // no flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",     // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",     // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",     // zero span id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     // version ff is invalid
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",  // version 00 has four fields
           "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",     // misplaced dash
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",  // not hex
           "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       })
    EXPECT_FALSE(TraceContext::Parse(bad).has_value()) << bad;
}

TEST(TraceContext, ReadsTheKnownFieldsOfALaterVersion) {
  auto t = TraceContext::Parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->SpanIdHex(), "00f067aa0ba902b7");
  // ... but not one glued to the flags.
  EXPECT_FALSE(TraceContext::Parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x").has_value());
}

TEST(TraceContext, NewTracesAndChildrenHaveFreshIds) {
  std::set<std::string> traces, spans;
  for (int i = 0; i < 100; ++i) {
    TraceContext root = TraceContext::NewRoot();
    EXPECT_TRUE(root.valid());
    EXPECT_TRUE(root.sampled);
    TraceContext child = root.NewChild();
    EXPECT_EQ(child.trace_id, root.trace_id);
    EXPECT_NE(child.span_id, root.span_id);
    EXPECT_TRUE(TraceContext::Parse(child.ToTraceparent()).has_value());
    traces.insert(root.TraceIdHex());
    spans.insert(root.SpanIdHex());
    spans.insert(child.SpanIdHex());
  }
  EXPECT_EQ(traces.size(), 100u);
  EXPECT_EQ(spans.size(), 200u);
  EXPECT_FALSE(TraceContext{}.valid());
}

TEST(ProcessStats, ParsesAProcStatLine) {
  // A command name with spaces and parentheses; utime 250, stime 50 ticks,
  // starttime 1000 ticks after boot, vsize 4096000, rss 300 pages.
  const std::string line =
      "42 (a (b) c) S 1 42 42 0 -1 4194304 101 0 0 0 250 50 0 0 20 0 1 0 1000 4096000 300 18446744073709551615 1 1 0";
  ProcessStats s;
  ASSERT_TRUE(ParseProcStat(line, 100, 4096, 1.7e9, s));
  EXPECT_DOUBLE_EQ(s.cpu_seconds, 3.0);
  EXPECT_DOUBLE_EQ(s.start_time_seconds, 1.7e9 + 10);
  EXPECT_DOUBLE_EQ(s.virtual_bytes, 4096000);
  EXPECT_DOUBLE_EQ(s.resident_bytes, 300 * 4096.0);
  EXPECT_FALSE(ParseProcStat("42 (cut short) S 1 2 3", 100, 4096, 0, s));
  EXPECT_FALSE(ParseProcStat("no parenthesis at all", 100, 4096, 0, s));
  EXPECT_FALSE(
      ParseProcStat("42 (x) S 1 42 42 0 -1 4194304 101 0 0 0 2x0 50 0 0 20 0 1 0 1000 4096000 300", 100, 4096, 0, s));
}

TEST(ProcessStats, ReadsThisProcess) {
  auto s = ReadProcessStats();
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->resident_bytes, 0);
  EXPECT_GE(s->virtual_bytes, s->resident_bytes);
  EXPECT_GE(s->open_fds, 3);  // stdin, stdout, stderr at least
  EXPECT_GE(s->max_fds, s->open_fds);
  EXPECT_GT(s->start_time_seconds, 1e9);
}

}  // namespace
}  // namespace ropeserve
