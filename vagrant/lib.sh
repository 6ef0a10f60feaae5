# Shared by build-box.sh and libvirt.sh (sourced): where the guest gets its packages from.
# shellcheck shell=bash

# The apt sources files the box is built from: this machine's Debian archives when it runs
# Debian 12 (only Debian's own: a third-party repository's key is not in the image); none
# (the caller then uses deb.debian.org) elsewhere.
box_apt_sources() {
  local f
  (
    . /etc/os-release
    [ "${ID:-}" = debian ] && [ "${VERSION_CODENAME:-}" = bookworm ] || exit 0
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
      [ -s "$f" ] && grep -q 'debian\.org\|debian-security' "$f" && echo "$f"
    done
  )
  return 0
}
BOX_DEFAULT_SOURCES=("deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main")

# The pip configuration files the box carries.
BOX_PIP_FILES=(/etc/pip.conf /etc/xdg/pip/pip.conf /etc/xdg/pip/constraints.txt)

# The host names the guest may reach (HTTP and HTTPS only): the apt archives above, PyPI, and
# the http(s) indexes of the pip configuration.
registry_hosts() {
  local files
  mapfile -t files < <(box_apt_sources)
  {
    if [ ${#files[@]} -gt 0 ]; then
      grep -h -v '^[[:space:]]*#' "${files[@]}" | grep -o -E 'https?://[^/ ]+'
    else
      printf '%s\n' "${BOX_DEFAULT_SOURCES[@]}" | grep -o -E 'https?://[^/ ]+'
    fi
    echo https://pypi.org
    echo https://files.pythonhosted.org
    for f in "${BOX_PIP_FILES[@]}"; do
      [ -f "$f" ] && grep -E '^[[:space:]]*(index-url|extra-index-url)' "$f" | grep -o -E 'https?://[^/ ]+'
    done
  } | sed -E 's#^https?://##; s#^[^@]*@##; s#:[0-9]+$##' | sort -u
}
