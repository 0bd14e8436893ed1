# Sourced by scripts/install-*: where the heavy test installs live.
#
# One copy per version sits in TETHER_DEV_CACHE (default ~/.cache/tether-dev; as root
# /var/cache/tether-dev, because root's home is private and the Letta tests run PostgreSQL as
# nobody, which must reach its binaries), and a clone's .cache/<name> or .venv-llama is a link
# to it, so a fresh clone on the same machine (CI's) reuses a finished install in seconds. A
# real folder at that path (an older layout) is used as it is. Each script re-checks its own
# stamp, so a cached copy is never trusted blindly.

tether_cache_root() {
  if [ -n "${TETHER_DEV_CACHE:-}" ]; then
    echo "$TETHER_DEV_CACHE"
  elif [ "$(id -u)" -eq 0 ]; then
    echo /var/cache/tether-dev
  else
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/tether-dev"
  fi
}

# tether_cached_dir PATH NAME: make PATH (inside the repository) lead to the cache entry NAME
# unless PATH is a real folder; print the resolved folder.
tether_cached_dir() {
  local link=$1 name=$2 root
  root=$(tether_cache_root)
  if [ -L "$link" ] || [ ! -e "$link" ]; then
    mkdir -p "$root/$name" "$(dirname "$link")"
    ln -sfn "$root/$name" "$link"
  fi
  (cd "$link" && pwd -P)
}

# tether_lock DIR: hold an exclusive lock beside DIR until the script exits (two clones
# installing the same entry at once take turns; the second then finds it installed).
tether_lock() {
  exec 9>"$1.lock"
  flock 9
}
