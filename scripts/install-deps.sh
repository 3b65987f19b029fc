#!/bin/sh
# Installs everything deltafin needs to build and test on Debian 12 (bookworm).
# Safe to run again: apt and npm ci are idempotent.
set -eu
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS="build-essential cmake pkg-config clang clang-tools libclang-rt-14-dev \
  libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev liburing-dev \
  libpcre2-dev libicu-dev libxxhash-dev libssl-dev libcmocka-dev libedit-dev tmux \
  python3 python3-numpy python3-torch curl ca-certificates \
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
  nginx chromium fonts-dejavu-core"
# chromium: headless, for e2e.test_trace_report's in-page checks and the docs' screenshots.
# Node.js 20 (with its npm) may already be installed from elsewhere; Debian's nodejs+npm only when absent.
command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"
PKGS="$PKGS python3-pydantic" # e2e.test_serve_schema: pydantic's schemas and validation
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "deltafin: installing Debian packages:$missing"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi
# Test oracles (npm tiktoken + gpt-tokenizer rank files, the openai client), pinned by committed lockfiles.
for lock in tests/*/package-lock.json tests/*/*/package-lock.json; do
  [ -f "$lock" ] || continue
  (cd "$(dirname "$lock")" && npm ci --no-audit --no-fund --loglevel=error)
done
