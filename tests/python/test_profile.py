"""``llmsim profile``: op enumeration -> timing (NumPy CPU backend) -> CSV -> ``compute.database``."""

import csv
from pathlib import Path

import llmsim
import pytest
from llmsim import profile as prof

# Tiny models: the NumPy backend times every op in well under a second.
DENSE = """\
name: tiny-dense
model: { preset: gpt3-13b, num_hidden_layers: 2, hidden_size: 256, num_attention_heads: 4,
         num_key_value_heads: 4, intermediate_size: 1024, vocab_size: 1000 }
training: { seq_length: 128, micro_batch_size: 1, global_batch_size: 8, dtype: bf16 }
parallel: { tp: 2, pp: 1, sequence_parallel: true, use_distributed_optimizer: true }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 8 }
network: { backend: analytical }
"""

# Variants that change the op set or the shape keys: MoE with shared experts and EP, GQA with
# context parallelism, unfused attention with full recomputation, fp32, pipeline stages.
VARIANTS = {
    "moe": [
        (
            'model={"preset": "deepseek-v2-lite", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,'
            ' "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "num_experts": 8,'
            ' "num_experts_per_tok": 2, "moe_intermediate_size": 128, "num_shared_experts": 1, "first_k_dense_layers": 1}'
        ),
        "parallel.tp=1",
        "parallel.sequence_parallel=false",
        "parallel.ep=4",
    ],
    # LatentMoE: the experts take 64-wide tokens behind two projections.
    "moe-latent": [
        (
            'model={"preset": "deepseek-v2-lite", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,'
            ' "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "num_experts": 8,'
            ' "num_experts_per_tok": 2, "moe_intermediate_size": 128, "moe_latent_size": 64}'
        ),
        "parallel.tp=1",
        "parallel.sequence_parallel=false",
        "parallel.ep=4",
    ],
    "gqa-cp": ["model.num_attention_heads=8", "model.num_key_value_heads=2", "parallel.cp=2"],
    "unfused-recompute": ["training.flash_attention=false", "training.recompute=full"],
    "fp32-pp": ["training.dtype=fp32", "parallel.pp=2", "parallel.tp=1", "parallel.sequence_parallel=false"],
}


@pytest.fixture
def dense(tmp_path: Path) -> Path:
    p = tmp_path / "dense.yaml"
    p.write_text(DENSE)
    return p


def _db_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def test_database_round_trips_through_compute_database(dense, tmp_path):
    out = tmp_path / "ops_db.csv"
    p = prof.profile(dense, out, backend="numpy", warmup=0, iters=2)
    assert p.gpu == "H100" and not p.skipped
    text = out.read_text()
    for what in ("date: ", "backend: numpy on cpu", "numpy ", "dtype bf16", "median of 2"):
        assert what in text, what
    db = {(r["op"], r["shape"]): float(r["time_us"]) for r in _db_rows(out)}
    assert len(db) == len(p.rows) > 30
    # A run with the database: every compute op takes its time from it (the board-to-board
    # spread off, so that the times are the file's own).
    ran = prof.run_ops(dense, [f"compute.database={out}", "compute.gpu_variability={sigma: 0}"])
    assert ran and {r["source"] for r in ran} == {"database"}
    for r in ran:
        assert float(r["time_us"]) == pytest.approx(db[(r["op"], r["shape"])], abs=1e-6)
    # With the spread on (the default), the job's slowest board paces the compute-bound ops, all
    # by one factor above 1; memory-bound ops keep the file's times.
    paced = prof.run_ops(dense, [f"compute.database={out}"])
    ratios = {r["bound"]: set() for r in paced}
    for r in paced:
        ratios[r["bound"]].add(round(float(r["time_us"]) / db[(r["op"], r["shape"])], 4))
    assert len(ratios["compute"]) == 1 and min(ratios["compute"]) > 1.0, ratios
    assert ratios.get("memory", {1.0}) == {1.0}, ratios
    assert prof.database_coverage(dense, out) == {"database": len(db)}
    # The same file from the scenario itself (a path relative to the scenario's directory).
    sc = tmp_path / "with_db.yaml"
    sc.write_text(DENSE + "compute: { database: ops_db.csv }\n")
    assert {r["source"] for r in prof.run_ops(sc)} == {"database"}


