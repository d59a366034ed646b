#include "common/recent_replies.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace tessera {
namespace {

Message ReplyOf(uint64_t id, size_t bytes) {
  Message m(Opcode::kPushGradients);
  m.header.request_id = id;
  m.AddString(std::string(bytes, 'r'));
  return m;
}

TEST(RecentRepliesTest, ACopyIsDroppedWhileServedAndAnsweredAgainAfter) {
  RecentReplies recent;
  Message again;
  EXPECT_EQ(recent.Arrived("client", 7, &again), RecentReplies::Seen::kNew);
  // Sent again before the first was answered: its reply will do for both.
  EXPECT_EQ(recent.Arrived("client", 7, &again), RecentReplies::Seen::kInProgress);
  // Another client's request 7, and this client's next, are other requests.
  EXPECT_EQ(recent.Arrived("other", 7, &again), RecentReplies::Seen::kNew);
  EXPECT_EQ(recent.Arrived("client", 8, &again), RecentReplies::Seen::kNew);
  Message reply = ReplyOf(7, 100);
  recent.Answered("client", 7, reply);
  ASSERT_EQ(reply.frames.size(), 1u);  // still whole for its own send
  EXPECT_EQ(recent.Arrived("client", 7, &again), RecentReplies::Seen::kAnswered);
  EXPECT_EQ(again.header.request_id, 7u);
  ASSERT_EQ(again.frames.size(), 1u);
  EXPECT_EQ(again.frames[0].to_string(), std::string(100, 'r'));
  // And again: a kept reply serves every copy.
  Message third;
  EXPECT_EQ(recent.Arrived("client", 7, &third), RecentReplies::Seen::kAnswered);
  EXPECT_EQ(third.frames[0].to_string(), std::string(100, 'r'));
}

TEST(RecentRepliesTest, ALargeReplyIsNotKeptSoItsRequestIsServedAgain) {
  RecentReplies recent(/*max_entries=*/100, /*max_kept_bytes=*/1 << 20, /*max_reply_bytes=*/1000);
  Message again;
  EXPECT_EQ(recent.Arrived("c", 1, &again), RecentReplies::Seen::kNew);
  Message rows = ReplyOf(1, 5000);
  recent.Answered("c", 1, rows);
  EXPECT_EQ(recent.Arrived("c", 1, &again), RecentReplies::Seen::kNew);
  EXPECT_EQ(recent.Arrived("c", 1, &again), RecentReplies::Seen::kInProgress);
  Message small = ReplyOf(1, 10);
  recent.Answered("c", 1, small);
  EXPECT_EQ(recent.Arrived("c", 1, &again), RecentReplies::Seen::kAnswered);
}

TEST(RecentRepliesTest, TheOldestAnsweredGoFirstAndUnknownAnswersAreIgnored) {
  RecentReplies recent(/*max_entries=*/3, /*max_kept_bytes=*/1 << 20, /*max_reply_bytes=*/1000);
  Message again;
  for (uint64_t id = 0; id < 5; ++id) {
    EXPECT_EQ(recent.Arrived("c", id, &again), RecentReplies::Seen::kNew);
    Message reply = ReplyOf(id, 10);
    recent.Answered("c", id, reply);
  }
  EXPECT_EQ(recent.entries(), 3u);
  EXPECT_EQ(recent.Arrived("c", 4, &again), RecentReplies::Seen::kAnswered);
  EXPECT_EQ(recent.Arrived("c", 0, &again), RecentReplies::Seen::kNew);  // forgotten: served again
  Message stray = ReplyOf(99, 10);
  recent.Answered("c", 99, stray);  // never arrived
  EXPECT_EQ(recent.Arrived("c", 99, &again), RecentReplies::Seen::kNew);
  // The kept bytes bound it too.
  RecentReplies small(/*max_entries=*/100, /*max_kept_bytes=*/250, /*max_reply_bytes=*/1000);
  for (uint64_t id = 0; id < 4; ++id) {
    small.Arrived("c", id, &again);
    Message reply = ReplyOf(id, 100);
    small.Answered("c", id, reply);
  }
  EXPECT_EQ(small.entries(), 2u);
}

TEST(RecentRepliesTest, AnswersOlderThanTheirAgeAreForgottenAsNewOnesCome) {
  RecentReplies::Clock::time_point now{};
  RecentReplies recent(/*max_entries=*/1000, /*max_kept_bytes=*/1 << 20, /*max_reply_bytes=*/1000,
                       std::chrono::seconds(120), [&now] { return now; });
  Message again;
  // A heartbeat every second for five minutes: what is kept stops growing at
  // two minutes' worth.
  for (uint64_t id = 0; id < 300; ++id) {
    now += std::chrono::seconds(1);
    recent.Arrived("member", id, &again);
    Message reply = ReplyOf(id, 10);
    recent.Answered("member", id, reply);
    EXPECT_LE(recent.entries(), 121u) << "after " << id + 1 << " s";
  }
  EXPECT_EQ(recent.entries(), 121u);
  EXPECT_EQ(recent.Arrived("member", 299, &again), RecentReplies::Seen::kAnswered);
  EXPECT_EQ(recent.Arrived("member", 179, &again), RecentReplies::Seen::kAnswered);  // answered 120 s ago
  EXPECT_EQ(recent.Arrived("member", 178, &again), RecentReplies::Seen::kNew);       // 121 s ago: forgotten
  // A request still being served is not aged out, however long it takes.
  EXPECT_EQ(recent.Arrived("slow", 1, &again), RecentReplies::Seen::kNew);
  now += std::chrono::minutes(10);
  Message reply = ReplyOf(1, 10);
  recent.Arrived("member", 1000, &again);
  recent.Answered("member", 1000, reply);
  EXPECT_EQ(recent.Arrived("slow", 1, &again), RecentReplies::Seen::kInProgress);
  // The slow one, member's 178 (being served again) and its 1000.
  EXPECT_EQ(recent.entries(), 3u);
}

}  // namespace
}  // namespace tessera
