"""The time-stepped batch packet engine (llmsim.batch) against the exact event-driven engine, on
a small ns-3 experiment: the bundled k = 4 fat-tree (16 hosts) and a permutation of 1 MB flows,
under DCQCN and HPCC. The exact engine runs inside the test (no stored numbers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ns3_experiment
from llmsim import batch

jax = pytest.importorskip("jax")

# The bound the batch engine is validated to (bench/README.md): mean FCT within 5% of the
# exact engine's.
MEAN_FCT_BOUND = 0.05
# DCQCN on this 1 MB permutation: the batch is 3-4% slow on average over seeds (+4.1% against 6
# seeds of the exact engine, +5.6% against seeds 1-4 at the base point; before the FIFO cohorts
# and per-hop mark delays that fixed the incast it was 1.6% fast). Its bound is 7%. One draw's
# mean FCT spreads widely here (which of two colliding flows is marked first): the mean of 8
# draws against seeds 1-4 ranged over +1.5% to +9.8% with the batch's seed (1-5, measured), so
# DCQCN compares 32 draws against 6 seeds (batch seeds 1-3: +1.0% to +5.7%).
DCQCN_PERM_1MB_BOUND = 0.07


@pytest.fixture(scope="module")
def experiments(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, batch.Ns3Inputs]]:
    d = tmp_path_factory.mktemp("ns3")
    out = {}
    for cc in ("dcqcn", "hpcc"):
        cfg = ns3_experiment(d, cc)
        out[cc] = (cfg, batch.load_ns3(cfg))
    return out


@pytest.mark.parametrize("cc", ["dcqcn", "hpcc"])
def test_batch_mean_fct_within_bound_of_the_exact_engine(experiments: dict, cc: str) -> None:
    cfg, inp = experiments[cc]
    assert inp.cc == cc and inp.num_flows == 16
    points = [{}, {"rate_ai_bps": 2 * inp.base_params()["rate_ai_bps"]}]
    # DCQCN's ECN marks are random draws (in both engines): each point runs 32 times with its own
    # draws in the batch and with 6 seeds on the exact engine, and the means are compared. HPCC
    # draws nothing: one exact run (its 8 batch runs are the same experiment).
    reps, seeds = (32, (1, 2, 3, 4, 5, 6)) if cc == "dcqcn" else (8, (1,))
    res = batch.run_batch(inp, [p for p in points for _ in range(reps)], backend="cpu")
    assert res.device.startswith("cpu")
    assert res.fct_ns.shape == (2 * reps, 16) and not np.isnan(res.fct_ns).any()
    for e, point in enumerate(points):
        exact = [batch.exact_fct_ns(cfg, point, seed=s) for s in seeds]
        assert not np.isnan(exact).any()
        err = res.fct_ns[e * reps : (e + 1) * reps].mean() / np.mean(exact) - 1
        bound = DCQCN_PERM_1MB_BOUND if cc == "dcqcn" else MEAN_FCT_BOUND
        assert abs(err) <= bound, f"{cc} point {point}: mean FCT error {err:+.1%}"
    # No flow beats its standalone FCT (base RTT + bytes at the bottleneck) by more than a step.
    assert (res.fct_ns >= inp.flow_standalone_fct_ns[None, :] - res.step_ps / 1000).all()


def _incast(tmp_path: Path) -> Path:
    """config.txt for the ft16 incast of the ns-3 reference runs: hosts 1..15 each send 1 MB to
    host 0 at t = 2 s, DCQCN with the bundled run's parameters."""
    lines = ["15"] + [f"{h} 0 3 100 1000000 2.000000000" for h in range(1, 16)]
    return ns3_experiment(tmp_path, "dcqcn", lines, tag="incast")


# The DCQCN incast's bound (bench/README.md): the exact engine is unfair there (flows whose
# packets reach the bottleneck first are marked and held at MIN_RATE), which the batch follows
# with FIFO cohorts at the ports; the error left is larger than the permutation's.
INCAST_MEAN_FCT_BOUND = 0.05