def test_cli_writes_and_checks_the_database(dense, tmp_path, capsys):
    out = tmp_path / "db.csv"
    assert prof.main([str(dense), "--out", str(out), "--backend", "numpy", "--warmup", "0", "--iters", "1"]) == 0
    said = capsys.readouterr().out
    n = len(prof.distinct_ops(prof.run_ops(dense)))
    assert n >= 38, n
    assert f"wrote {out}" in said and f"check: {n} of {n} distinct compute ops now come from the database" in said
    # Through the console entry point too.
    from llmsim.cli import main

    assert main(["profile", str(dense), "--list"]) == 0
    assert "gemm/wgrad[m=128,k=256,n=384" in capsys.readouterr().out


@pytest.mark.parametrize("variant", ["dense", *VARIANTS])
def test_enumeration_covers_every_compute_op(dense, variant):
    sets = VARIANTS.get(variant, [])
    rows = prof.run_ops(dense, sets)
    fp32 = "training.dtype=fp32" in sets
    ks, skipped = prof.kernels(rows, 4 if fp32 else 2)
    assert not skipped
    assert {(k.op, k.shape) for k in ks} == {(r["op"], r["shape"]) for r in rows}
    assert {k.op for k in ks} <= set(prof.KNOWN_OPS)
    flops = {(r["op"], r["shape"]): float(r["flops"]) for r in rows}
    for k in ks:
        d = k.dims
        if k.kind == "gemm":
            assert 2 * d["m"] * d["k"] * d["n"] == flops[(k.op, k.shape)], k
        if k.kind == "attention":
            assert d["head_dim"] * d["heads"] * int(k.shape.split("tp=")[1].split(",")[0]) == 256, k  # h
    kinds = {k.kind for k in ks}
    if variant == "moe":
        assert {"gather", "scatter"} <= kinds
        assert any(k.op == "expert_fc1" and k.dims["groups"] == 2 for k in ks)  # 8 experts / ep 4
        assert any(k.op == "shared_act" and k.flags["gated"] for k in ks)
    if variant == "moe-latent":
        dims = {k.op: k.dims for k in ks if k.variant == "fwd"}
        assert (dims["expert_fc1"]["k"], dims["expert_fc2"]["n"]) == (64, 64)
        assert (dims["moe_latent_down"]["k"], dims["moe_latent_down"]["n"]) == (256, 64)
        assert (dims["moe_latent_up"]["k"], dims["moe_latent_up"]["n"]) == (64, 256)
    if variant == "gqa-cp":
        attn = next(k for k in ks if k.op == "core_attention")
        assert (attn.dims["kv_heads"], attn.dims["sq"], attn.dims["skv"], attn.flags["causal"]) == (1, 64, 128, False)
    if variant == "unfused-recompute":
        # One kernel per op: the four batched GEMMs over every local head (batch = b x heads), the
        # softmax and, with dropout, the dropout, forward and backward.
        bmms = [k for k in ks if k.flags.get("bmm")]
        assert {k.op for k in bmms} == set(prof.ATTN_BMM)
        assert all(k.kind == "gemm" and k.dims["m"] % k.dims["groups"] == 0 for k in bmms)
        assert {"softmax", "dropout"} <= kinds
        assert not any(k.op == "core_attention" for k in ks)


def test_numpy_backend_times_every_kernel_kind(dense):
    """Every kernel kind of the MoE and unfused variants runs on the NumPy backend."""
    be = prof.NumpyBackend()
    for sets in (VARIANTS["moe"], VARIANTS["unfused-recompute"]):
        ks, _ = prof.kernels(prof.run_ops(dense, sets), 2)
        for k in ks:
            assert be.time_us(be.build(k), 0, 1) > 0, k


