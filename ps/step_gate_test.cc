// StepGate alone, no sockets: exactly once, the sync step barrier and its
// parked lookups, async, a resumed job's start step, Reset and Abort
// answering parked lookups, WaitApplied, and trainers on threads.
#include "ps/step_gate.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tessera {
namespace {

using std::chrono::milliseconds;

// Payloads name their pusher; lookups name their asker.
using Gate = StepGate<std::string, std::string>;

// Accepts a push that must not complete its step.
void PushParks(Gate* gate, uint32_t trainer, uint64_t step) {
  auto ready = gate->OnPush(trainer, step, "t" + std::to_string(trainer));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(ready->empty());
}

// Runs one whole sync step: every trainer pushes, the last one applies.
Gate::Released RunStep(Gate* gate, int world, uint64_t step) {
  for (int t = 0; t + 1 < world; ++t) PushParks(gate, t, step);
  auto ready = gate->OnPush(world - 1, step, "last");
  EXPECT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready.ok() ? ready->size() : 0u, static_cast<size_t>(world));
  return gate->Applied(step);
}

LookupAction Lookup(Gate* gate, uint64_t step, std::string who, Status* refusal = nullptr, uint32_t trainer = 0) {
  Status ignored;
  return gate->OnLookup(trainer, step, &who, refusal ? refusal : &ignored);
}

TEST(StepGateTest, RetriedPushIsAlreadyApplied) {
  for (Consistency mode : {Consistency::kSync, Consistency::kAsync}) {
    Gate gate;
    gate.Reset(mode, 2, 0);
    ASSERT_TRUE(gate.CheckPush(0, 0).ok());
    ASSERT_TRUE(gate.OnPush(0, 0, "first").ok());
    // Parked (sync) or applied (async): either way the retry is not taken.
    EXPECT_EQ(gate.CheckPush(0, 0).code(), StatusCode::kAlreadyApplied) << ConsistencyName(mode);
    EXPECT_EQ(gate.OnPush(0, 0, "retry").status().code(), StatusCode::kAlreadyApplied);
    // The other trainer's push of the step is its own.
    EXPECT_TRUE(gate.CheckPush(1, 0).ok());
    EXPECT_EQ(gate.CheckPush(2, 0).code(), StatusCode::kInvalidArgument);
  }
}

