#!/usr/bin/env bash
# The VM's results/ back into the host's results/: the synced folder is rsync, which copies
# only host -> VM. Run from anywhere, with the environment `vagrant up` had (TOPOLAB_BOX, ...):
#
#   bash vagrant/rsync-back.sh
#
# Each folder of the VM's /vagrant/results is copied to results/ on the host. A host folder of
# the same name that holds another run (its results.json differs) is first kept the way
# `topolab run` keeps an earlier run (topolab.run.command.keep_previous: renamed after its start time),
# so nothing on the host is overwritten.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
die() { printf 'rsync-back: %s\n' "$*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here" && timeout 120 vagrant ssh-config) >"$tmp/ssh-config" 2>"$tmp/err" \
  || die "vagrant ssh-config failed (is the VM up?): $(tail -n 1 "$tmp/err")"
host=$(awk '$1 == "Host" {print $2; exit}' "$tmp/ssh-config")
timeout 600 rsync -a -e "ssh -F $tmp/ssh-config -o ConnectTimeout=30" "$host:/vagrant/results/" "$tmp/results/" \
  || die "rsync of /vagrant/results from the VM failed or took over 600 s"

keep_previous() {
  local py=python3
  [ -x "$repo/.venv/bin/python" ] && py=$repo/.venv/bin/python
  PYTHONPATH=$repo "$py" -c 'import sys
from pathlib import Path
from topolab.run.command import keep_previous
print(keep_previous(Path(sys.argv[1])) or "")' "$1"
}

mkdir -p "$repo/results"
shopt -s nullglob
for src in "$tmp/results"/*/; do
  name=$(basename "$src")
  dest=$repo/results/$name
  if [ -f "$dest/results.json" ] && ! cmp -s "$dest/results.json" "$src/results.json"; then
    kept=$(keep_previous "$dest" 2>/dev/null) \
      || die "results/$name on the host holds another run and topolab cannot keep it here: move it away first"
    echo "rsync-back: the host's earlier results/$name kept as ${kept#"$repo"/}"
  fi
  mkdir -p "$dest"
  rsync -a "$src" "$dest/"
  echo "rsync-back: results/$name"
done
