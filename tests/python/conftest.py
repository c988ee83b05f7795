from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SMALL = """\
name: small
model: { preset: gpt3-13b, num_hidden_layers: 8 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 32 }
parallel: { tp: 2, pp: 1 }
cluster: { gpu: H100, gpus: 16, gpus_per_node: 8, topology: { kind: rail-fat-tree, nic: { bandwidth: 400Gbps } } }
network: { backend: flow }
"""


NS3 = ROOT / "examples" / "ns3"

# HPCC's settings for the bundled ns-3 experiment (whose config.txt runs DCQCN).
HPCC = {
    "CC_MODE": "3",
    "RATE_AI": "40Mb/s",
    "RATE_HAI": "40Mb/s",
    "HAS_WIN": "1",
    "VAR_WIN": "1",
    "FAST_REACT": "1",
    "INT_MULTI": "4",
    "ACK_HIGH_PRIO": "0",
}


def ns3_experiment(d: Path, cc: str, flows: list[str] | None = None, *, tag: str | None = None, **sets: str) -> Path:
    """An ns-3 experiment on the bundled k = 4 fat-tree (16 hosts): the bundled run's config.txt
    under `cc` (dcqcn as bundled, or hpcc with `HPCC`), its keys in `sets` replaced, and `flows`
    (ns-3 flow-file lines; default: the bundled permutation cut to 16 flows of 1 MB). Written in
    `d` as flows_<tag>.txt and config_<tag>.txt (`tag` defaults to `cc`); returns the config."""
    tag = tag or cc
    if flows is None:
        perm = (NS3 / "inputs" / "flow_perm16_10MB.txt").read_text().splitlines()
        flows = [perm[0]] + [re.sub(r" 10000000 ", " 1000000 ", line) for line in perm[1:]]
    (d / f"flows_{tag}.txt").write_text("\n".join(flows) + "\n")
    keys = {"TOPOLOGY_FILE": str(NS3 / "inputs" / "fattree_k4_16h.txt"), "FLOW_FILE": str(d / f"flows_{tag}.txt")}
    if cc == "hpcc":
        keys.update(HPCC)
    keys.update(sets)
    text = (NS3 / "runs" / "ft16_perm_dcqcn" / "config.txt").read_text()
    lines = [f"{k} {keys[k]}" if (k := line.split(" ", 1)[0]) in keys else line for line in text.splitlines()]
    cfg = d / f"config_{tag}.txt"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


@pytest.fixture
def small(tmp_path: Path) -> Path:
    p = tmp_path / "small.yaml"
    p.write_text(SMALL)
    return p


@pytest.fixture
def llmsim_script() -> list[str]:
    """The console script installed with the package."""
    exe = shutil.which("llmsim", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("the llmsim console script is not installed next to this Python")
    return [exe]


@pytest.fixture
def rust_cli() -> list[str]:
    """The cargo-built binary (scripts/test.sh builds it); else skip."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for prof in ("debug", "release"):
        exe = target / prof / "llmsim"
        if exe.exists():
            return [str(exe)]
    pytest.skip("no cargo-built llmsim binary under target/")


def pytest_collection_modifyitems(config, items):
    """The JAX tests (the batch packet engine) run last: JAX starts threads when imported, and a
    later os.fork() in the same process (the Ray test's workers) may deadlock on them."""
    items.sort(key=lambda item: any(m in item.nodeid for m in ("test_batch_packet", "test_batch_sweep")))
