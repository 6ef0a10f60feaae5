#!/usr/bin/env bash
# One idempotent set-up for topolab: system packages, then .venv/ with the project.
# Used by scripts/run.sh and scripts/test.sh (the README's two commands), by `make` and by the
# Vagrant VM. Works on a bare (minbase) Debian 12 as root: it installs python3 itself.
# Safe to run again: it only does what is missing.
#   bash scripts/setup.sh [--with-torch] [--models]
#     --with-torch: also the [torch] extra, for topolab train
#     --models:     also the [models] extra, for importing PyTorch models and Chakra traces
set -euo pipefail
with_torch=""
with_models=""
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=1 ;;
    --models) with_models=1 ;;
    *) echo "setup: unknown option $arg (--with-torch or --models)" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# python3-venv brings ensurepip; make runs the labs' checkers; iproute2 is ip/tc; mnexec drives the hosts;
# ethtool is not a Mininet dependency but Mininet calls it; ca-certificates for pip; openssh-server
# gives the multi-machine tests their stand-in machines' sshd (started only inside their namespaces);
# gcc and libc6-dev compile the workers' data-plane loop (workers/engine.c); nftables gives nft, which
# filters a multi-machine run's VXLAN underlay to the listed machines (docs/cluster.md section 7).
apt_packages=(python3 python3-venv ca-certificates make mininet iperf3 iputils-ping traceroute ethtool iproute2 procps openssh-server gcc libc6-dev nftables)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing system packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # openssh-server is wanted for its sshd binary only: no daemon may start listening in the
  # root namespace. Debian's policy-rc.d (exit 101) stops the package from starting it now,
  # and it is disabled for later boots; an sshd the machine already had is left as it was.
  no_daemon=""
  if [[ " ${missing[*]} " == *" openssh-server "* ]] && [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    no_daemon=1
  fi
  apt-get update -qq
  # --no-install-recommends: otherwise apt pulls Open vSwitch, which topolab does not need.
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ -n "$no_daemon" ]; then
    rm -f /usr/sbin/policy-rc.d
    trap - EXIT
    if [ -d /run/systemd/system ]; then
      systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
    else
      update-rc.d ssh disable >/dev/null 2>&1 || true
    fi
  fi
fi

# Debian's Mininet lives in /usr/bin/python3's dist-packages: the venv must see it.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import mininet" 2>/dev/null; then
  rm -rf .venv
  echo "setup: creating .venv (system site packages, for Debian's Mininet)"
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.topolab-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing topolab and its Python dependencies (tests, docs site) into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test,docs]"
  touch "$stamp"
fi
# torch only where asked (scripts/test.sh; `topolab train` users): pyproject.toml pins the CPU
# build these machines install, so nothing here can pull a CUDA build.
if [ -n "$with_torch" ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing the [torch] extra (topolab train)"
  .venv/bin/python -m pip install -q -e ".[test,torch]"
fi

# `setup.sh --models` (the test command) adds the optional extra for imported models: torch
# (the same CPU build: pinned, so pip never resolves a CUDA one), transformers, and Chakra's
# trace format. mlc-chakra goes in without its dependencies: its converter needs protobuf
# alone (from the extra), the rest (HolisticTraceAnalysis: jupyterlab, pandas) is for tools
# topolab does not use.
models_stamp=.venv/.topolab-models-installed
if [ -n "$with_models" ] && { [ ! -f "$models_stamp" ] || [ pyproject.toml -nt "$models_stamp" ]; }; then
  echo "setup: installing the models extra (torch CPU, transformers, mlc-chakra) into .venv"
  .venv/bin/python -m pip install -q -e ".[test,models]"
  .venv/bin/python -m pip install -q --no-deps "mlc-chakra==1.0.0"
  touch "$models_stamp"
fi

# The workers' compiled data-plane loop: built here (a second run finds it built), so no worker
# compiles at start-up; named by its source's hash, so a changed workers/engine.c is rebuilt.
.venv/bin/python -c "from workers.engine import build; build()"
