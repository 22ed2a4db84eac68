#!/usr/bin/env bash
# Runs every fuzz target (cargo-fuzz, libFuzzer) for SECONDS each (default 60), starting from
# the committed seeds in fuzz/corpus/<target>; fails if any target crashes, breaks one of its
# invariants or spends more than 10 s on one input. What each target checks, and the figures
# of the long run: docs/reliability.md, "Fuzzing".
#
#   bash fuzz/run.sh [SECONDS [TARGET...]]      (default: every target)
#
# New inputs go to a scratch corpus, so the committed seeds stay as they are; a failing input
# is written to fuzz/artifacts/<target>/ (ignored by git). Reproduce one with
#   cargo +nightly fuzz run -s none <target> fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true

# Nightly (libFuzzer's instrumentation) and cargo-fuzz, if missing.
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
cargo fuzz --version

# No sanitizer: the crates deny unsafe code, and AddressSanitizer would double the build on a
# small machine for little more than the panics and assertions already caught.
cargo +nightly fuzz build -s none

failed=()
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
for target in "${targets[@]}"; do
  printf '\n--- %s, %s s\n' "$target" "$seconds"
  scratch=$(mktemp -d)
  if ! cargo +nightly fuzz run -s none "$target" "$scratch" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -print_final_stats=1 2>&1 |
    { grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' || true; }; then
    failed+=("$target")
  fi
  rm -rf "$scratch"
done

if [ ${#failed[@]} -gt 0 ]; then
  printf '\nfuzzing failed: %s (inputs in fuzz/artifacts/)\n' "${failed[*]}" >&2
  exit 1
fi
printf '\nfuzzing: every target ran %s s without a failure\n' "$seconds"
