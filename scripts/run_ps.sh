#!/usr/bin/env bash
# Starts a parameter server:  scripts/run_ps.sh --master tcp://HOST:PORT [--bind tcp://0.0.0.0:0 --advertise_host THIS_HOST]
source "$(dirname "$0")/common.sh"
exec "$(tessera_bin tessera_ps)" "$@"
