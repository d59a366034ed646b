# Shared by the launch scripts (and their test): where the binaries are,
# whether a process runs.
TESSERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The binaries: all from TESSERA_BIN_DIR when it is set (a GPU bundle's bin/);
# else from TESSERA_BUILD_DIR when it is set; else, for scripts installed by
# cmake --install or the .deb (install_layout.sh beside them, naming the
# prefix's bin/), the installed ones; else the checkout's build/.
TESSERA_INSTALLED_BIN_DIR=""
if [ -f "$(dirname "${BASH_SOURCE[0]}")/install_layout.sh" ]; then
  # shellcheck source=/dev/null  # written by cmake/TesseraInstall.cmake
  source "$(dirname "${BASH_SOURCE[0]}")/install_layout.sh"
  if [ -z "${TESSERA_BIN_DIR:-}" ] && [ -z "${TESSERA_BUILD_DIR:-}" ]; then
    TESSERA_BIN_DIR="$TESSERA_INSTALLED_BIN_DIR"
  fi
fi
TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$TESSERA_ROOT/build}"

# --help: prints the opening comment of script $1, which is its usage.
tessera_usage() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1"
}

tessera_bin() {
  local path
  case "$1" in
    tessera_master) path="$TESSERA_BUILD_DIR/master/tessera_master" ;;
    tessera_ps) path="$TESSERA_BUILD_DIR/ps/tessera_ps" ;;
    tessera_trainer) path="$TESSERA_BUILD_DIR/trainer/tessera_trainer" ;;
  esac
  [ -n "${TESSERA_BIN_DIR:-}" ] && path="$TESSERA_BIN_DIR/$1"
  if [ ! -x "$path" ]; then
    echo "error: $path not found; run scripts/build.sh first" >&2
    exit 1
  fi
  echo "$path"
}

# Whether a process runs. kill -0 alone also succeeds on a zombie: a server
# started by --add_ps that ended is reparented to PID 1, and where PID 1 does
# not reap (some containers) it stays a zombie; that one has ended too.
running() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
  stat="${stat##*) }"
  [ "${stat%% *}" != "Z" ]
}

# The CPUs process $1 may run on (its Cpus_allowed_list, "0-3,8" expanded),
# one per line in increasing order.
allowed_cpus_of() {
  local list part parts
  list="$(awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$1/status" 2>/dev/null)"
  [ -n "$list" ] || return 1
  IFS=, read -ra parts <<<"$list"
  for part in "${parts[@]}"; do
    if [[ "$part" == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}
