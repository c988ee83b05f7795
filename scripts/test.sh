#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every Rust test. Runs on a clean clone with no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A clean CI clone gains nothing from incremental caches, and they took gigabytes of its disk
# (CI stop 56 ran out of space). Set CARGO_INCREMENTAL=1 to keep them for local re-runs.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Logs in a private file: several checkouts may run this script at once on one machine.
log=$(mktemp)
trap 'rm -f "$log" "$log.maturin" "$log.fuzz"' EXIT
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The fuzz targets (fuzz/, outside the workspace) must keep compiling and keep passing their
# committed corpora as the parsers change. Fuzzing needs nightly and cargo-fuzz (fuzz/README.md);
# replaying the corpora does not: built on stable (sharing this workspace's target dir), each target
# runs every file of fuzz/corpus/<target>/ once and fails on a panic or a crash.
cargo build --quiet --manifest-path fuzz/Cargo.toml --bins --target-dir target
for corpus in fuzz/corpus/*/; do
    t=$(basename "$corpus")
    target/debug/"$t" "$corpus" -runs=0 > "$log.fuzz" 2>&1 || { cat "$log.fuzz"; echo "fuzz corpus replay failed: $t"; exit 1; }
done
if [ "${LLMSIM_SKIP_PYTHON:-0}" != 1 ]; then
    # A local venv (.venv) for the Python package and for the Rust tests that run Python
    # (mlc-chakra-generated traces: crates/llmsim-sim/tests/chakra_mlc.rs).
    [ -x .venv/bin/python ] || python3 -m venv .venv
    # Versions: tests/python/constraints.txt.
    # numpy: llmsim profile's CPU backend (tests/python/test_profile.py); PyTorch is not installed
    # here (a GPU-sized wheel), so the torch test skips. jsonschema: the schema tests validate the
    # examples with it (crates/llmsim-cli/tests/schema.rs). pyarrow: Parquet results (test_parquet.py).
    # jax (CPU wheels): the batch packet engine, llmsim.batch (test_batch_packet.py; skips without it);
    # pyyaml: its packet-level sweep files (test_batch_sweep.py).
    extra="ray"   # the Ray sweep test (a single-node Ray); LLMSIM_SKIP_RAY=1 leaves it out (the test then skips)
    [ "${LLMSIM_SKIP_RAY:-0}" = 1 ] && extra=""
    .venv/bin/pip install -q --disable-pip-version-check -c tests/python/constraints.txt maturin pandas numpy matplotlib pytest ruff optuna protobuf jsonschema pyarrow "jax[cpu]" pyyaml $extra
    .venv/bin/pip install -q --disable-pip-version-check -c tests/python/constraints.txt --no-deps mlc-chakra
    export LLMSIM_PYTHON="$PWD/.venv/bin/python"
fi
cargo test --workspace --quiet 2>&1 | tee "$log"
# The packet engine's per-id tables skip bounds checks in release builds: its out-of-range getter
# test must pass there too (issue 30).
cargo test --release --quiet -p llmsim-net --test out_of_range_ids 2>&1 | tee -a "$log"
# The Python package: maturin builds crates/llmsim-python into a local venv (.venv), then ruff and
# pytest run tests/python (the Ray test included, unless LLMSIM_SKIP_RAY=1).
if [ "${LLMSIM_SKIP_PYTHON:-0}" != 1 ]; then
    cargo build --quiet -p llmsim-cli   # target/debug/llmsim: the Python-vs-CLI equality test runs it
    VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop -q > "$log.maturin" 2>&1 || { cat "$log.maturin"; exit 1; }
    .venv/bin/ruff check -q python tests/python bench
    .venv/bin/ruff format --check -q python tests/python bench
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/python 2>&1 | tee -a "$log"
fi
# A plain closing line any CI reader understands.
passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
