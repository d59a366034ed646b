# Shared by the launch scripts: where the binaries are.
TESSERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-$TESSERA_ROOT/build}"
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