def test_unknown_op_rows_and_malformed_databases(dense, tmp_path):
    db = tmp_path / "db.csv"
    shape = "b=1,s=128,h=256,tp=2,sp=1,heads=2,kv=2"
    # A shape in the op column: the Rust reader names the line and the column.
    db.write_text(f'gpu,op,shape,time_us\nH100,"{shape}",attn_qkv,10\n')
    with pytest.raises(llmsim.ComputeError, match=r"line 2, column `op`.*not an op name"):
        prof.run_ops(dense, [f"compute.database={db}"])
    # A well-formed name no workload produces: the reader keeps it (it never matches); the
    # profiler's check names it, its line and the column, with the nearest valid names.
    db.write_text(f'# c\ngpu,op,shape,time_us\nH100,attn_qkv,"{shape}",10\nH100,attn_qvk,"{shape}",10\n')
    assert prof.database_coverage(dense, db)["database"] == 1
    with pytest.raises(prof.ProfileError, match=r"line 4, column `op`: unknown op `attn_qvk`.*attn_qkv"):
        prof.check_database(db)
    assert prof.main([str(dense), "--check", str(db)]) == 2
    # A GPU the catalog lacks: the reader's error names the `gpu` column.
    db.write_text(f'gpu,op,shape,time_us\nRTX9090,attn_qkv,"{shape}",10\n')
    with pytest.raises(llmsim.ComputeError, match=r"column `gpu`.*unknown GPU `RTX9090`"):
        prof.run_ops(dense, [f"compute.database={db}"])


def test_backend_choice_and_errors(dense, tmp_path):
    with pytest.raises(prof.ProfileError, match="valid: auto, torch, numpy"):
        prof.make_backend("jax")
    with pytest.raises(prof.ProfileError, match="numpy backend runs on cpu"):
        prof.make_backend("numpy", "cuda")
    if not prof.torch_available():
        assert isinstance(prof.make_backend(), prof.NumpyBackend)
        with pytest.raises(prof.ProfileError, match=r"pip install llmsim\[profile\]"):
            prof.make_backend("torch")
    with pytest.raises(llmsim.LlmsimError, match="does not divide the GPU count"):
        prof.run_ops(dense, ["parallel.tp=3"])


def test_torch_backend_on_the_device_at_hand(dense, tmp_path):
    """PyTorch (an optional extra): CUDA when there is a GPU, else the CPU."""
    torch = pytest.importorskip("torch")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = tmp_path / "db.csv"
    p = prof.profile(dense, out, backend="torch", device=device, warmup=1, iters=2)
    assert not p.skipped and all(t > 0 for _, t in p.rows)
    assert f"backend: torch on {device}" in out.read_text()
    assert prof.database_coverage(dense, out, [f"cluster.gpu={p.gpu}"]) == {"database": len(p.rows)}


def test_collectives_hint_is_a_valid_scenario_setting(dense):
    rows = [
        {"op": "all_reduce", "bytes": 1 << 20, "busbw_gbps": 100.0},
        {"op": "all_reduce", "bytes": 1 << 30, "busbw_gbps": 360.0},
        {"op": "all_gather", "bytes": 1 << 30, "busbw_gbps": 370.0},
    ]
    hint = prof.collectives_hint(rows)
    assert hint.startswith("cluster.nvlink_bandwidth: 450GBps"), hint
    key, value = hint.split(" (")[0].split(": ")
    sc = llmsim.Scenario.from_yaml(dense, set=[f"{key}={value}"])
    assert sc.resolved()["cluster"]["nvlink_bandwidth"]


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "data" / "op-db" / "h200").glob("*.csv"))
SHIPPED_DBS = [p for p in SHIPPED if p.read_text().startswith("# llmsim op-time database")]


