// The master's request handlers against damaged requests: registrations,
// heartbeats, reports and store writes whose JSON has wrong types, values
// out of range, missing keys or broken bytes. Every request is answered and
// the master keeps serving; under the sanitizers no handler reads what it
// should not.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/job_keys.h"
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

// Who may say what to the master (docs/design.md §5.1): each member only
// from the connection it registered from, with its role's key; commands
// only with the operator's key.
TEST(MasterHandlersTest, MembersSpeakOnlyForThemselvesAndOnlyTheOperatorCommands) {
  char tmpl[] = "/tmp/tessera_master_keys_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(JobKeys::Write(dir + "/keys").ok());
  auto keys = [&](Role role) { return JobKeys::Load(dir + "/keys", role).value(); };
  JobConfig job;
  job.cluster.num_ps = 1;
  job.cluster.num_trainers = 2;
  auto m = StartServingMaster(job, keys(Role::kMaster), keys(Role::kTrainer));
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string endpoint = m->master->endpoint();
  // Another client of each role, on connections of their own.
  auto other_trainer = RpcClient::Create(keys(Role::kTrainer)).value();
  auto server = RpcClient::Create(keys(Role::kPs)).value();
  auto operator_client = RpcClient::Create(keys(Role::kOperator)).value();
  const int other_peer = other_trainer->Connect(endpoint, Role::kMaster).value();
  const int server_peer = server->Connect(endpoint, Role::kMaster).value();
  const int operator_peer = operator_client->Connect(endpoint, Role::kMaster).value();
  auto call = [](RpcClient* c, int peer, Opcode op, const json& body) {
    return c->CallSync(peer, EncodeJson(op, body), milliseconds(5000)).status();
  };

  // Trainer 0 registers from the fixture's client.
  auto registered = m->client->CallSync(
      m->peer, EncodeJson(Opcode::kRegister, {{"role", "trainer"}, {"rank", 0}, {"world", 2}}), milliseconds(5000));
  ASSERT_TRUE(registered.ok()) << registered.status();
  const int64_t incarnation = DecodeJson(*registered)->value("incarnation", int64_t{-1});
  const json trainer0 = {{"role", "trainer"}, {"rank", 0}, {"incarnation", incarnation}};
  const json done0 = {{"rank", 0}, {"incarnation", incarnation}, {"ok", true}};

  // Its own connection: served.
  EXPECT_TRUE(call(m->client.get(), m->peer, Opcode::kHeartbeat, trainer0).ok());
  // Another trainer's connection, the same key: refused, and nothing changes.
  EXPECT_EQ(call(other_trainer.get(), other_peer, Opcode::kHeartbeat, trainer0).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(call(other_trainer.get(), other_peer, Opcode::kReportDone, done0).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(call(server.get(), server_peer, Opcode::kReportDone, done0).code(), StatusCode::kPermissionDenied);
  // Only trainers register as trainers, servers as servers.
  EXPECT_EQ(call(server.get(), server_peer, Opcode::kRegister, {{"role", "trainer"}, {"rank", 1}, {"world", 2}}).code(),
            StatusCode::kPermissionDenied);
  const json ps_registration = {{"role", "ps"}, {"endpoint", "tcp://127.0.0.1:1"}, {"host", "h"}, {"pid", 7}};
  EXPECT_EQ(call(other_trainer.get(), other_peer, Opcode::kRegister, ps_registration).code(),
            StatusCode::kPermissionDenied);
  auto ps = server->CallSync(server_peer, EncodeJson(Opcode::kRegister, ps_registration), milliseconds(5000));
  ASSERT_TRUE(ps.ok()) << ps.status();
  auto ps_reply = RegisterReply::Parse(*DecodeJson(*ps));
  ASSERT_TRUE(ps_reply.ok()) << ps_reply.status();
  EXPECT_EQ(ps_reply->master_client.size(), 16u);  // the master's own connection, for the server
  const json ps0 = {{"role", "ps"}, {"rank", ps_reply->rank}};
  EXPECT_TRUE(call(server.get(), server_peer, Opcode::kHeartbeat, ps0).ok());
  EXPECT_EQ(call(m->client.get(), m->peer, Opcode::kHeartbeat, ps0).code(), StatusCode::kPermissionDenied);
  // The rendezvous store is the registered trainers'.
  Message set(Opcode::kStoreSet);
  set.AddString("k");
  set.AddString("v");
  EXPECT_EQ(other_trainer->CallSync(other_peer, std::move(set), milliseconds(5000)).status().code(),
            StatusCode::kPermissionDenied);
  Message own_set(Opcode::kStoreSet);
  own_set.AddString("k");
  own_set.AddString("v");
  EXPECT_TRUE(m->client->CallSync(m->peer, std::move(own_set), milliseconds(5000)).ok());

  // Commands: the operator's key (the job has no checkpoint.dir, so the
  // order itself fails, but it was heard), or a server removing itself.
  const json checkpoint = {{"command", "checkpoint"}};
  EXPECT_EQ(call(operator_client.get(), operator_peer, Opcode::kCommand, checkpoint).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(call(m->client.get(), m->peer, Opcode::kCommand, checkpoint).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(call(server.get(), server_peer, Opcode::kCommand, {{"command", "remove_ps"}, {"ps", ps_reply->rank + 1}})
                .code(),
            StatusCode::kPermissionDenied);
  EXPECT_NE(call(server.get(), server_peer, Opcode::kCommand, {{"command", "remove_ps"}, {"ps", ps_reply->rank}}).code(),
            StatusCode::kPermissionDenied);

  // Trainer 0's own report is taken.
  EXPECT_TRUE(call(m->client.get(), m->peer, Opcode::kReportDone, done0).ok());
  other_trainer.reset();
  server.reset();
  operator_client.reset();
  m->client.reset();
  std::filesystem::remove_all(dir);
}

// STORE_ADD: a counter at the master (torch.distributed's store.add, for
// Python trainers' process groups), the registered trainers' alone.
TEST(MasterHandlersTest, StoreAddCountsAtomicallyAndWakesReaders) {
  JobConfig job;
  job.cluster.num_ps = 1;
  job.cluster.num_trainers = 2;
  auto m = StartServingMaster(job);
  ASSERT_TRUE(m.ok()) << m.status();
  auto call = [&](Message request) { return m->client->CallSync(m->peer, std::move(request), milliseconds(5000)); };
  auto add = [&](const std::string& key, int64_t delta, size_t delta_bytes = sizeof(int64_t)) {
    Message a(Opcode::kStoreAdd);
    a.AddString(key);
    a.frames.emplace_back(&delta, delta_bytes);
    return call(std::move(a));
  };
  // Not yet a registered trainer's connection: refused, nothing counted.
  EXPECT_EQ(add("count", 5).status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(call(EncodeJson(Opcode::kRegister, {{"role", "trainer"}, {"rank", 0}, {"world", 2}})).ok());

  // A reader waiting for the key is answered by the first add.
  Message get(Opcode::kStoreGet);
  get.AddString("count");
  RpcFuture waiting = m->client->Call(m->peer, std::move(get), milliseconds(5000));
  auto first = add("count", 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->frames.at(0).to_string(), "2");
  auto woken = waiting.Wait();
  ASSERT_TRUE(woken.ok()) << woken.status();
  EXPECT_EQ(woken->frames.at(0).to_string(), "2");

  // Adds from threads at once: each counted once.
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) EXPECT_TRUE(add("count", 1).ok());
    });
  }
  for (std::thread& t : threads) t.join();
  auto now = add("count", 0);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->frames.at(0).to_string(), "82");
  auto down = add("count", -100);
  ASSERT_TRUE(down.ok());
  EXPECT_EQ(down->frames.at(0).to_string(), "-18");

  // Bad adds are refused and change nothing: a delta of another size, a
  // key whose value is not a counter, an overflow.
  EXPECT_EQ(add("count", 1, 4).status().code(), StatusCode::kInvalidArgument);
  Message set(Opcode::kStoreSet);
  set.AddString("text");
  set.AddString("not a number");
  ASSERT_TRUE(call(std::move(set)).ok());
  EXPECT_EQ(add("text", 1).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(add("big", std::numeric_limits<int64_t>::max()).ok());
  EXPECT_EQ(add("big", 1).status().code(), StatusCode::kInvalidArgument);
  Message no_delta(Opcode::kStoreAdd);
  no_delta.AddString("count");
  EXPECT_EQ(call(std::move(no_delta)).status().code(), StatusCode::kInvalidArgument);
  auto after = add("count", 0);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->frames.at(0).to_string(), "-18");
  Message text(Opcode::kStoreGet);
  text.AddString("text");
  auto kept = call(std::move(text));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->frames.at(0).to_string(), "not a number");
}

}  // namespace
}  // namespace tessera
