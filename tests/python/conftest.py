import os
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
    items.sort(key=lambda item: "test_batch_packet" in item.nodeid)
