// Forged and stray messages against a running synchronous job (real
// processes on 127.0.0.1), as a stranger on the same machine would send
// them: every one must fail for its sender and change nothing, so the job
// ends with the parameters and losses of an undisturbed run, bit for bit.
//
// The forgers are: a client with no keys, one with another job's keys, and
// "insiders" holding the job's own keys (a trainer's, a server's, the
// master's, the operator's) on connections that are not the members' own. With
// --insecure there are no keys: any plain client is an insider, and only the
// binding of each member to the connection it registered from stands.
//
// The same forgers also send damaged copies of their messages (bytes
// flipped, frames cut, dropped, added or replaced, another message's
// opcode, an error status on a request), and raw bytes go to every port
// without any handshake: the job must not notice them either. Damage is
// drawn from TESSERA_TEST_SEED, which the test prints.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "common/control_messages.h"
#include "common/job_config.h"
#include "common/job_keys.h"
#include "common/messages.h"
#include "common/rpc_client.h"
#include "tests/integration/dump_reader.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/test_jobs.h"
#include "tests/support/raw_tcp.h"

namespace tessera {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr int64_t kSteps = 600;

json Job() {
  json job = testing::StatefulSyncJob("security-test", "", kSteps, 0);
  job["cluster"] = {{"num_ps", 2}, {"num_trainers", 2}};
  return job;
}

struct Outcome {
  testing::Dump dump;
  std::vector<double> losses;  // trainer 0's, by step
};

std::vector<double> Losses(testing::LocalCluster& c, int rank) {
  std::vector<double> losses;
  for (const json& m : c.Metrics(rank)) losses.push_back(m.at("loss").get<double>());
  return losses;
}

Outcome Finish(testing::LocalCluster& c) {
  Outcome o;
  EXPECT_EQ(c.Wait("master", milliseconds(120000)), 0) << c.Log("master");
  for (const char* t : {"trainer0", "trainer1"}) EXPECT_EQ(c.Wait(t, milliseconds(20000)), 0) << c.Log(t);
  auto job = ParseJobConfigJson(Job(), "");
  auto d = testing::ReadDump(c.dir() + "/dump", *job);
  EXPECT_TRUE(d.ok()) << d.status();
  if (d.ok()) o.dump = std::move(*d);
  o.losses = Losses(c, 0);
  return o;
}

// The undisturbed run (with keys; the keys change no arithmetic), once.
const Outcome& Undisturbed() {
  static const Outcome* outcome = [] {
    testing::LocalCluster c("security_undisturbed");
    EXPECT_TRUE(c.StartJob(Job(), 2, 2, {"--dump_dir", c.dir() + "/dump"}).ok());
    return new Outcome(Finish(c));
  }();
  return *outcome;
}

// The servers' addresses, from the master's log.
std::vector<std::string> ServerEndpoints(testing::LocalCluster& c) {
  std::vector<std::string> endpoints;
  const std::string log = c.Log("master");
  const std::string mark = " registered: ";
  for (size_t at = log.find(mark); at != std::string::npos; at = log.find(mark, at + 1)) {
    const size_t start = at + mark.size();
    if (log.compare(start, 6, "tcp://") != 0) continue;
    endpoints.push_back(log.substr(start, log.find(' ', start) - start));
  }
  return endpoints;
}

std::string MasterEndpoint(testing::LocalCluster& c) {
  std::ifstream in(c.dir() + "/master.endpoint");
  std::string endpoint;
  in >> endpoint;
  return endpoint;
}

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string bytes(n, '\0');
  for (char& b : bytes) b = static_cast<char>(rng());
  return bytes;
}

constexpr std::string_view kStatusDamage = "a request with the status ";

