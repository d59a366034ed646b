#!/usr/bin/env bash
# Starts a trainer:  scripts/run_trainer.sh --master tcp://HOST:PORT --rank R --world W [--metrics_file F --host THIS_HOST]
source "$(dirname "$0")/common.sh"
exec "$(tessera_bin tessera_trainer)" "$@"
