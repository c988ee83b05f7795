"""`llmsim plot` on a packet run's folder (`llmsim ns3 run --out`)."""

from pathlib import Path

import pytest
from llmsim import cli, netplot

# Six hosts on one 100G switch; five senders into host 0, staggered, of mixed sizes.
TOPO = "7 1 6\n6\n" + "".join(f"{h} 6 100Gbps 1000ns 0\n" for h in range(6))
FLOWS = "5\n" + "".join(
    f"{s} 0 3 100 {size} {start}\n"
    for s, size, start in [
        (1, 2000000, "2.0"),
        (2, 1000000, "2.0"),
        (3, 500000, "2.00001"),
        (4, 100000, "2.00002"),
        (5, 20000, "2.00003"),
    ]
)


@pytest.fixture
def packet_run(tmp_path: Path) -> Path:
    (tmp_path / "topo.txt").write_text(TOPO)
    (tmp_path / "flow.txt").write_text(FLOWS)
    (tmp_path / "config.txt").write_text("CC_MODE 1\nTOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\n")
    out = tmp_path / "out"
    assert cli.main(["ns3", "run", str(tmp_path / "config.txt"), "--out", str(out), "--util-bin", "1us"]) == 0
    return out


def test_packet_run_report(packet_run: Path, capsys):
    assert netplot.is_packet_run(str(packet_run))
    # Buckets are sorted by size and hold every flow; slowdowns are at least 1.
    t = netplot.slowdown_by_size(str(packet_run), buckets=3)
    assert list(t["flows"]) == [2, 2, 1] and t["size_bytes"].is_monotonic_increasing
    assert (t["p50"] >= 1).all() and (t["p99"] >= t["p50"]).all()
    assert cli.main(["plot", str(packet_run)]) == 0
    assert "report.html" in capsys.readouterr().out
    page = (packet_run / "report.html").read_text(encoding="utf-8")
    # Slowdown, CDF, queues and utilization; this incast under DCQCN pauses nobody.
    assert page.count("data:image/png;base64,") == 4
    assert "no PFC pause in this run" in page and "dcqcn" in page
    with pytest.raises(SystemExit):
        cli.main(["plot", str(packet_run), "--x", "parallel.tp"])


def test_pfc_intervals_pair_pauses_with_resumes(tmp_path: Path):
    (tmp_path / "pfc.txt").write_text("100 25 1 1 1\n150 25 1 1 0\n200 25 1 1 1\n300 7 0 1 1\n310 7 0 1 0\n")
    iv = netplot.pfc_intervals(str(tmp_path))
    rows = sorted(map(tuple, iv[["node", "ifindex", "start_ns", "end_ns"]].to_numpy().tolist()))
    # Node 25's second pause never resumes: it lasts to the last event.
    assert rows == [(7, 1, 300, 310), (25, 1, 100, 150), (25, 1, 200, 310)]


def test_not_a_packet_run_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="llmsim ns3 run"):
        netplot.flows(str(tmp_path))


# Four GPUs, two per server on a 100G rail fat-tree: the data-parallel all-reduce crosses the network.
TINY = """\
model: { hidden_size: 256, num_hidden_layers: 2, num_attention_heads: 4, intermediate_size: 1024, vocab_size: 128, gated_mlp: false }
training: { seq_length: 512, micro_batch_size: 1, global_batch_size: 4 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: H100, gpus: 4, gpus_per_node: 2, topology: { kind: rail-fat-tree, nic: { bandwidth: 100Gbps } } }
network: { backend: packet, cc: hpcc }
"""


def test_llm_packet_run_report(tmp_path: Path, capfd):
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "run"
    assert cli.main(["run", str(tmp_path / "tiny.yaml"), "--out", str(out)]) == 0
    assert "queues.csv,pfc.csv" in capfd.readouterr().out
    assert netplot.is_llm_packet_run(str(out)) and not netplot.is_packet_run(str(out))
    assert cli.main(["plot", str(out)]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    # Transfers and queues drawn; nothing paused.
    assert page.count("data:image/png;base64,") == 2
    assert "no PFC pause in this run" in page and "packet events" in page


def test_llm_pfc_log_becomes_intervals(tmp_path: Path):
    (tmp_path / "pfc.csv").write_text("time_us,node,node_kind,link,pause\n1.000,5,switch1,40,1\n1.500,5,switch1,40,0\n")
    iv = netplot.llm_pfc_intervals(str(tmp_path))
    assert iv[["node", "ifindex", "start_ns", "end_ns"]].to_numpy().tolist() == [[5, 40, 1000, 1500]]
