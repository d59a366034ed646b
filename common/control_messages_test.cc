// The control-plane messages: what one side writes the other reads back, and
// a body with a missing, mistyped, out-of-range or unknown field is refused
// with the field's name (never a throw, never a default taken silently).
#include "common/control_messages.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

using nlohmann::json;

TEST(ControlMessagesTest, WhatIsWrittenReadsBack) {
  RegisterRequest ps;
  ps.role = "ps";
  ps.endpoint = "tcp://10.0.0.2:4000";
  ps.host = "h";
  ps.pid = 42;
  ps.memory_bytes = 1 << 20;
  ps.generation = 3;
  auto ps2 = RegisterRequest::Parse(ps.ToJson());
  ASSERT_TRUE(ps2.ok()) << ps2.status();
  EXPECT_EQ(ps2->endpoint, ps.endpoint);
  EXPECT_EQ(ps2->memory_bytes, ps.memory_bytes);
  EXPECT_EQ(ps2->generation, 3);

  RegisterRequest trainer;
  trainer.role = "trainer";
  trainer.rank = 1;
  trainer.world = 2;
  auto trainer2 = RegisterRequest::Parse(trainer.ToJson());
  ASSERT_TRUE(trainer2.ok()) << trainer2.status();
  EXPECT_EQ(trainer2->rank, 1);
  EXPECT_EQ(trainer2->world, 2);

  RegisterReply reply{1, 200, 3000, 5000, 77, 9};
  auto reply2 = RegisterReply::Parse(reply.ToJson());
  ASSERT_TRUE(reply2.ok()) << reply2.status();
  EXPECT_EQ(reply2->master_id, 77);
  EXPECT_EQ(reply2->incarnation, 9);

  HeartbeatRequest beat;
  beat.role = "trainer";
  beat.rank = 1;
  beat.incarnation = 9;
  beat.master_id = 77;
  beat.progress = TrainerProgress{40, 0.25, 64, 1000, 2};
  auto beat2 = HeartbeatRequest::Parse(beat.ToJson());
  ASSERT_TRUE(beat2.ok()) << beat2.status();
  ASSERT_TRUE(beat2->progress.has_value());
  EXPECT_EQ(beat2->progress->step, 40);
  EXPECT_EQ(beat2->progress->generation, 2);
  EXPECT_DOUBLE_EQ(beat2->progress->loss, 0.25);

  HeartbeatReply state{"aborted", 4, "a reason", 2};
  auto state2 = HeartbeatReply::Parse(state.ToJson());
  ASSERT_TRUE(state2.ok()) << state2.status();
  EXPECT_EQ(state2->reason, "a reason");
  EXPECT_EQ(state2->checkpoint, 2);

  BarrierRequest barrier{{1, 9}, 25, 2};
  auto barrier2 = BarrierRequest::Parse(barrier.ToJson());
  ASSERT_TRUE(barrier2.ok()) << barrier2.status();
  EXPECT_EQ(barrier2->trainer.incarnation, 9);
  EXPECT_EQ(barrier2->step, 25);

  StartInfo start;
  start.job = json::object({{"name", "j"}});
  start.plan = json::object({{"version", 2}});
  start.ps_endpoints = {"tcp://a:1", "tcp://b:2"};
  start.start_step = 50;
  start.generation = 2;
  auto start2 = StartInfo::Parse(start.ToJson());
  ASSERT_TRUE(start2.ok()) << start2.status();
  EXPECT_EQ(start2->ps_endpoints, start.ps_endpoints);
  EXPECT_EQ(start2->start_step, 50);

  Command remove{"remove_ps", 3, "maintenance"};
  auto remove2 = Command::Parse(remove.ToJson());
  ASSERT_TRUE(remove2.ok()) << remove2.status();
  EXPECT_EQ(remove2->ps, 3);
}

