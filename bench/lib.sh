# Sourced by bench scripts after they cd to the repository root. Sets `bin`, the llmsim binary
# (LLMSIM=path/to/llmsim, else this checkout's release build, built here), and `tmp`, a scratch
# directory removed when the script exits.
if [[ -n ${LLMSIM:-} ]]; then
  bin=$(realpath "$LLMSIM")
else
  cargo build --release -q -p llmsim-cli
  bin=$(realpath "${CARGO_TARGET_DIR:-target}")/release/llmsim
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