def _listed_rows(text: str, prefix: str) -> set[tuple[str, ...]]:
    """The (op, shape) of each comment line starting with `prefix` (`# ...: OP SHAPE: why`)."""
    return {
        tuple(line.split(": ", 1)[1].split(": ")[0].split(" ", 1))
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_shipped_h200_databases_cover_their_scenarios(monkeypatch):
    """Every op database measured on the H200 (data/op-db/h200) names only known ops, and its own
    scenario, on cluster.gpu H200, takes every op the database timed from it (the rest, FP8 casts
    and attention kernels SDPA lacks, keep the roofline, as each file's header lists, and so do
    ops the workload gained after the measurement that the profiler has no kernel for: GPT-OSS's
    expert bias loop and clamp). Rows of ops the workload no longer emits for that scenario stay
    as measured, each listed in the file, and are the only rows its scenario leaves unused."""
    assert len(SHIPPED_DBS) >= 12
    root = Path(__file__).resolve().parents[2]
    for db in SHIPPED_DBS:
        text = db.read_text()
        scenario = prof.database_scenario(db)
        assert "device NVIDIA H200" in text, db.name
        rows = _db_rows(db)
        assert prof.check_database(db) == len(rows)
        assert {r["gpu"] for r in rows} == {"H200"}
        left_out = text.count("# not measured (the roofline stays)")
        cov = prof.database_coverage(root / scenario, db, ["cluster.gpu=H200"])
        gone = _listed_rows(text, "# measured, not in the workload now: ")
        assert gone <= {(r["op"], r["shape"]) for r in rows}, db.name
        assert cov.get("database", 0) == len(rows) - len(gone), db.name
        listed = _listed_rows(text, "# not measured")
        ops = prof.run_ops(root / scenario, ["cluster.gpu=H200"])
        assert not gone & {(r["op"], r["shape"]) for r in ops}, db.name
        _, skipped = prof.kernels(ops, 2)
        unknown = {(r["op"], r["shape"]) for r, why in skipped if "has no kernel in the profiler" in why} - listed
        assert cov.get("roofline", 0) == left_out + len(unknown), db.name
    # The README's command, as written, from the repository's root.
    monkeypatch.chdir(root)
    assert prof.main(["examples/gpt3-13b-128gpu.yaml", "--compare", "data/op-db/h200/gpt3-13b.csv"]) == 0


def test_compare_sets_measured_beside_the_model(dense, tmp_path, capsys):
    """`--compare`: every op of the database, its measured time from the file and llmsim's from a
    run of the scenario; the class table's ratios are the count-weighted sums of those."""
    out = tmp_path / "db.csv"
    prof.profile(dense, out, backend="numpy", warmup=0, iters=1)
    rows = prof.compare_database(dense, out)
    db = {(r["op"], r["shape"]): float(r["time_us"]) for r in _db_rows(out)}
    assert len(rows) == len(db)
    one_board = prof.run_ops(dense, ["compute.gpu_variability.sigma=0"])
    model = {(r["op"], r["shape"]): float(r["time_us"]) for r in prof.distinct_ops(one_board)}
    for c in rows:
        assert c.measured_us == db[(c.op, c.shape)]
        assert c.model_us == model[(c.op, c.shape)]
        assert c.count >= 1
    total = sum(c.measured_us * c.count for c in rows) / sum(c.model_us * c.count for c in rows)
    table = prof.comparison_table(rows, per_op=True)
    assert table[len({c.op_class + c.bound for c in rows}) + 1].split()[-1] == f"{total:.3f}"
    assert prof.main([str(dense), "--compare", str(out)]) == 0
    assert "measured / llmsim" in capsys.readouterr().out
    other = tmp_path / "other.csv"
    other.write_text("gpu,op,shape,time_us\nH100,nothing,x,1\n")
    assert prof.main([str(dense), "--compare", str(other)]) == 2
    # A bad file is an error naming the line and the column, not a traceback.
    other.write_text("gpu,op,time_us\nH100,attn_qkv,1\n")
    assert prof.main([str(dense), "--compare", str(other)]) == 2
    assert "line 1: no `shape` column" in capsys.readouterr().err
    other.write_text("gpu,op,shape,time_us\nH100,attn_qkv,x,fast\n")
    assert prof.main([str(dense), "--compare", str(other)]) == 2
    assert "line 2, column `time_us`" in capsys.readouterr().err
