#!/usr/bin/env bash
# The full test suite, as CI runs it (README: "Run the tests").
# Installs what it needs, then: format, lints, unit and integration tests,
# and an end-to-end sweep of every collective on the host engine.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
# Fixtures live in ../shared beside the checkout; in CI their absence is a failure.
if [ "${CI:-}" = "true" ]; then
  export COLLBENCH_REQUIRE_FIXTURES=1
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "ci: no cargo on PATH; installing Debian's Rust toolchain"
  apt-get update -qq && apt-get install -y -qq cargo rustc rustfmt rust-clippy
fi
rustup component add clippy rustfmt >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --all-targets --release -- -D warnings

echo "== cargo test"
cargo test --release --all-targets

echo "== end-to-end: every collective and algorithm on the host engine"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in 2 3 5 8; do
  ./target/release/collbench all --device host --ranks "$n" --algo all --sizes 8B:256K:x4 \
    --iters 2 --warmup 1 --json "$out/all$n.json" --csv "$out/all$n.csv" -q
done
./target/release/collbench all-reduce --device host --ranks 3 --dtype all --op all --sizes 8B:64K:x8 -q
./target/release/collbench broadcast --device host --ranks 4 --root all --sizes 8B:64K:x8 -q

echo "== end-to-end: plots, nccl-tests text, report, compare"
./target/release/collbench all --device host --ranks 3 --algo all --sizes 8B:1M:x8 --iters 2 \
  --json "$out/r.json" --plot "$out/r.png" --format nccl-tests > "$out/r.txt"
grep -q '^# Out of bounds values : 0 OK' "$out/r.txt"
./target/release/collbench report "$out/r.json" "$out/all3.json" --plot "$out/r.svg" -q
./target/release/collbench compare "$out/all3.json" "$out/all3.json" > /dev/null
echo "ci: all passed"
