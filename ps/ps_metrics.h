// A parameter server's figures in Prometheus' text format, from the JSON
// its SERVER_STATS and heartbeats already carry (PsService::Stats()), so the
// endpoint and the master's view of a server are the same numbers.
#pragma once

#include <nlohmann/json.hpp>

#include "common/prometheus_text.h"

namespace tessera {

// `stats`: PsService::Stats()'s object. Per-shard figures are labelled
// table= and shard=, per-tier ones also tier=.
void WritePsMetrics(const nlohmann::json& stats, PrometheusText* out);

}  // namespace tessera
