// Every control-plane body (common/control_messages.h: the master's, the
// server orders CREATE_SHARDS, PROMOTE, SNAPSHOT, DUMP_SHARDS and ABORT, and
// the migration's, MIGRATE and FETCH_ROWS) and the sharding plan that
// CREATE_SHARDS, PROMOTE and the WAIT_START reply carry, as a JSON frame
// decoded the way a receiver decodes it:
//   Input := kind:fixed8 json_text   (kind picks the message)
// Besides not crashing: what parses writes back (ToJson) as a body that
// parses again to the same thing, so what one side accepts the other can
// send.
#include <algorithm>

#include <glog/logging.h>

#include <nlohmann/json.hpp>

#include "common/control_messages.h"
#include "common/messages.h"
#include "common/sharding_plan.h"

namespace tessera {
namespace {

template <typename T>
void ParseAndWriteBack(const nlohmann::json& j, StatusOr<T> (*parse)(const nlohmann::json&)) {
  StatusOr<T> r = parse(j);
  if (!r.ok()) return;
  const nlohmann::json written = r->ToJson();
  StatusOr<T> again = parse(written);
  CHECK(again.ok()) << again.status() << " for " << written.dump();
  CHECK(again->ToJson() == written) << written.dump();
}

// The plan as its receivers use it: a row lookup in each shard.
StatusOr<ShardingPlan> ParsePlan(const nlohmann::json& j) {
  auto plan = ShardingPlan::FromJson(j);
  if (plan.ok()) {
    for (const ShardSpec& s : plan->shards) (void)s.HoldsRow(s.row_offset);
    for (int ps = 0; ps < std::min(plan->num_ps, 4); ++ps) (void)plan->HeldBy(ps);
  }
  return plan;
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 1) return 0;
  Message m(Opcode::kCommand);
  m.AddBytes(data + 1, size - 1);
  auto j = DecodeJson(m);
  if (!j.ok()) return 0;
  switch (data[0] % 18) {
    case 0: ParseAndWriteBack(*j, &RegisterRequest::Parse); break;
    case 1: ParseAndWriteBack(*j, &RegisterReply::Parse); break;
    case 2: ParseAndWriteBack(*j, &HeartbeatRequest::Parse); break;
    case 3: ParseAndWriteBack(*j, &HeartbeatReply::Parse); break;
    case 4: ParseAndWriteBack(*j, &WaitStartRequest::Parse); break;
    case 5: ParseAndWriteBack(*j, &StartInfo::Parse); break;
    case 6: ParseAndWriteBack(*j, &BarrierRequest::Parse); break;
    case 7: ParseAndWriteBack(*j, &BarrierReply::Parse); break;
    case 8: (void)ReportDone::Parse(*j); break;  // kept whole for the summary: nothing to write back
    case 9: ParseAndWriteBack(*j, &Command::Parse); break;
    case 10: ParseAndWriteBack(*j, &ParsePlan); break;
    case 11: ParseAndWriteBack(*j, &MigrateRequest::Parse); break;
    case 12: ParseAndWriteBack(*j, &FetchRowsRequest::Parse); break;
    case 13: ParseAndWriteBack(*j, &CreateShardsRequest::Parse); break;
    case 14: ParseAndWriteBack(*j, &PromoteRequest::Parse); break;
    case 15: ParseAndWriteBack(*j, &SnapshotRequest::Parse); break;
    case 16: ParseAndWriteBack(*j, &DumpShardsRequest::Parse); break;
    case 17: ParseAndWriteBack(*j, &AbortRequest::Parse); break;
  }
  return 0;
}