// A damaged copy of `m`, and in *how what was done to it. The opcodes it
// may swap in are those the forgers send (never REGISTER: joining is a
// member's right, not a forgery).
Message Damage(const Message& m, std::mt19937_64& rng, std::string* how) {
  static constexpr Opcode kOps[] = {
      Opcode::kInvalid,      Opcode::kHeartbeat,  Opcode::kWaitStart,    Opcode::kReportDone,
      Opcode::kStoreSet,     Opcode::kStoreGet,   Opcode::kCheckpointBarrier, Opcode::kCreateShards,
      Opcode::kShutdown,     Opcode::kDumpShards, Opcode::kAbort,        Opcode::kServerStats,
      Opcode::kSnapshot,     Opcode::kPromote,    Opcode::kMigrate,      Opcode::kFetchRows,
      Opcode::kLookup,       Opcode::kPushGradients, static_cast<Opcode>(999)};
  Message d;
  d.header = m.header;
  for (const auto& f : m.frames) d.AddBytes(f.data(), f.size());
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  // A frame with bytes in it, or none (-1).
  auto some_frame = [&]() -> int {
    std::vector<int> full;
    for (size_t i = 0; i < d.frames.size(); ++i) {
      if (d.frames[i].size() > 0) full.push_back(static_cast<int>(i));
    }
    return full.empty() ? -1 : full[pick(full.size())];
  };
  auto replace = [&](size_t i, const std::string& bytes) { d.frames[i] = zmq::message_t(bytes.data(), bytes.size()); };
  const int f = some_frame();
  switch (f < 0 ? 3 : pick(8)) {
    case 0: {  // a few bytes flipped
      std::string bytes = d.frames[f].to_string();
      const size_t flips = 1 + pick(8);
      for (size_t k = 0; k < flips; ++k) bytes[pick(bytes.size())] ^= static_cast<char>(1 + pick(255));
      replace(f, bytes);
      *how = "bytes flipped in frame " + std::to_string(f);
      break;
    }
    case 1: {  // cut short
      const size_t keep = pick(d.frames[f].size());
      replace(f, d.frames[f].to_string().substr(0, keep));
      *how = "frame " + std::to_string(f) + " cut to " + std::to_string(keep) + " bytes";
      break;
    }
    case 2:  // a frame dropped
      d.frames.erase(d.frames.begin() + f);
      *how = "frame " + std::to_string(f) + " dropped";
      break;
    case 3:  // a frame of random bytes added
      d.AddString(RandomBytes(rng, pick(65)));
      *how = "a random frame added";
      break;
    case 4:  // grown by a few bytes: no longer whole elements
      replace(f, d.frames[f].to_string() + RandomBytes(rng, 1 + pick(7)));
      *how = "frame " + std::to_string(f) + " grown";
      break;
    case 5:  // the same size, every byte random
      replace(f, RandomBytes(rng, d.frames[f].size()));
      *how = "frame " + std::to_string(f) + " random";
      break;
    case 6:
      d.header.op = kOps[pick(std::size(kOps))];
      *how = std::string("sent as ") + OpcodeName(d.header.op);
      break;
    default:
      d.header.status = static_cast<StatusCode>(1 + pick(kMaxStatusCode));
      *how = std::string(kStatusDamage) + StatusCodeName(d.header.status);
      break;
  }
  return d;
}

// Raw bytes to `endpoint` ("tcp://host:port") on a plain TCP connection, no
// ZeroMQ handshake: what a port scanner or a confused client sends. True if
// the connection was made.
bool SendRawBytes(const std::string& endpoint, const std::string& bytes) {
  const size_t colon = endpoint.rfind(':');
  const int port = std::stoi(endpoint.substr(colon + 1));
  const int fd = testing::SilentConnection("0.0.0.0", endpoint.substr(6, colon - 6), port);  // any source address
  if (fd < 0) return false;
  (void)!write(fd, bytes.data(), bytes.size());
  close(fd);
  return true;
}

// What one forger sent and what came back.
struct Forgery {
  std::string what;
  Status result;
  std::string damage;  // what was done to it; empty for a forgery as built
};

class Forger {
 public:
  // keys_dir empty: a plain client. `deadline` bounds each call: a client
  // that cannot connect waits all of it, and a round lasts as long as its
  // slowest call, so such a forger gets a short one to leave the rounds
  // frequent enough that several land while the job trains.
  Forger(std::string name, const std::string& keys_dir, Role role, uint64_t seed,
         milliseconds deadline = milliseconds(1500))
      : name_(std::move(name)), deadline_(deadline), rng_(seed) {
    std::shared_ptr<const JobKeys> keys;
    if (!keys_dir.empty()) keys = JobKeys::Load(keys_dir, role).value();
    client_ = RpcClient::Create(keys).value();
  }

