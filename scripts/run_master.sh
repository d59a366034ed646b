#!/usr/bin/env bash
# Starts the master of a job:  scripts/run_master.sh --config job.json [--bind tcp://0.0.0.0:5555]
# Parameter servers and trainers then join with --master tcp://THIS_HOST:5555.
source "$(dirname "$0")/common.sh"
exec "$(tessera_bin tessera_master)" "$@"
