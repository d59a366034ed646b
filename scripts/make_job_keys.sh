#!/usr/bin/env bash
# Writes a new job's CURVE key pairs:  scripts/make_job_keys.sh DIR
#
# DIR (created 0700) gets master, ps, trainer and operator .public and
# .secret files. Give every role of the job --keys DIR: each needs all the
# .public files and its own role's .secret (a trainer's machine needs no
# master.secret, an operator's only operator.secret and master.public).
# Anyone who can read a .secret can speak as that role: copy the folder only
# to the job's machines. Refuses to overwrite keys already in DIR.
set -euo pipefail
source "$(dirname "$0")/common.sh"
case "${1:-}" in
  -h|--help) tessera_usage "$0"; exit 0 ;;
  -*) echo "make_job_keys: unknown option $1; usage: $0 DIR" >&2; exit 2 ;;
esac
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
exec "$(tessera_bin tessera_master)" --make_keys "$1"