TEST(StepGateTest, SyncStepCompletesWithEveryPushInRankOrder) {
  // Move-only payloads: the gate only moves them.
  StepGate<std::unique_ptr<int>, int> gate;
  gate.Reset(Consistency::kSync, 3, 0);
  for (uint32_t trainer : {2u, 0u}) {
    auto ready = gate.OnPush(trainer, 0, std::make_unique<int>(static_cast<int>(trainer)));
    ASSERT_TRUE(ready.ok()) << ready.status();
    EXPECT_TRUE(ready->empty());
  }
  EXPECT_EQ(gate.applied_steps(), 0u);
  auto ready = gate.OnPush(1, 0, std::make_unique<int>(1));
  ASSERT_TRUE(ready.ok()) << ready.status();
  ASSERT_EQ(ready->size(), 3u);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(*(*ready)[rank], rank);
  // Handed back once: until applied, the step takes no more pushes.
  EXPECT_EQ(gate.OnPush(1, 0, nullptr).status().code(), StatusCode::kAlreadyApplied);
  EXPECT_EQ(gate.OnPush(0, 1, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(gate.Applied(0).lookups.empty());
  EXPECT_EQ(gate.applied_steps(), 1u);
}

TEST(StepGateTest, SyncLookupOfNextStepParksUntilTheStepIsApplied) {
  Gate gate;
  gate.Reset(Consistency::kSync, 2, 0);
  EXPECT_EQ(Lookup(&gate, 0, "t0 step 0"), LookupAction::kServe);
  PushParks(&gate, 0, 0);
  EXPECT_EQ(Lookup(&gate, 1, "t0 step 1"), LookupAction::kPark);
  // Two steps ahead of the applied ones is more than a trainer can be.
  Status refusal;
  EXPECT_EQ(Lookup(&gate, 2, "t0 step 2", &refusal), LookupAction::kRefuse);
  EXPECT_EQ(refusal.code(), StatusCode::kInvalidArgument) << refusal;
  EXPECT_EQ(Lookup(&gate, 0, "t1 step 0"), LookupAction::kServe);

  std::string served = "untouched";
  EXPECT_EQ(gate.OnLookup(0, 0, &served, &refusal), LookupAction::kServe);
  EXPECT_EQ(served, "untouched");

  auto ready = gate.OnPush(1, 0, "t1");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(*ready, (std::vector<std::string>{"t0", "t1"}));
  // Still applying step 0: step 1 still waits.
  EXPECT_EQ(Lookup(&gate, 1, "t1 step 1"), LookupAction::kPark);
  Gate::Released released = gate.Applied(0);
  EXPECT_TRUE(released.status.ok());
  EXPECT_EQ(released.lookups, (std::vector<std::string>{"t0 step 1", "t1 step 1"}));
  EXPECT_EQ(Lookup(&gate, 1, "late"), LookupAction::kServe);
  EXPECT_EQ(Lookup(&gate, 2, "next"), LookupAction::kPark);
}

TEST(StepGateTest, AsyncAppliesEachPushOnArrival) {
  Gate gate;
  gate.Reset(Consistency::kAsync, 2, 0);
  for (uint64_t step : {0u, 5u, 60u}) EXPECT_EQ(Lookup(&gate, step, "any"), LookupAction::kServe);
  auto ready = gate.OnPush(1, 3, "t1 step 3");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(*ready, std::vector<std::string>{"t1 step 3"});
  // Out of step order, and ahead of the other trainer: applied all the same.
  EXPECT_TRUE(gate.OnPush(0, 7, "t0 step 7").ok());
  EXPECT_EQ(gate.OnPush(1, 3, "retry").status().code(), StatusCode::kAlreadyApplied);
  EXPECT_TRUE(gate.WaitApplied(50, milliseconds(0)).ok());
}

// Async prefetch: a lookup whose trainer's push of the step before is still
// to come (the server knows; the gate is told) waits for that push alone.
TEST(StepGateTest, AsyncLookupWaitsForItsTrainersOwnPushOnly) {
  Gate gate;
  gate.Reset(Consistency::kAsync, 2, 0);
  Status refusal;
  std::string t0 = "t0 step 1";
  EXPECT_EQ(gate.OnLookup(0, 1, &t0, &refusal, /*own_push_pending=*/true), LookupAction::kPark);
  std::string t1 = "t1 step 1";
  EXPECT_EQ(gate.OnLookup(1, 1, &t1, &refusal, true), LookupAction::kPark);
  std::string t1_no_wait = "t1 step 4";
  EXPECT_EQ(gate.OnLookup(1, 4, &t1_no_wait, &refusal, false), LookupAction::kServe);
  EXPECT_EQ(t1_no_wait, "t1 step 4");  // served: the gate did not take it
  // Another trainer's push, or another step's, releases nothing.
  EXPECT_TRUE(gate.OwnPushSettled(2, 0).lookups.empty());
  EXPECT_TRUE(gate.OwnPushSettled(0, 1).lookups.empty());
  Gate::Released released = gate.OwnPushSettled(1, 0);
  EXPECT_TRUE(released.status.ok());
  EXPECT_EQ(released.lookups, std::vector<std::string>{"t1 step 1"});
  EXPECT_TRUE(gate.OwnPushSettled(1, 0).lookups.empty());  // handed back once
  EXPECT_EQ(gate.OwnPushSettled(0, 0).lookups, std::vector<std::string>{"t0 step 1"});
  // A lookup far ahead is refused whether or not it would wait.
  std::string far = "far";
  EXPECT_EQ(gate.OnLookup(0, 1000, &far, &refusal, true), LookupAction::kRefuse);
  EXPECT_EQ(refusal.code(), StatusCode::kInvalidArgument) << refusal;
  // Sync mode ignores the flag: its own rule parks step t+1 for every trainer.
  gate.Reset(Consistency::kSync, 2, 0);
  std::string now = "now";
  EXPECT_EQ(gate.OnLookup(0, 0, &now, &refusal, true), LookupAction::kServe);
}

// A client that keeps sending lookups that must wait fills no memory: a few
// park, the rest are refused; the other trainers' are not affected.
TEST(StepGateTest, ParkedLookupsPerTrainerAreBounded) {
  for (Consistency mode : {Consistency::kSync, Consistency::kAsync}) {
    Gate gate;
    gate.Reset(mode, 2, 0);
    Status refusal;
    for (size_t i = 0; i < StepGateBase::kMaxParkedPerTrainer; ++i) {
      std::string l = "retry " + std::to_string(i);
      EXPECT_EQ(gate.OnLookup(0, 1, &l, &refusal, true), LookupAction::kPark) << i;
    }
    std::string more = "one more";
    EXPECT_EQ(gate.OnLookup(0, 1, &more, &refusal, true), LookupAction::kRefuse);
    EXPECT_EQ(refusal.code(), StatusCode::kResourceExhausted) << refusal;
    EXPECT_NE(refusal.message().find("trainer 0"), std::string::npos) << refusal;
    std::string other = "t1";
    EXPECT_EQ(gate.OnLookup(1, 1, &other, &refusal, true), LookupAction::kPark) << ConsistencyName(mode);
    // An abort hands every parked lookup back, to be answered.
    EXPECT_EQ(gate.Abort(Status::OK()).lookups.size(), StepGateBase::kMaxParkedPerTrainer + 1);
  }
}

// A trainer's own step far ahead (a forged or broken client on its
// connection) is refused: accepted, it would make the trainer's real pushes
// ALREADY_APPLIED for good. Within the bound, a step is taken as it comes.
TEST(StepGateTest, AsyncRefusesAStepFarPastTheTrainersLastPush) {
  Gate gate;
  gate.Reset(Consistency::kAsync, 2, 10);  // resumed at step 10: last push 9
  const uint64_t far = 10 + StepGateBase::kMaxStepsAhead;
  Status refusal;
  EXPECT_EQ(Lookup(&gate, far - 1, "edge", &refusal), LookupAction::kServe);
  EXPECT_EQ(Lookup(&gate, far, "far", &refusal), LookupAction::kRefuse);
  EXPECT_EQ(refusal.code(), StatusCode::kInvalidArgument) << refusal;
  EXPECT_EQ(Lookup(&gate, uint64_t{1} << 40, "forged", &refusal), LookupAction::kRefuse);
  EXPECT_EQ(Lookup(&gate, uint64_t{1} << 63, "overflow", &refusal), LookupAction::kRefuse);
  EXPECT_EQ(gate.OnPush(0, uint64_t{1} << 40, "forged").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gate.OnPush(0, far, "far").status().code(), StatusCode::kInvalidArgument);
  // Nothing moved: the trainer's next push is accepted, and moves the bound.
  EXPECT_TRUE(gate.OnPush(0, 10, "t0 step 10").ok());
  EXPECT_EQ(Lookup(&gate, far, "now within", &refusal), LookupAction::kServe);
  // The other trainer's bound is its own.
  EXPECT_EQ(Lookup(&gate, far, "t1", &refusal, 1), LookupAction::kRefuse);
  // Sync mode has its own, tighter rule (one step ahead of the applied ones).
  gate.Reset(Consistency::kSync, 2, 0);
  EXPECT_EQ(Lookup(&gate, 2, "sync", &refusal), LookupAction::kRefuse);
}

TEST(StepGateTest, ResumedJobStartsAtItsStep) {
  Gate gate;
  gate.Reset(Consistency::kSync, 2, 5);
  EXPECT_EQ(gate.applied_steps(), 5u);
  EXPECT_EQ(gate.CheckPush(0, 4).code(), StatusCode::kAlreadyApplied);
  EXPECT_EQ(Lookup(&gate, 5, "now"), LookupAction::kServe);
  EXPECT_EQ(Lookup(&gate, 6, "waits"), LookupAction::kPark);
  EXPECT_EQ(Lookup(&gate, 7, "too far"), LookupAction::kRefuse);
  EXPECT_TRUE(gate.WaitApplied(5, milliseconds(0)).ok());
  Gate::Released released = RunStep(&gate, 2, 5);
  EXPECT_EQ(released.lookups, std::vector<std::string>{"waits"});
  EXPECT_EQ(gate.applied_steps(), 6u);
}

TEST(StepGateTest, ResetAnswersParkedLookupsPlanChanged) {
  Gate gate;
  gate.Reset(Consistency::kSync, 2, 0);
  PushParks(&gate, 0, 0);
  EXPECT_EQ(Lookup(&gate, 1, "old plan"), LookupAction::kPark);
  Gate::Released released = gate.Reset(Consistency::kSync, 2, 0);
  EXPECT_EQ(released.status.code(), StatusCode::kPlanChanged) << released.status;
  EXPECT_EQ(released.lookups, std::vector<std::string>{"old plan"});
  // The new job starts afresh: the old plan's parked push is gone.
  EXPECT_TRUE(gate.CheckPush(0, 0).ok());
  EXPECT_TRUE(RunStep(&gate, 2, 0).lookups.empty());
}

TEST(StepGateTest, AbortAnswersParkedLookupsAndRefusesUntilReset) {
  Gate gate;
  gate.Reset(Consistency::kSync, 2, 0);
  PushParks(&gate, 0, 0);
  EXPECT_EQ(Lookup(&gate, 1, "waiting"), LookupAction::kPark);
  const Status died = Status::Aborted("trainer 1 died");
  Gate::Released released = gate.Abort(died);
  EXPECT_EQ(released.status, died);
  EXPECT_EQ(released.lookups, std::vector<std::string>{"waiting"});
  EXPECT_EQ(gate.failure(), died);

  Status refusal;
  EXPECT_EQ(Lookup(&gate, 0, "after", &refusal), LookupAction::kRefuse);
  EXPECT_EQ(refusal, died);
  EXPECT_EQ(gate.CheckPush(1, 0), died);
  EXPECT_EQ(gate.OnPush(1, 0, "t1").status(), died);
  EXPECT_EQ(gate.WaitApplied(1, milliseconds(0)), died);
  // The first failure stays; a later Abort's lookups get its own reason.
  EXPECT_EQ(gate.Abort(Status::OK()).status.code(), StatusCode::kAborted);
  EXPECT_EQ(gate.failure(), died);

  gate.Reset(Consistency::kSync, 2, 0);
  EXPECT_TRUE(gate.failure().ok());
  EXPECT_EQ(Lookup(&gate, 0, "new job"), LookupAction::kServe);
}

TEST(StepGateTest, WaitAppliedTimesOutAndWakes) {
  Gate gate;
  gate.Reset(Consistency::kSync, 2, 0);
  EXPECT_TRUE(gate.WaitApplied(0, milliseconds(0)).ok());
  EXPECT_EQ(gate.WaitApplied(1, milliseconds(20)).code(), StatusCode::kDeadlineExceeded);

  auto applied = std::async(std::launch::async, [&] { return gate.WaitApplied(1, std::chrono::seconds(30)); });
  PushParks(&gate, 1, 0);
  EXPECT_EQ(applied.wait_for(milliseconds(50)), std::future_status::timeout);
  auto ready = gate.OnPush(0, 0, "t0");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(applied.wait_for(milliseconds(50)), std::future_status::timeout);  // complete, not yet applied
  gate.Applied(0);
  EXPECT_TRUE(applied.get().ok());

  // An abort wakes a waiter at once.
  auto aborted = std::async(std::launch::async, [&] { return gate.WaitApplied(2, std::chrono::seconds(30)); });
  EXPECT_EQ(aborted.wait_for(milliseconds(50)), std::future_status::timeout);
  gate.Abort(Status::Aborted("master ended the job"));
  ASSERT_EQ(aborted.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(aborted.get().code(), StatusCode::kAborted);
}

// Trainers on threads, as the server's workers see them: each looks up a
// step (waiting while parked), pushes it, and the push that completes the
// step applies it and serves the lookups it releases.
TEST(StepGateTest, ConcurrentTrainersApplyEveryStepOnceInRankOrder) {
  constexpr int kWorld = 4;
  constexpr uint64_t kSteps = 300;
  StepGate<int, std::promise<Status>> gate;
  gate.Reset(Consistency::kSync, kWorld, 0);
  std::array<std::atomic<int>, kSteps> applied{};
  auto trainer = [&](int rank) {
    for (uint64_t step = 0; step < kSteps; ++step) {
      std::promise<Status> lookup;
      std::future<Status> served = lookup.get_future();
      Status refusal;
      switch (gate.OnLookup(static_cast<uint32_t>(rank), step, &lookup, &refusal)) {
        case LookupAction::kServe:
          break;
        case LookupAction::kPark:
          ASSERT_EQ(served.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "step " << step;
          ASSERT_TRUE(served.get().ok());
          break;
        case LookupAction::kRefuse:
          FAIL() << "trainer " << rank << " step " << step << ": " << refusal;
      }
      auto ready = gate.OnPush(rank, step, rank);
      ASSERT_TRUE(ready.ok()) << ready.status();
      if (ready->empty()) continue;
      ASSERT_EQ(ready->size(), static_cast<size_t>(kWorld));
      for (int r = 0; r < kWorld; ++r) EXPECT_EQ((*ready)[r], r);
      ++applied[step];
      auto released = gate.Applied(step);
      for (std::promise<Status>& p : released.lookups) p.set_value(released.status);
    }
  };
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) threads.emplace_back(trainer, rank);
  for (std::thread& t : threads) t.join();
  for (uint64_t step = 0; step < kSteps; ++step) EXPECT_EQ(applied[step].load(), 1) << "step " << step;
  EXPECT_EQ(gate.applied_steps(), kSteps);
}

}  // namespace
}  // namespace tessera