def _assert_incast_mean_fcts(cfg: Path, inp, points: list[dict], label: str):
    """Each point's mean FCT within INCAST_MEAN_FCT_BOUND of the exact engine's. Both engines
    draw ECN marks at random: 8 draws of the batch against 4 seeds of the exact engine (their
    spread is 2-3% of the mean per draw). Returns the batch result and the draws per point."""
    reps, seeds = 8, (1, 2, 3, 4)
    res = batch.run_batch(inp, [p for p in points for _ in range(reps)], backend="cpu")
    assert not np.isnan(res.fct_ns).any()
    for e, point in enumerate(points):
        exact = np.mean([batch.exact_fct_ns(cfg, point, seed=s).mean() for s in seeds])
        err = res.fct_ns[e * reps : (e + 1) * reps].mean() / exact - 1
        print(f"{label} {point}: exact {exact:.0f} ns, batch error {err:+.2%}")
        assert abs(err) <= INCAST_MEAN_FCT_BOUND, f"{label} point {point}: mean FCT error {err:+.1%}"
    return res, reps


def test_dcqcn_incast_mean_fct_within_bound_of_the_exact_engine(tmp_path: Path) -> None:
    cfg = _incast(tmp_path)
    inp = batch.load_ns3(cfg)
    assert inp.cc == "dcqcn" and inp.num_flows == 15
    points = [{}, {"kmin_bytes": 800e3, "kmax_bytes": 3200e3}, {"rate_ai_bps": 80e6, "pmax": 0.5}]
    res, reps = _assert_incast_mean_fcts(cfg, inp, points, "incast")
    # The exact engine's flows do not finish together; neither do the batch's (the spread of one
    # experiment's FCTs is at least a quarter of its mean in both).
    exact0 = batch.exact_fct_ns(cfg, {}, seed=1)
    assert (exact0.max() - exact0.min()) / exact0.mean() > 0.25
    assert ((res.fct_ns[:reps].max(1) - res.fct_ns[:reps].min(1)) / res.fct_ns[:reps].mean(1) > 0.25).all()


def test_dcqcn_incast_small_kmin_cnps_come_one_per_acked_packet(tmp_path: Path) -> None:
    """The ft16 incast at small ECN thresholds (kmin/kmax 100/400 KB): the bottleneck's queue
    stays above kmax for hundreds of microseconds while the senders sit at MIN_RATE (1 Gb/s, a
    packet every 8.4 us). The exact engine's receiver ACKs each packet and echoes its mark, so a
    flow there sees at most one CNP a packet and its alpha decays between them; the batch drew a
    CNP every 1 us step on the fractional packets served (~80% of steps above kmax), held alpha
    near 1 and cut the recovering flows too deep: these two points were +9.2% and +13.6% slow
    (measured, 8 draws against 4 seeds as here). With one draw per whole ACK: +1.3% and +2.4%."""
    cfg = _incast(tmp_path)
    inp = batch.load_ns3(cfg)
    small = {"rate_ai_bps": 5e6, "kmin_bytes": 100e3, "kmax_bytes": 400e3}
    points = [{**small, "pmax": 0.05}, {**small, "pmax": 0.5}]
    _assert_incast_mean_fcts(cfg, inp, points, "small-kmin incast")


def _hpcc_incast(tmp_path: Path) -> Path:
    """The ft16 incast (hosts 1..15 each send 1 MB to host 0 at t = 2 s) under HPCC."""
    lines = ["15"] + [f"{h} 0 3 100 1000000 2.000000000" for h in range(1, 16)]
    return ns3_experiment(tmp_path, "hpcc", lines, tag="incast_hp")


