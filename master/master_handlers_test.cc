// The master's request handlers against damaged requests: registrations,
// heartbeats, reports and store writes whose JSON has wrong types, values
// out of range, missing keys or broken bytes. Every request is answered and
// the master keeps serving; under the sanitizers no handler reads what it
// should not.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/messages.h"
#include "master/master_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// Values of every JSON type, and numbers at and past the ends of the ranges
// the handlers read them into.
json OddValue(std::mt19937_64* rng) {
  const json values[] = {nullptr, -1, 0, 2147483648LL, -2147483649LL, 9223372036854775807LL, 1e300, -1e300, 0.5,
                         "x", "", json::array(), json::array({1, 2}), json::object(), true};
  return values[(*rng)() % std::size(values)];
}

// Damages one part of `body`: a value replaced with an odd one (at the top
// or one level down), or a key removed.
void DamageJson(json* body, std::mt19937_64* rng) {
  json* target = body;
  if (target->empty()) return;
  auto it = std::next(target->begin(), static_cast<std::ptrdiff_t>((*rng)() % target->size()));
  if (it->is_object() && !it->empty() && (*rng)() % 2 == 0) {
    target = &*it;
    it = std::next(target->begin(), static_cast<std::ptrdiff_t>((*rng)() % target->size()));
  }
  if ((*rng)() % 4 == 0) {
    target->erase(it.key());
  } else {
    *it = OddValue(rng);
  }
}

// The message with its JSON frame's bytes flipped, cut or grown, or a frame
// added or dropped.
void DamageFrames(Message* m, std::mt19937_64* rng) {
  std::string b = m->frames.empty() ? std::string() : m->frames[0].to_string();
  switch ((*rng)() % 5) {
    case 0:
      for (int k = 0; k < 3 && !b.empty(); ++k) b[(*rng)() % b.size()] ^= static_cast<char>(1 + (*rng)() % 255);
      break;
    case 1:
      b.resize((*rng)() % (b.size() + 1));
      break;
    case 2:
      b += "\xff\x00{";
      break;
    case 3:
      m->frames.emplace_back(b.data(), b.size());
      return;
    default:
      m->frames.clear();
      return;
  }
  if (!m->frames.empty()) m->frames[0] = zmq::message_t(b.data(), b.size());
}

TEST(MasterHandlersTest, DamagedRequestsAreAnsweredAndTheMasterKeepsServing) {
  JobConfig job;
  job.cluster.num_ps = 2;
  job.cluster.num_trainers = 2;
  auto m = StartServingMaster(job);
  ASSERT_TRUE(m.ok()) << m.status();
  auto call = [&](Message request) { return m->client->CallSync(m->peer, std::move(request), milliseconds(5000)); };

  // A body the handler throws on (no role) is answered once, as an error:
  // it used to be answered twice, which stopped the master.
  auto no_role = call(EncodeJson(Opcode::kRegister, {{"rank", 0}}));
  EXPECT_EQ(no_role.status().code(), StatusCode::kInvalidArgument) << no_role.status();

  // Trainer 0 is a member, so heartbeats and reports reach their handlers'
  // depths; trainer 1 and the servers are left for damaged registrations.
  auto registered = call(EncodeJson(Opcode::kRegister, {{"role", "trainer"}, {"rank", 0}, {"world", 2}}));
  ASSERT_TRUE(registered.ok()) << registered.status();
  auto registration = DecodeJson(*registered);
  ASSERT_TRUE(registration.ok()) << registration.status();
  const int64_t incarnation = registration->value("incarnation", int64_t{-1});
  ASSERT_GT(incarnation, 0);

  // Requests that are answered at once (a start or a store read would wait).
  const std::vector<std::pair<Opcode, json>> valid = {
      {Opcode::kRegister, {{"role", "ps"}, {"endpoint", "tcp://127.0.0.1:1"}, {"host", "h"}, {"pid", 7},
                           {"memory_bytes", 1024}}},
      {Opcode::kRegister, {{"role", "trainer"}, {"rank", 1}, {"world", 2}, {"host", "h"}, {"pid", 8}}},
      {Opcode::kHeartbeat, {{"role", "trainer"}, {"rank", 0}, {"incarnation", incarnation},
                            {"progress", {{"step", 3}, {"loss", 0.5}, {"examples", 64}, {"examples_per_s", 1e4}, {"generation", 0}}}}},
      {Opcode::kHeartbeat, {{"role", "ps"}, {"rank", 0}, {"stats", {{"lookups", 1}}}}},
      {Opcode::kReportDone, {{"rank", 0}, {"incarnation", incarnation}, {"ok", true}}},
      {Opcode::kCommand, {{"command", "checkpoint"}}},
  };
  std::mt19937_64 rng(20261201);
  std::map<StatusCode, int> codes;
  const int kRequests = 2000;
  for (int i = 0; i < kRequests; ++i) {
    const auto& [op, body] = valid[rng() % valid.size()];
    json damaged = body;
    const bool json_level = rng() % 3 != 0;
    if (json_level) DamageJson(&damaged, &rng);
    Message request = EncodeJson(op, damaged);
    if (!json_level) DamageFrames(&request, &rng);
    StatusOr<Message> reply = call(std::move(request));
    const StatusCode code = reply.status().code();
    ++codes[code];
    ASSERT_NE(code, StatusCode::kDeadlineExceeded) << "request " << i << " (" << OpcodeName(op) << " "
                                                    << damaged.dump() << ") was not answered";
  }
  for (const auto& [code, n] : codes) std::cout << "[ info     ] " << n << " x " << StatusCodeName(code) << "\n";
  EXPECT_GT(codes[StatusCode::kInvalidArgument], kRequests / 10);

  // Still serving: the rendezvous store and trainer 0's heartbeat.
  Message set(Opcode::kStoreSet);
  set.AddString("after/key");
  set.AddString("value");
  ASSERT_TRUE(call(std::move(set)).ok());
  Message get(Opcode::kStoreGet);
  get.AddString("after/key");
  auto got = call(std::move(get));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->frames.size(), 1u);
  EXPECT_EQ(got->frames[0].to_string(), "value");
  // Without its registration, or with another's, a trainer is refused.
  auto anonymous = call(EncodeJson(Opcode::kHeartbeat, {{"role", "trainer"}, {"rank", 0}}));
  EXPECT_EQ(anonymous.status().code(), StatusCode::kInvalidArgument) << anonymous.status();
  auto impostor = call(EncodeJson(Opcode::kHeartbeat, {{"role", "trainer"}, {"rank", 0}, {"incarnation", incarnation + 1}}));
  EXPECT_EQ(impostor.status().code(), StatusCode::kNotFound) << impostor.status();
  auto beat = call(EncodeJson(Opcode::kHeartbeat, {{"role", "trainer"}, {"rank", 0}, {"incarnation", incarnation}}));
  ASSERT_TRUE(beat.ok()) << beat.status();
  auto state = DecodeJson(*beat);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->value("state", ""), "waiting");
}

}  // namespace
}  // namespace tessera