  // Sends every message it knows to the master at `master` and the servers
  // at `servers`, all at once; `with_commands` adds operator commands, and
  // `damaged` damaged copies of each message.
  std::vector<Forgery> Fire(const std::string& master, const std::vector<std::string>& servers, bool with_commands,
                            int damaged = 0) {
    struct Sent {
      std::string what;
      RpcFuture call;
      std::string damage;
    };
    std::vector<Sent> calls;
    const int m = Peer(master, Role::kMaster);
    auto send = [&](int peer, const std::string& what, Message msg) {
      for (int k = 0; k < damaged; ++k) {
        std::string how;
        Message d = Damage(msg, rng_, &how);
        calls.push_back({name_ + ": " + what + ", damaged: " + how, client_->Call(peer, std::move(d), deadline_), how});
      }
      calls.push_back({name_ + ": " + what, client_->Call(peer, std::move(msg), deadline_), ""});
    };
    for (int rank = 0; rank < 2; ++rank) {
      for (int64_t incarnation = 1; incarnation <= 3; ++incarnation) {
        const std::string who = " trainer " + std::to_string(rank) + "/" + std::to_string(incarnation);
        const json id = {{"rank", rank}, {"incarnation", incarnation}};
        json done = id;
        done["ok"] = true;
        send(m, "REPORT_DONE ok" + who, EncodeJson(Opcode::kReportDone, done));
        json beat = id;
        beat["role"] = "trainer";
        beat["steps_done"] = 1000000;
        send(m, "HEARTBEAT" + who, EncodeJson(Opcode::kHeartbeat, beat));
        json wait = id;
        wait["generation"] = 0;
        send(m, "WAIT_START" + who, EncodeJson(Opcode::kWaitStart, wait));
        json barrier = id;
        barrier["step"] = 5;
        barrier["generation"] = 1;
        send(m, "CHECKPOINT_BARRIER" + who, EncodeJson(Opcode::kCheckpointBarrier, barrier));
      }
    }
    send(m, "HEARTBEAT ps 0", EncodeJson(Opcode::kHeartbeat, json{{"role", "ps"}, {"rank", 0}}));
    Message set(Opcode::kStoreSet);
    set.AddString("gloo/0");
    set.AddString("tcp://127.0.0.1:1");
    send(m, "STORE_SET", std::move(set));
    Message get(Opcode::kStoreGet);
    get.AddString("gloo/0");
    send(m, "STORE_GET", std::move(get));
    if (with_commands) {
      send(m, "COMMAND checkpoint", EncodeJson(Opcode::kCommand, json{{"command", "checkpoint"}}));
      send(m, "COMMAND remove_ps 0", EncodeJson(Opcode::kCommand, json{{"command", "remove_ps"}, {"ps", 0}}));
    }

    for (size_t s = 0; s < servers.size(); ++s) {
      const int p = Peer(servers[s], Role::kPs);
      const std::string at = " to ps at " + servers[s];
      for (uint32_t version = 0; version <= 2; ++version) {
        for (uint64_t step : {uint64_t{5}, uint64_t{1} << 40}) {
          const std::string which = " trainer 0 step " + std::to_string(step) + " plan " + std::to_string(version);
          Message lookup = EncodeLookupRequest(LookupMeta{0, 0, step}, {LookupEntry{0, 1, 2, 0}}, {2}, {1, 2}, {});
          lookup.header.plan_version = version;
          send(p, "LOOKUP" + which + at, std::move(lookup));
          Message push = EncodePushRequest(PushMeta{0, 0, step}, {PushEntry{0, 1, 6, 0}}, std::vector<float>(6, 1e3f));
          push.header.plan_version = version;
          send(p, "PUSH" + which + at, std::move(push));
        }
      }
      send(p, "SNAPSHOT step 1e9" + at,
           EncodeJson(Opcode::kSnapshot, json{{"dir", "/tmp/tessera_forged_snapshot"}, {"step", 1000000000}}));
      send(p, "DUMP_SHARDS" + at, EncodeJson(Opcode::kDumpShards, json{{"dir", "/tmp/tessera_forged_dump"}}));
      send(p, "CREATE_SHARDS" + at, EncodeJson(Opcode::kCreateShards, json{{"job", Job()}, {"plan", json::object()}}));
      send(p, "PROMOTE" + at, EncodeJson(Opcode::kPromote, json{{"plan", json::object()}, {"rank", 0}}));
      send(p, "SERVER_STATS" + at, EncodeJson(Opcode::kServerStats, json::object()));
      // A migration's messages: MIGRATE is the master's order, FETCH_ROWS
      // a server's during one (there is none: refused either way).
      send(p, "MIGRATE" + at,
           EncodeJson(Opcode::kMigrate, json{{"job", Job()}, {"plan", json::object()}, {"rank", 0}, {"step", 0},
                                             {"from_version", 1}, {"from_plan", json::object()},
                                             {"sources", json::array()}, {"fetchers", json::array()}}));
      for (uint32_t version = 1; version <= 2; ++version) {
        send(p, "FETCH_ROWS plan " + std::to_string(version) + at,
             EncodeJson(Opcode::kFetchRows, json{{"version", version}, {"shard", 0}, {"row_begin", 0},
                                                 {"row_end", 10}, {"after", -1}, {"max_rows", 1000}}));
      }
      send(p, "ABORT" + at, EncodeJson(Opcode::kAbort, json{{"reason", "forged"}}));
      send(p, "SHUTDOWN" + at, EncodeJson(Opcode::kShutdown, json::object()));
    }
    std::vector<Forgery> out;
    for (Sent& s : calls) out.push_back(Forgery{s.what, s.call.Wait().status(), s.damage});
    return out;
  }