# At a small RATE_AI the exact engine keeps the unfairness of the incast's first drain (HPCC's
# multiplicative update preserves the flows' rate ratios; a small additive step evens them out
# slowly): the flows whose first window leaves the bottleneck last wait without ACKs and come out
# at a higher rate. The batch follows it with FIFO cohorts and an EWMA that weighs the gap since
# a flow's last INT sample; with a fixed weight per step (and proportional sharing) the batch's
# mean FCT was +8.8% and +8.5% off at these two points (bench/README.md, issue 36).
def test_hpcc_incast_small_rate_ai_mean_fct_within_bound_of_the_exact_engine(tmp_path: Path) -> None:
    cfg = _hpcc_incast(tmp_path)
    inp = batch.load_ns3(cfg)
    assert inp.cc == "hpcc" and inp.num_flows == 15
    points = [{"u_target": 0.80, "rate_ai_bps": 10e6}, {"u_target": 0.85, "rate_ai_bps": 10e6}]
    res = batch.run_batch(inp, points, backend="cpu")
    assert not np.isnan(res.fct_ns).any()
    errs = []
    for e, point in enumerate(points):
        exact = batch.exact_fct_ns(cfg, point, seed=1)
        assert not np.isnan(exact).any()
        errs.append(res.fct_ns[e].mean() / exact.mean() - 1)
        b = res.fct_ns[e]
        spread = ((b.max() - b.min()) / b.mean(), (exact.max() - exact.min()) / exact.mean())
        print(f"HPCC incast {point}: exact {exact.mean():.0f} ns, batch error {errs[-1]:+.2%}, spread {spread}")
        # Both engines' FCTs spread by over a third of their mean (the old batch's: under a fifth).
        assert min(spread) > 1 / 3, f"HPCC incast {point}: FCT spread (batch, exact) {spread}"
    assert max(abs(x) for x in errs) <= INCAST_MEAN_FCT_BOUND, f"HPCC incast mean FCT errors {errs}"


def test_batch_is_deterministic_and_points_are_independent(experiments: dict) -> None:
    inp = experiments["dcqcn"][1]
    a = batch.run_batch(inp, [{"kmin_bytes": 100e3}, {}], seed=3, backend="cpu")
    b = batch.run_batch(inp, [{"kmin_bytes": 100e3}, {}], seed=3, backend="cpu")
    np.testing.assert_array_equal(a.fct_ns, b.fct_ns)
    # A different parameter gives a different experiment.
    assert not np.array_equal(a.fct_ns[0], a.fct_ns[1])


def test_a_point_written_for_the_exact_engine_reads_back(experiments: dict, tmp_path: Path) -> None:
    cfg, inp = experiments["dcqcn"]
    point = {"rate_ai_bps": 8e7, "rp_timer_us": 100.0, "kmin_bytes": 200e3, "kmax_bytes": 800e3, "pmax": 0.5}
    topo, flows = batch.input_files(cfg)
    p = tmp_path / "point.txt"
    p.write_text(batch.config_text(cfg.read_text(), point, topo, flows))
    back = batch.load_ns3(p).base_params()
    for k, v in point.items():
        assert back[k] == pytest.approx(v), k
    assert back["ewma_gain"] == inp.base_params()["ewma_gain"]


def test_unknown_parameters_are_errors(experiments: dict) -> None:
    inp = experiments["dcqcn"][1]
    with pytest.raises(ValueError, match="unknown batch parameter 'rate_ai'"):
        batch.run_batch(inp, [{"rate_ai": 1.0}], backend="cpu")
    with pytest.raises(ValueError, match="at least one"):
        batch.run_batch(inp, [], backend="cpu")
    with pytest.raises(ValueError, match="fifo_cohorts and cohort_steps must be at least 1"):
        batch.run_batch(inp, [{}], backend="cpu", fifo_cohorts=0)


def test_a_backend_without_a_device_is_a_clear_error(experiments: dict) -> None:
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has a GPU")
    assert batch.device_info(None).startswith("cpu")
    with pytest.raises(RuntimeError, match="no JAX 'gpu' device here"):
        batch.run_batch(experiments["dcqcn"][1], [{}], backend="gpu")


def _staggered(tmp_path: Path, cc: str) -> Path:
    """config.txt for 40 flows of 200 KB-1 MB on the bundled fat-tree, one starting every 20 us:
    at any time a few are live, so live-flow windows hold a changing subset of them."""
    lines = ["40"]
    for i in range(40):
        src, dst = i % 16, (i * 5 + 3) % 16
        lines.append(f"{src} {dst} 3 100 {200_000 * (1 + i % 5)} {2.0 + i * 20e-6:.9f}")
    return ns3_experiment(tmp_path, cc, lines, tag=f"staggered_{cc}")


