#!/usr/bin/env bash
# Runs every fuzz target (cargo-fuzz, libFuzzer) for SECONDS each (default 60), starting from
# the committed seeds in fuzz/corpus/<target>; fails if any target crashes, breaks one of its
# invariants or spends more than 10 s on one input (for the targets that reach the shell
# parser, such inputs are reported and fuzzing goes on: see parser_targets below). What each
# target checks, and the figures of the long run: docs/reliability.md, "Fuzzing".
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

# Targets whose input reaches brush-parser. Its slow and memory-hungry inputs are contained in
# the daemon (the parser workers' deadline and memory cap, docs/reliability.md), and a guard list
# never catches them all, so here they are reported and the run goes on; a panic or a broken
# invariant still fails it.
parser_targets=" command_line permission_rules bash_differential "

failed=()
contained=()
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
for target in "${targets[@]}"; do
  printf '\n--- %s, %s s\n' "$target" "$seconds"
  scratch=$(mktemp -d)
  found=$(mktemp -d)
  end=$((SECONDS + seconds))
  while :; do
    # Read once: libFuzzer takes a limit of 0 for no limit at all.
    left=$((end - SECONDS))
    [ "$left" -gt 0 ] || break
    status=0
    cargo +nightly fuzz run -s none "$target" "$scratch" "corpus/$target" -- \
      -max_total_time="$left" -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$found/" 2>&1 |
      { grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' || true; } || status=$?
    [ "$status" -eq 0 ] && break
    input=$(ls -t "$found" | head -n 1)
    if [ -n "$input" ]; then
      mkdir -p "artifacts/$target"
      mv "$found/$input" "artifacts/$target/"
    fi
    case "$parser_targets:$input" in
      *" $target "*:timeout-* | *" $target "*:oom-*)
        contained+=("artifacts/$target/$input")
        printf '\n(contained in the daemon: %s; fuzzing goes on)\n' "$input"
        ;;
      *)
        failed+=("$target")
        break
        ;;
    esac
  done
  rm -rf "$scratch" "$found"
done

if [ ${#contained[@]} -gt 0 ]; then
  printf '\nbrush-parser inputs that took over 10 s or 2 GB, which the daemon contains (its parser\n'
  printf 'workers time out or run out of memory on them: the line is unreadable and asks); each\n'
  printf 'is worth a guard in daemon/src/shell/mod.rs, parsable():\n'
  printf '  fuzz/%s\n' "${contained[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf '\nfuzzing failed: %s (inputs in fuzz/artifacts/)\n' "${failed[*]}" >&2
  exit 1
fi
printf '\nfuzzing: every target ran %s s without a failure\n' "$seconds"
