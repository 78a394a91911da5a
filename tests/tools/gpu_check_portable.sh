#!/usr/bin/env bash
# scripts/gpu-check on a host that is not Debian 12 (a fake Ubuntu os-release) must not call a
# package manager, must find the vendor toolchain and must report its device status cleanly.
set -u
repo=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
for pm in apt-get apt dnf yum sudo; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/called"\nexit 1\n' "$pm" "$tmp" > "$tmp/bin/$pm"
  chmod +x "$tmp/bin/$pm"
done
printf 'ID=ubuntu\nVERSION_ID="22.04"\n' > "$tmp/os-release"
out=$(TESSERA_OS_RELEASE="$tmp/os-release" PATH="$tmp/bin:$PATH" "$repo/scripts/gpu-check" --dry-run "$tmp/out" 2>&1)
rc=$?
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
((rc == 0)) || fail "exit code $rc"
[[ ! -e "$tmp/called" ]] || fail "a package manager was called: $(cat "$tmp/called")"
grep -q "not Debian 12, so nothing is installed" <<<"$out" || fail "no 'nothing is installed' line"
grep -Eq "status: (no device|ok)" <<<"$out" || fail "no device status"
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  grep -q "vendor: cuda" <<<"$out" || fail "nvcc is present but the CUDA toolchain was not chosen"
  grep -q "DTESSERA_WITH_CUDA=ON" <<<"$out" || fail "CUDA not enabled in the configure line"
fi
printf 'ID=debian\nVERSION_ID="12"\n' > "$tmp/os-release"
out=$(TESSERA_OS_RELEASE="$tmp/os-release" PATH="$tmp/bin:$PATH" "$repo/scripts/gpu-check" --dry-run "$tmp/out" 2>&1)
grep -q "would run scripts/setup-deps" <<<"$out" || fail "Debian 12 should use scripts/setup-deps"
echo "gpu-check portability: ok"