@pytest.mark.parametrize("cc", ["dcqcn", "hpcc"])
def test_live_flow_windows_match_one_window_with_every_flow(tmp_path: Path, cc: str) -> None:
    """Windows that hold only the live flows (carried between slots as flows come and go) give
    the FCTs of one window holding all 40 flows: they only drop flows done in every experiment
    (and the under-half-packet rest they leave in queues)."""
    inp = batch.load_ns3(_staggered(tmp_path, cc))
    assert inp.num_flows == 40 and inp.cc == cc
    points = [{}, {"rate_ai_bps": 4 * inp.base_params()["rate_ai_bps"]}]
    whole = batch.run_batch(inp, points, backend="cpu", window_steps=0)
    win = batch.run_batch(inp, points, backend="cpu", window_steps=32)
    assert whole.windows == 1 and whole.slots == 40
    assert win.windows > 10 and win.slots < 40
    assert not np.isnan(whole.fct_ns).any() and not np.isnan(win.fct_ns).any()
    err = np.abs(win.fct_ns / whole.fct_ns - 1)
    print(f"{cc}: windows {win.windows}, slots {win.slots}, FCT difference max {err.max():.2e}")
    np.testing.assert_allclose(win.fct_ns, whole.fct_ns, rtol=1e-3)


def test_hpcc_int_words_come_from_switches_not_the_senders_nic(tmp_path: Path) -> None:
    """One host sends to three others at once (HPCC, U_TARGET 0.8): its NIC is the only busy
    link. Switches stamp HPCC's INT words, a host's NIC does not (the exact engine, as ns-3), so
    each flow sees its switch ports about a third used and the three fill the NIC together.
    Counting the NIC's utilisation in U held the host at U_TARGET of its line rate (its flows'
    mean FCT 11% long here (measured), the fat320 web-search points' 4-9% long)."""
    lines = ["3"] + [f"1 {dst} 3 100 2000000 2.000000000" for dst in (2, 6, 11)]
    cfg = ns3_experiment(tmp_path, "hpcc", lines, tag="fanout", U_TARGET="0.8")
    inp = batch.load_ns3(cfg)
    assert inp.cc == "hpcc" and inp.num_flows == 3 and inp.base_params()["u_target"] == pytest.approx(0.8)
    res = batch.run_batch(inp, [{}], backend="cpu")
    exact = batch.exact_fct_ns(cfg, {}, seed=1)
    err = res.fct_ns[0].mean() / exact.mean() - 1
    print(f"fan-out: exact {exact.mean():.0f} ns, batch error {err:+.2%}")
    assert abs(err) <= MEAN_FCT_BOUND, f"fan-out mean FCT error {err:+.1%}"


def test_large_flows_finish_their_byte_sums_do_not_drift(tmp_path: Path) -> None:
    """Four 200 MB DCQCN flows (host 1 sends three, host 3 one into host 2 with host 1's first):
    a flow's sent and acked bytes are float32 sums of one increment per step, which drifted apart
    by more than the half packet the done test allows (a unit of 16 bytes at 200 MB): flows sent
    every byte and were never all acked, live to the stop time (as 11 of the 100 fat320 DCQCN
    points' 20-27 MB flows). With compensated sums every flow finishes (in about 50 ms)."""
    lines = ["4"] + [f"{s} {d} 3 100 200000000 2.000000000" for s, d in ((1, 2), (3, 2), (1, 6), (1, 11))]
    cfg = ns3_experiment(tmp_path, "dcqcn", lines, tag="big", SIMULATOR_STOP_TIME="2.1")
    inp = batch.load_ns3(cfg)
    assert inp.cc == "dcqcn" and inp.num_flows == 4
    res = batch.run_batch(inp, [{}, {"rate_ai_bps": 8e7, "pmax": 0.5}], backend="cpu")
    print(f"200 MB flows: FCTs {np.round(res.fct_ns / 1e6, 3).tolist()} ms, end step {res.steps}")
    assert not np.isnan(res.fct_ns).any()
    stop_step = round(2.1e12 / res.step_ps)
    assert res.steps < stop_step
    # Four flows of 200 MB over host 1's and host 2's 100 Gb/s links: at least 3 x 200 MB at
    # 100 Gb/s (48 ms) for host 1's.
    assert res.fct_ns.max() >= 48e6