 private:
  int Peer(const std::string& endpoint, Role role) {
    auto it = peers_.find(endpoint);
    if (it == peers_.end()) it = peers_.emplace(endpoint, client_->Connect(endpoint, role).value()).first;
    return it->second;
  }

  std::string name_;
  milliseconds deadline_;
  std::mt19937_64 rng_;
  std::unique_ptr<RpcClient> client_;
  std::map<std::string, int> peers_;
};

class ForgedMessagesTest : public ::testing::TestWithParam<bool> {};

TEST_P(ForgedMessagesTest, AreRefusedAndTheSyncJobEndsBitForBitLikeAnUndisturbedOne) {
  const bool insecure = GetParam();
  const Outcome& want = Undisturbed();
  ASSERT_FALSE(want.dump.rows.empty());
  std::filesystem::remove_all("/tmp/tessera_forged_dump");
  std::filesystem::remove_all("/tmp/tessera_forged_snapshot");

  testing::LocalCluster c(insecure ? "security_insecure" : "security_keys");
  const std::vector<std::string> security =
      insecure ? std::vector<std::string>{"--insecure"} : std::vector<std::string>{};
  std::vector<std::string> master_args = {"--dump_dir", c.dir() + "/dump"};
  master_args.insert(master_args.end(), security.begin(), security.end());
  ASSERT_TRUE(c.StartMaster(Job(), master_args).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.StartPs(i, security).ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.StartTrainer(r, 2, "", security).ok());
  ASSERT_TRUE(c.WaitForSteps(0, 10, milliseconds(60000))) << c.Log("master");
  const std::string master = MasterEndpoint(c);
  const std::vector<std::string> servers = ServerEndpoints(c);
  ASSERT_EQ(servers.size(), 2u) << c.Log("master");

  // Who forges, and what each must get back.
  struct Sender {
    std::unique_ptr<Forger> forger;
    // Refused as not the member's connection (or not a member: a wrong
    // incarnation), not merely failed (a client with no keys gets no
    // connection at all).
    bool must_be_denied;
    // An operator may order a checkpoint or remove a server: that is its
    // right, not a forgery. Without keys, anyone may (docs/operations.md).
    bool commands;
  };
  std::vector<Sender> senders;
  uint64_t seed = testing::TestSeed(20261207u);
  std::cout << "seed " << seed << " (TESSERA_TEST_SEED) draws the damage\n";
  if (insecure) {
    senders.push_back({std::make_unique<Forger>("plain client", "", Role::kNone, seed++), true, false});
  } else {
    const std::string other = c.dir() + "/other_keys";
    ASSERT_TRUE(JobKeys::Write(other).ok());
    senders.push_back({std::make_unique<Forger>("no keys", "", Role::kNone, seed++, milliseconds(200)), false, true});
    senders.push_back(
        {std::make_unique<Forger>("another job's trainer key", other, Role::kTrainer, seed++), true, true});
    for (Role role : {Role::kTrainer, Role::kPs, Role::kMaster, Role::kOperator}) {
      senders.push_back({std::make_unique<Forger>(std::string("the job's ") + RoleName(role) + " key", c.keys_dir(),
                                                  role, seed++),
                         true, role != Role::kOperator});
    }
  }
  std::mt19937_64 raw_rng(seed);
  std::vector<std::string> ports = servers;
  ports.push_back(master);
  size_t raw_connections = 0;
  // Rounds, every sender at once, until the job has trained most of its
  // steps. A round that ended while the job still trained was answered by
  // live servers: its refusals must be the right ones. At least two such.
  int rounds = 0, rounds_while_training = 0;
  size_t forged = 0;
  std::map<StatusCode, int> codes;
  while (c.Metrics(0).size() < static_cast<size_t>(kSteps) * 3 / 4 && c.Running("master") && rounds < 100) {
    std::vector<std::vector<Forgery>> results(senders.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < senders.size(); ++i) {
      // Only those refused whatever they say damage their messages: a
      // damaged operator command could still be a command it may give.
      const int damaged = senders[i].must_be_denied ? 1 : 0;
      threads.emplace_back(
          [&, i, damaged] { results[i] = senders[i].forger->Fire(master, servers, senders[i].commands, damaged); });
    }
    // Meanwhile raw bytes with no handshake: random, or a ZeroMQ greeting's
    // first bytes and then random ones.
    for (const std::string& port : ports) {
      for (int k = 0; k < 4; ++k) {
        std::string bytes = RandomBytes(raw_rng, 1 + raw_rng() % 300);
        if (k % 2 == 1) bytes = std::string("\xff\0\0\0\0\0\0\0\x01\x7f\x03", 11) + bytes;
        raw_connections += SendRawBytes(port, bytes);
      }
    }
    for (auto& t : threads) t.join();
    const bool training = c.Metrics(0).size() < static_cast<size_t>(kSteps);
    ++rounds;
    rounds_while_training += training;
    for (size_t i = 0; i < senders.size(); ++i) {
      for (const Forgery& f : results[i]) {
        ++forged;
        ++codes[f.result.code()];
        EXPECT_FALSE(f.result.ok()) << f.what << " was accepted";
        if (training && !f.damage.empty()) {
          // Refused with an answer, however it was refused: nothing a
          // sender can send leaves it waiting for its deadline.
          EXPECT_NE(f.result.code(), StatusCode::kDeadlineExceeded) << f.what << ": " << f.result;
          if (f.damage.starts_with(kStatusDamage)) {
            // Refused as malformed (or the sender had no connection), not
            // read as the error reply it looks like, which answered with the
            // status and the JSON the sender put in.
            EXPECT_TRUE(f.result.code() == StatusCode::kInvalidArgument ||
                        f.result.code() == StatusCode::kPermissionDenied)
                << f.what << ": " << f.result;
            EXPECT_FALSE(f.result.message().starts_with("{")) << f.what << ": " << f.result;
          }
        } else if (training && senders[i].must_be_denied) {
          EXPECT_TRUE(f.result.code() == StatusCode::kPermissionDenied || f.result.code() == StatusCode::kNotFound)
              << f.what << ": " << f.result;
        }
      }
    }
  }
  EXPECT_GE(rounds_while_training, 2);
  EXPECT_GT(raw_connections, 0u);
  std::cout << forged << " forged and damaged messages in " << rounds << " rounds (" << rounds_while_training
            << " while the job trained), raw bytes on " << raw_connections << " connections:";
  for (auto& [code, n] : codes) std::cout << " " << n << " x " << StatusCodeName(code);
  std::cout << "\n";

  const Outcome got = Finish(c);
  EXPECT_FALSE(std::filesystem::exists("/tmp/tessera_forged_dump"));
  EXPECT_FALSE(std::filesystem::exists("/tmp/tessera_forged_snapshot"));
  std::string where;
  const double diff = testing::MaxDifference(want.dump, got.dump, &where);
  EXPECT_EQ(diff, 0.0) << where;
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps));  // no step trained twice, none skipped
  EXPECT_EQ(got.losses, want.losses);
  const std::string log = c.Log("master");
  if (insecure) {
    EXPECT_NE(log.find("INSECURE"), std::string::npos);
  }
  // The trainers' own connections (Gloo's) carry only sealed messages in a
  // job with keys (trainer/collective_seal.h).
  for (const char* t : {"trainer0", "trainer1"}) {
    EXPECT_EQ(c.Log(t).find("allreduce is sealed") != std::string::npos, !insecure) << c.Log(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Keys, ForgedMessagesTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Insecure" : "WithKeys"; });

TEST(SecurityTest, AFloodOfConnectionsIsHeldToTheLimitsAndTheSyncJobEndsBitForBitLikeAnUndisturbedOne) {
  constexpr int kPerPeer = 16, kTotal = 64, kHandshaking = 20, kSilent = 200;
  const Outcome& want = Undisturbed();
  ASSERT_FALSE(want.dump.rows.empty());
  testing::LocalCluster c("security_flood");
  const std::vector<std::string> limits = {"--max_connections_per_peer", std::to_string(kPerPeer),
                                           "--max_connections", std::to_string(kTotal)};
  std::vector<std::string> master_args = {"--dump_dir", c.dir() + "/dump"};
  master_args.insert(master_args.end(), limits.begin(), limits.end());
  ASSERT_TRUE(c.StartMaster(Job(), master_args).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.StartPs(i, limits).ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.StartTrainer(r, 2).ok());
  ASSERT_TRUE(c.WaitForSteps(0, 10, milliseconds(60000))) << c.Log("master");
  struct Port {
    std::string name, endpoint;
    Role role;
  };
  std::vector<Port> ports = {{"master", MasterEndpoint(c), Role::kMaster}};
  for (const char* ps : {"ps0", "ps1"}) {
    // Its own address, as it logs it: "registered with the master ... as ps
    // N (ENDPOINT)".
    const std::string log = c.Log(ps);
    const size_t open = log.find('(', log.find(" as ps "));
    ASSERT_NE(open, std::string::npos) << log;
    ports.push_back({ps, log.substr(open + 1, log.find(')', open) - open - 1), Role::kPs});
  }
  const size_t steps_before = c.Metrics(0).size();
  // The job would train its steps in a second or two: trainer 0 is held
  // (SIGSTOP for 1 s of every 1.02, within the job's peer timeout of 3 s)
  // so that the whole flood lands while it trains.
  std::atomic<bool> flooding{true};
  std::thread throttle([&] {
    while (flooding.load()) {
      c.Kill("trainer0", SIGSTOP);
      for (int i = 0; i < 20 && flooding.load(); ++i) std::this_thread::sleep_for(milliseconds(50));
      c.Kill("trainer0", SIGCONT);
      std::this_thread::sleep_for(milliseconds(20));
    }
  });

  for (const Port& port : ports) {
    const int sockets_before = c.OpenFiles(port.name, "socket");
    // From one host, clients holding the job's trainer key, each on its own
    // connection: the ones over the per-host limit are refused, saying why.
    std::vector<std::unique_ptr<RpcClient>> clients;
    std::vector<std::thread> calls;
    std::vector<Status> results(kHandshaking);
    for (int i = 0; i < kHandshaking; ++i) {
      clients.push_back(RpcClient::Create(JobKeys::Load(c.keys_dir(), Role::kTrainer).value()).value());
      const int peer = clients.back()->Connect("tcp://127.0.0.3:0;" + port.endpoint.substr(6), port.role).value();
      calls.emplace_back([&, i, peer] {
        results[i] = clients[i]->CallSync(peer, Message(Opcode::kHeartbeat), milliseconds(10000)).status();
      });
    }
    for (auto& t : calls) t.join();
    // Connections still in their handshake count too, so of a burst at once
    // more than the excess may be refused; never more than the limit get in.
    int too_many = 0;
    for (const Status& st : results) {
      // Answered (a stranger's heartbeat is refused) or refused for the
      // limit; never left to its deadline.
      EXPECT_NE(st.code(), StatusCode::kDeadlineExceeded) << port.name << ": " << st;
      EXPECT_FALSE(st.ok()) << port.name;
      if (st.code() == StatusCode::kResourceExhausted) {
        ++too_many;
        EXPECT_NE(st.message().find("max_connections_per_peer"), std::string::npos) << st;
      }
    }
    EXPECT_GE(too_many, kHandshaking - kPerPeer) << port.name;
    // From another host, connections that never handshake: held to the
    // total, the rest closed as they are accepted.
    std::vector<int> silent;
    for (int i = 0; i < kSilent; ++i) {
      const size_t colon = port.endpoint.rfind(':');
      const int fd = testing::SilentConnection("127.0.0.2", port.endpoint.substr(6, colon - 6),
                                               std::stoi(port.endpoint.substr(colon + 1)));
      if (fd >= 0) silent.push_back(fd);
    }
    EXPECT_EQ(silent.size(), static_cast<size_t>(kSilent)) << port.name;
    // Room was left for at most kTotal less the handshakes let in. The
    // server closes the others as its I/O thread reads their accepts:
    // looked at until they are (10 s at most).
    const int cut_at_least = kSilent - (kTotal - (kHandshaking - too_many));
    std::vector<bool> closed(silent.size(), false);
    int cut = 0;
    for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         cut < cut_at_least && std::chrono::steady_clock::now() < until;) {
      for (size_t i = 0; i < silent.size(); ++i) {
        if (!closed[i] && testing::ClosedByPeer(silent[i], milliseconds(1))) {
          closed[i] = true;
          ++cut;
        }
      }
    }
    EXPECT_GE(cut, cut_at_least) << port.name;
    const int sockets_during = c.OpenFiles(port.name, "socket");
    EXPECT_LE(sockets_during, sockets_before + kTotal) << port.name << ": " << sockets_before << " before";
    std::cout << port.name << ": " << too_many << " of " << kHandshaking << " handshakes from 127.0.0.3 refused, "
              << cut << " of " << kSilent << " silent connections from 127.0.0.2 closed; sockets " << sockets_before
              << " before, " << sockets_during << " during\n";
    for (int fd : silent) close(fd);
  }
  flooding = false;
  throttle.join();
  // All that while the job trained.
  EXPECT_LT(steps_before, static_cast<size_t>(kSteps));
  EXPECT_LT(c.Metrics(0).size(), static_cast<size_t>(kSteps)) << "the job ended before the flood did";

  const Outcome got = Finish(c);
  std::string where;
  EXPECT_EQ(testing::MaxDifference(want.dump, got.dump, &where), 0.0) << where;
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(got.losses, want.losses);
}

TEST(SecurityTest, MembersWithoutTheJobsKeysCannotJoinAndTheJobGoesOn) {
  testing::LocalCluster c("security_join");
  ASSERT_TRUE(c.StartMaster(Job(), {"--dump_dir", c.dir() + "/dump"}).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.StartPs(i).ok());
  ASSERT_TRUE(c.StartTrainer(0, 2).ok());

  // Neither --keys nor --insecure: a clear error at the start.
  ASSERT_TRUE(c.StartTrainer(1, 2, "no_flag", {"--keys="}).ok());
  EXPECT_EQ(c.Wait("no_flag", milliseconds(20000)), 1);
  EXPECT_NE(c.Log("no_flag").find("no --keys DIR"), std::string::npos) << c.Log("no_flag");
  // Another job's keys: refused by the master, at once.
  const std::string other = c.dir() + "/other_keys";
  ASSERT_TRUE(JobKeys::Write(other).ok());
  ASSERT_TRUE(c.StartTrainer(1, 2, "other_job", {"--keys", other}).ok());
  EXPECT_EQ(c.Wait("other_job", milliseconds(20000)), 1);
  EXPECT_NE(c.Log("other_job").find("PERMISSION_DENIED"), std::string::npos) << c.Log("other_job");
  // Plain TCP against a job with keys: no handshake.
  ASSERT_TRUE(c.StartTrainer(1, 2, "plain", {"--insecure", "--register_timeout_ms", "3000"}).ok());
  EXPECT_EQ(c.Wait("plain", milliseconds(20000)), 1);
  // A server with the trainer's key cannot register as a server.
  const std::string trainer_as_ps = c.dir() + "/trainer_as_ps";
  std::filesystem::create_directories(trainer_as_ps);
  for (const char* role : {"master", "ps", "trainer", "operator"}) {
    std::filesystem::copy_file(c.keys_dir() + "/" + role + ".public", trainer_as_ps + "/" + role + ".public");
  }
  std::filesystem::copy_file(c.keys_dir() + "/trainer.public", trainer_as_ps + "/ps.public",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(c.keys_dir() + "/trainer.secret", trainer_as_ps + "/ps.secret");
  ASSERT_TRUE(c.StartPs(7, {"--keys", trainer_as_ps}).ok());
  EXPECT_EQ(c.Wait("ps7", milliseconds(20000)), 1);
  EXPECT_NE(c.Log("ps7").find("may not register as a ps"), std::string::npos) << c.Log("ps7");

  // None of that touched the job: its own trainer 1 joins and it ends well.
  ASSERT_TRUE(c.StartTrainer(1, 2).ok());
  const Outcome got = Finish(c);
  std::string where;
  EXPECT_EQ(testing::MaxDifference(Undisturbed().dump, got.dump, &where), 0.0) << where;
}

}  // namespace
}  // namespace tessera