TEST(ControlMessagesTest, MalformedBodiesAreRefusedByName) {
  struct Case {
    json body;
    const char* names;  // what the error must mention
  };
  auto fails = [](const auto& parsed, const char* names, const json& body) {
    ASSERT_FALSE(parsed.ok()) << body.dump();
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << parsed.status();
    EXPECT_NE(parsed.status().message().find(names), std::string::npos) << parsed.status() << " for " << body.dump();
  };
  for (const Case& c : std::vector<Case>{
           {json::array(), "REGISTER"},
           {{{"role", "root"}}, "REGISTER.role"},
           {{{"role", "ps"}}, "REGISTER.endpoint"},
           {{{"role", "ps"}, {"endpoint", ""}}, "REGISTER.endpoint"},
           {{{"role", "ps"}, {"endpoint", "tcp://x:1"}, {"memory_bytes", -5}}, "REGISTER.memory_bytes"},
           {{{"role", "trainer"}, {"rank", "0"}, {"world", 2}}, "REGISTER.rank"},
           {{{"role", "trainer"}, {"rank", 0}, {"world", 0}}, "REGISTER.world"},
           {{{"role", "trainer"}, {"rank", 0}, {"world", 2}, {"sudo", true}}, "REGISTER.sudo"},
       }) {
    fails(RegisterRequest::Parse(c.body), c.names, c.body);
  }
  for (const Case& c : std::vector<Case>{
           {{{"role", "trainer"}, {"rank", 0}}, "HEARTBEAT.incarnation"},
           {{{"role", "trainer"}, {"rank", -1}, {"incarnation", 1}}, "HEARTBEAT.rank"},
           {{{"role", "trainer"}, {"rank", 0}, {"incarnation", 1}, {"progress", 3}}, "HEARTBEAT.progress"},
           {{{"role", "trainer"},
             {"rank", 0},
             {"incarnation", 1},
             {"progress", {{"step", 1}, {"loss", "low"}, {"examples", 1}, {"examples_per_s", 1}, {"generation", 1}}}},
            "HEARTBEAT.progress.loss"},
           {{{"role", "ps"}, {"rank", 0}, {"progress", json::object()}}, "HEARTBEAT"},
           {{{"role", "ps"}, {"rank", 0}, {"stats", "many"}}, "HEARTBEAT.stats"},
       }) {
    fails(HeartbeatRequest::Parse(c.body), c.names, c.body);
  }
  for (const Case& c : std::vector<Case>{
           {{{"rank", 0}, {"step", 5}, {"generation", 1}}, "CHECKPOINT_BARRIER.incarnation"},
           {{{"rank", 0}, {"incarnation", 1}, {"step", -5}, {"generation", 1}}, "CHECKPOINT_BARRIER.step"},
           {{{"rank", 0}, {"incarnation", 1}, {"step", 5}, {"generation", 1.5}}, "CHECKPOINT_BARRIER.generation"},
       }) {
    fails(BarrierRequest::Parse(c.body), c.names, c.body);
  }
  for (const Case& c : std::vector<Case>{
           {{{"command", "shutdown"}}, "COMMAND.command"},
           {{{"command", "remove_ps"}}, "COMMAND.ps"},
           {{{"command", "remove_ps"}, {"ps", "zero"}}, "COMMAND.ps"},
       }) {
    fails(Command::Parse(c.body), c.names, c.body);
  }
  fails(WaitStartRequest::Parse({{"rank", 0}, {"incarnation", 0}, {"generation", 0}}), "WAIT_START.incarnation",
        json());
  fails(ReportDone::Parse({{"rank", 0}, {"incarnation", 1}}), "REPORT_DONE.ok", json());
  fails(StartInfo::Parse({{"job", json::object()}, {"plan", json::object()}, {"ps_endpoints", json::array()},
                          {"start_step", 0}, {"generation", 1}}),
        "ps_endpoints", json());
}

}  // namespace
}  // namespace tessera
