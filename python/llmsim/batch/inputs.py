"""An ns-3 experiment as the batch engine sees it: links, flow paths and parameters as arrays.

The topology, each flow's data path (the exact engine's ECMP choice) and the parsed
``config.txt`` come from the Rust packet engine (``_native.ns3_batch_inputs``), so the batch
engine routes every flow over the same links as the exact engine.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import _native

# Sweepable parameters: name -> (config.txt key, how the value is written there).
# Rates are bit/s; RP_TIMER is written in us; ECN thresholds are bytes at 100 Gbit/s (scaled
# by rate for faster ports, as the bundled configs scale them).
PARAMS: dict[str, str] = {
    "rate_ai_bps": "RATE_AI",
    "rate_hai_bps": "RATE_HAI",
    "min_rate_bps": "MIN_RATE",
    "ewma_gain": "EWMA_GAIN",
    "rp_timer_us": "RP_TIMER",
    "fast_recovery_times": "FAST_RECOVERY_TIMES",
    "kmin_bytes": "KMIN_MAP",
    "kmax_bytes": "KMAX_MAP",
    "pmax": "PMAX_MAP",
    "u_target": "U_TARGET",
    "mi_thresh": "MI_THRESH",
}

_NIC_RATE_BPS = 100_000_000_000


@dataclass(frozen=True)
class Ns3Inputs:
    """One experiment's static structure (shared by every point of a batch) and base parameters."""

    config_path: Path
    cc: str
    # Directed links.
    link_src: np.ndarray  # ns-3 node id
    link_dst: np.ndarray
    link_src_is_host: np.ndarray  # bool
    link_bps: np.ndarray  # bit/s
    link_delay_ps: np.ndarray
    # Flows, in the flow file's order.
    flow_size_bytes: np.ndarray  # payload bytes
    flow_start_ps: np.ndarray
    flow_standalone_fct_ns: np.ndarray
    flow_paths: list[list[int]]  # link indices, source NIC first
    flow_ack_links: list[list[int]]  # the links its ACKs take (unordered)
    config: dict[str, Any] = field(repr=False)

    @property
    def num_links(self) -> int:
        return len(self.link_bps)

    @property
    def num_flows(self) -> int:
        return len(self.flow_size_bytes)

    def base_params(self) -> dict[str, float]:
        """The sweepable parameters as ``config.txt`` sets them."""
        c = self.config
        ecn = _ecn_at(c["ecn_map"], _NIC_RATE_BPS)
        return {
            "rate_ai_bps": float(c["rate_ai_bps"]),
            "rate_hai_bps": float(c["rate_hai_bps"]),
            "min_rate_bps": float(c["min_rate_bps"]),
            "ewma_gain": float(c["ewma_gain"]),
            "rp_timer_us": c["rp_timer_ps"] / 1e6,
            "fast_recovery_times": float(c["fast_recovery_times"]),
            "kmin_bytes": float(ecn["kmin_bytes"]),
            "kmax_bytes": float(ecn["kmax_bytes"]),
            "pmax": float(ecn["pmax"]),
            "u_target": float(c["u_target"]),
            "mi_thresh": float(c["mi_thresh"]),
        }


def _ecn_at(ecn_map: Sequence[Mapping[str, Any]], rate_bps: float) -> Mapping[str, Any]:
    if not ecn_map:
        return {"kmin_bytes": 400_000, "kmax_bytes": 1_600_000, "pmax": 0.2}
    near = min(ecn_map, key=lambda e: abs(np.log(e["rate_bps"] / rate_bps)))
    k = rate_bps / near["rate_bps"]
    return {"kmin_bytes": near["kmin_bytes"] * k, "kmax_bytes": near["kmax_bytes"] * k, "pmax": near["pmax"]}


def load_ns3(config: str | os.PathLike[str]) -> Ns3Inputs:
    """Reads an ns-3 ``config.txt`` (and the topology and flow files it names) through the Rust
    packet engine. Raises ``llmsim.NetworkError`` for a malformed or missing file."""
    path = Path(config)
    d = json.loads(_native.ns3_batch_inputs(str(path)))
    links, flows, c = d["links"], d["flows"], d["config"]
    return Ns3Inputs(
        config_path=path,
        cc=c["cc"],
        link_src=np.array([x["src"] for x in links], dtype=np.int64),
        link_dst=np.array([x["dst"] for x in links], dtype=np.int64),
        link_src_is_host=np.array([x["src_is_host"] for x in links], dtype=bool),
        link_bps=np.array([x["bandwidth_bps"] for x in links], dtype=np.float64),
        link_delay_ps=np.array([x["delay_ps"] for x in links], dtype=np.int64),
        flow_size_bytes=np.array([f["size_bytes"] for f in flows], dtype=np.float64),
        flow_start_ps=np.array([f["start_ps"] for f in flows], dtype=np.int64),
        flow_standalone_fct_ns=np.array([f["standalone_fct_ns"] for f in flows], dtype=np.float64),
        flow_paths=[list(f["path"]) for f in flows],
        flow_ack_links=[list(f["ack_links"]) for f in flows],
        config=c,
    )


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def config_text(base: str, point: Mapping[str, float], topology: Path, flows: Path) -> str:
    """``config.txt`` text ``base`` with the sweep parameters of ``point`` set and the input
    files made absolute: what the exact engine runs for one point of a batch."""
    lines = base.splitlines()
    sets: dict[str, str] = {"TOPOLOGY_FILE": str(topology), "FLOW_FILE": str(flows)}
    for name, v in point.items():
        key = PARAMS.get(name)
        if key is None:
            raise ValueError(f"unknown batch parameter {name!r}; valid: {', '.join(sorted(PARAMS))}")
        if name.endswith("_bps"):
            sets[key] = f"{v / 1e6:g}Mb/s"
        elif key in ("KMIN_MAP", "KMAX_MAP"):
            kb = v / 1000.0
            sets[key] = f"2 100000000000 {_fmt(kb)} 400000000000 {_fmt(kb * 4)}"
        elif key == "PMAX_MAP":
            sets[key] = f"2 100000000000 {v:g} 400000000000 {v:g}"
        else:
            sets[key] = _fmt(v)
    out, seen = [], set()
    for line in lines:
        m = re.match(r"^(\S+)\s", line + " ")
        key = m.group(1) if m else ""
        if key in sets:
            out.append(f"{key} {sets[key]}")
            seen.add(key)
        else:
            out.append(line)
    out += [f"{k} {v}" for k, v in sets.items() if k not in seen]
    return "\n".join(out) + "\n"


def input_files(config: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The topology and flow files ``config.txt`` names, resolved as the exact engine resolves
    them (relative to its folder or a folder above)."""
    path = Path(config).resolve()
    text = path.read_text()

    def find(key: str) -> Path:
        m = re.search(rf"^{key}\s+(\S+)", text, re.MULTILINE)
        if not m:
            raise ValueError(f"{path}: no {key}")
        rel = Path(m.group(1))
        for d in [path.parent, *path.parents]:
            if (d / rel).exists():
                return d / rel
        raise FileNotFoundError(f"{path}: {key} {rel} not found relative to its folder or a folder above")

    return find("TOPOLOGY_FILE"), find("FLOW_FILE")
