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
  EXPECT_EQ(beat2->progress->epoch, -1);  // not said
  beat.progress->epoch = 3;
  beat.progress->total_steps = 5000;
  auto beat3 = HeartbeatRequest::Parse(beat.ToJson());
  ASSERT_TRUE(beat3.ok()) << beat3.status();
  EXPECT_EQ(beat3->progress->epoch, 3);
  EXPECT_EQ(beat3->progress->total_steps, 5000);

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


TEST(ControlMessagesTest, ServerOrdersReadBack) {
  CreateShardsRequest create;
  create.job = json::object({{"name", "j"}});
  create.plan = json::object({{"version", 3}});
  create.rank = 1;
  create.trainers = {std::string(16, '\x01'), "", std::string(16, '\xfe')};
  create.dump_dir = "/tmp/d";
  create.restore = json::object({{"step", 100}});
  create.keep = true;
  create.staged = 3;
  auto create2 = CreateShardsRequest::Parse(create.ToJson());
  ASSERT_TRUE(create2.ok()) << create2.status();
  EXPECT_EQ(create2->rank, 1);
  EXPECT_EQ(create2->trainers, create.trainers);
  EXPECT_EQ(create2->dump_dir, "/tmp/d");
  EXPECT_EQ(create2->restore, create.restore);
  EXPECT_TRUE(create2->keep);
  EXPECT_EQ(create2->staged, 3);
  // What is left out reads back as its default.
  CreateShardsRequest plain;
  plain.job = create.job;
  plain.plan = create.plan;
  auto plain2 = CreateShardsRequest::Parse(plain.ToJson());
  ASSERT_TRUE(plain2.ok()) << plain2.status();
  EXPECT_EQ(plain2->rank, -1);
  EXPECT_TRUE(plain2->restore.is_null());
  EXPECT_FALSE(plain2->keep);
  EXPECT_EQ(plain2->staged, 0);

  PromoteRequest promote{json::object({{"version", 4}}), 2, {"", std::string(16, 'x')}};
  auto promote2 = PromoteRequest::Parse(promote.ToJson());
  ASSERT_TRUE(promote2.ok()) << promote2.status();
  EXPECT_EQ(promote2->rank, 2);
  EXPECT_EQ(promote2->trainers, promote.trainers);

  auto snapshot = SnapshotRequest::Parse(SnapshotRequest{"/c/ps0", 700}.ToJson());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->dir, "/c/ps0");
  EXPECT_EQ(snapshot->step, 700);
  auto dump = DumpShardsRequest::Parse(DumpShardsRequest{"/d"}.ToJson());
  ASSERT_TRUE(dump.ok()) << dump.status();
  EXPECT_EQ(dump->dir, "/d");
  auto abort = AbortRequest::Parse(AbortRequest{"why"}.ToJson());
  ASSERT_TRUE(abort.ok()) << abort.status();
  EXPECT_EQ(abort->reason, "why");
  EXPECT_EQ(AbortRequest::Parse(json::object())->reason, "job aborted by the master");

  MigrateRequest migrate;
  migrate.phase = MigratePhase::kPrecopy;
  migrate.job = create.job;
  migrate.plan = create.plan;
  migrate.from_version = 2;
  migrate.from_plan = create.plan;
  auto migrate2 = MigrateRequest::Parse(migrate.ToJson());
  ASSERT_TRUE(migrate2.ok()) << migrate2.status();
  EXPECT_EQ(migrate2->phase, MigratePhase::kPrecopy);
  FetchRowsRequest fetch;
  fetch.version = 2;
  fetch.row_end = 10;
  fetch.max_rows = 5;
  fetch.changed = true;
  auto fetch2 = FetchRowsRequest::Parse(fetch.ToJson());
  ASSERT_TRUE(fetch2.ok()) << fetch2.status();
  EXPECT_TRUE(fetch2->changed);
}

TEST(ControlMessagesTest, MalformedServerOrdersAreRefusedByName) {
  auto fails = [](const auto& parsed, const char* names) {
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << parsed.status();
    EXPECT_NE(parsed.status().message().find(names), std::string::npos) << parsed.status();
  };
  const json job = json::object(), plan = json::object();
  fails(CreateShardsRequest::Parse({{"plan", plan}}), "CREATE_SHARDS.job");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", 3}}), "CREATE_SHARDS.plan");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", plan}, {"rank", -2}}), "CREATE_SHARDS.rank");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", plan}, {"trainers", "all"}}), "CREATE_SHARDS.trainers");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", plan}, {"trainers", {"zz"}}}), "CREATE_SHARDS.trainers");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", plan}, {"restore", "/etc"}}), "CREATE_SHARDS.restore");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", plan}, {"keep", 1}}), "CREATE_SHARDS.keep");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", plan}, {"staged", 0}}), "CREATE_SHARDS.staged");
  fails(CreateShardsRequest::Parse({{"job", job}, {"plan", plan}, {"format", "c:"}}), "CREATE_SHARDS.format");
  fails(PromoteRequest::Parse({{"plan", plan}}), "PROMOTE.rank");
  fails(PromoteRequest::Parse({{"plan", plan}, {"rank", 0}, {"trainers", {1}}}), "PROMOTE.trainers");
  fails(SnapshotRequest::Parse({{"dir", "/c"}, {"step", -1}}), "SNAPSHOT.step");
  fails(SnapshotRequest::Parse({{"dir", 5}, {"step", 1}}), "SNAPSHOT.dir");
  fails(SnapshotRequest::Parse({{"step", 1}}), "SNAPSHOT.dir");
  fails(DumpShardsRequest::Parse({{"dir", "/d"}, {"also", "/e"}}), "DUMP_SHARDS.also");
  fails(DumpShardsRequest::Parse(json::array()), "DUMP_SHARDS");
  fails(AbortRequest::Parse({{"reason", 7}}), "ABORT.reason");
  json migrate = {{"phase", "later"}};
  fails(MigrateRequest::Parse(migrate), "phase");
}

}  // namespace
}  // namespace tessera
