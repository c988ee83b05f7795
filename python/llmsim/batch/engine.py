"""The time-stepped batch packet engine (Multiverse, NSDI'25, applied to llmsim's ns-3 RDMA model).

Many experiments (points of a CC parameter sweep) over one topology run together. State is
columns across experiments: arrays shaped ``(E, ...)`` with E experiments first. Time advances
in fixed steps equal to the minimum link delay. Each step every egress port *pulls* from the
flows queued at it (no locks: a port only writes its own columns), and one jitted step function
updates every port and every flow of every experiment; ``lax.while_loop`` runs the steps. The
same code runs on JAX's CPU backend (CI) and, with a CUDA jaxlib, on a GPU.

Model (fluid per step, not per packet):

- A flow's bytes are fluid in per-hop queues ``q[e, f, h, k]``: the bytes of flow f waiting at
  the egress port of hop h (hop 0 is the sender's NIC) that arrived there in age cohort k. A
  port serves up to its capacity per step, oldest cohort first, a cohort shared among its flows
  in proportion to their bytes (FIFO at the cohorts' resolution; ``FIFO_COHORTS``); served
  bytes reach the next hop after the link's delay (whole steps).
- The sender paces at the flow's CC rate, within its window (HPCC: ``HAS_WIN``/``VAR_WIN``),
  and the NIC never holds more than one step of line rate.
- ACKs take their own path (the exact engine's ECMP choice for them, found by the bindings); they
  arrive after its propagation delay plus the queueing delay of the queues they pass (ACKs queue
  with data in the switches), and their bytes load its links.
- ECN: each switch egress marks with ns-3's kmin/kmax/pmax rule on its queue after the step; a
  flow sees a CNP in a step with the probability that any of its packets served that step was
  marked (a seeded Bernoulli draw per flow and step); each hop's marks reach the sender at that
  hop's own delay (the rest of the path, the queues after the hop and the ACK path).
- DCQCN (Mellanox variant, ``cc/dcqcn.rs``): alpha update, rate decrease and rate increase
  timers on the step grid; first-CNP cut, fast recovery, additive and hyper increase.
- HPCC (``cc/hpcc.rs``): the per-hop utilisation ``tx/C + q/win`` the INT words carry, the
  EWMA over the base RTT, ``rate = cur_rate / (U / eta) + rai`` applied on every ACK (fast
  react) and committed once per RTT of acked data, ``MI_THRESH`` stages.
- PFC: a switch ingress pauses its upstream port while the bytes it holds exceed the dynamic
  threshold ``(free buffer - shared used) >> shift`` (ns-3's ``SwitchMmu``), resuming 3 KiB
  under it.

Not modelled: packet granularity (serialization of single packets, go-back-N, drops), per-packet
RNG streams of ns-3, queueing delay beyond QDELAY_MAX steps, PFC headroom.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .inputs import Ns3Inputs

_NIC_RATE_BPS = 100e9
# Steps of queueing delay feedback can carry (the ring buffer's slack): 256 (256 us at a
# 1 us step, 3.2 MB of queue at 100 Gbit/s; more is cut). The ring is copied every step: its
# length is most of the step's cost on CPU.
QDELAY_MAX = 256
# FIFO order at the ports: a port's queued bytes are kept in age cohorts (K slots of B steps
# each, by the step the bytes arrived at the port) and a port serves its oldest cohort first,
# sharing one cohort among its flows in proportion to their bytes. A flow whose bytes all
# arrived early leaves the queue early, as in the exact engine's FIFO; with K = 1 the port
# shares all its bytes in proportion (processor sharing). Bytes older than the horizon (K x B
# steps) fold into the oldest cohort. Defaults (K, B) by CC, measured on the ft16 incast against
# the exact engine (bench/README.md): DCQCN needs the FIFO (its incast unfairness comes from
# which flows' packets the bottleneck serves, and so marks, first); HPCC's incast is closer
# with proportional sharing (6% too fast with FIFO cohorts, 3% too slow without), so it keeps it.
FIFO_COHORTS = {"dcqcn": (64, 8), "hpcc": (1, 1)}


def _jax() -> Any:
    try:
        import jax
    except ImportError as e:  # pragma: no cover - exercised without the extra
        raise ImportError(
            "the batch packet engine needs JAX: pip install 'llmsim[batch]' (CPU), or JAX with CUDA for a GPU"
        ) from e
    return jax


def _device(jax: Any, backend: str | None) -> Any:
    """JAX's first device of ``backend`` (``None``: JAX's default, the CPU when no accelerator is
    found); a clear error when the backend asked for has no device here."""
    try:
        return jax.devices(backend)[0]
    except RuntimeError as e:
        have = sorted({d.platform for d in jax.devices()})
        raise RuntimeError(
            f"no JAX {backend!r} device here (JAX sees: {', '.join(have)}); "
            "run with backend='cpu' or None, or install JAX with CUDA (e.g. pip install 'jax[cuda12]')"
        ) from e


def device_info(backend: str | None = None) -> str:
    """The JAX device the engine runs on, e.g. ``cpu:0`` or ``cuda:0``."""
    d = _device(_jax(), backend)
    return f"{d.platform}:{d.id}"


@dataclass(frozen=True)
class BatchResult:
    """FCTs of every flow of every experiment: ``fct_ns[e, f]`` (NaN: not done by the stop time),
    and per-port queue and PFC statistics."""

    fct_ns: np.ndarray
    max_queue_bytes: np.ndarray  # (E, links): the largest queue each egress port held
    pause_us: np.ndarray  # (E, links): how long PFC paused each port
    sent_bytes: np.ndarray  # (E, flows): wire bytes each flow's sender sent by the end
    steps: int
    step_ps: int
    device: str

    @property
    def mean_fct_ns(self) -> np.ndarray:
        return np.nanmean(self.fct_ns, axis=1)


def _static(inp: Ns3Inputs) -> dict[str, Any]:
    """Arrays of the shared structure (numpy), with the step chosen."""
    c = inp.config
    step_ps = int(inp.link_delay_ps.min())
    if step_ps <= 0:
        raise ValueError("every link needs a delay above zero: the step is the minimum link delay")
    dt = step_ps * 1e-12
    L, F = inp.num_links, inp.num_flows
    H = max(len(p) for p in inp.flow_paths)
    dsteps = np.maximum(1, np.rint(inp.link_delay_ps / step_ps)).astype(np.int64)
    # A padding link (index L): infinite capacity, no delay consequences (masked).
    path = np.full((F, H), L, dtype=np.int64)
    valid = np.zeros((F, H), dtype=bool)
    for f, p in enumerate(inp.flow_paths):
        path[f, : len(p)] = p
        valid[f, : len(p)] = True
    nhop = valid.sum(1)
    # ACK paths (the exact engine's ECMP choice for them), padded with the padding link; ACKs
    # are small, so the padding link's zero queue adds no delay.
    Ha = max(1, max(len(a) for a in inp.flow_ack_links))
    ack_path = np.full((F, Ha), L, dtype=np.int64)
    for f, a in enumerate(inp.flow_ack_links):
        ack_path[f, : len(a)] = a
    dl = np.append(dsteps, 0)
    # Steps for a flow's bytes served at hop h to come back to its sender as an ACK: the rest of
    # the forward path plus the reverse path (its propagation delays).
    fwd_delay = np.where(valid, dl[path], 0)
    path_delay = fwd_delay.sum(1)
    rest = np.cumsum(fwd_delay[:, ::-1], axis=1)[:, ::-1]  # delays from hop h to the receiver
    ack_path_delay = np.where(ack_path < L, dl[ack_path], 0).sum(1)
    ack_path_delay = np.where(ack_path_delay > 0, ack_path_delay, path_delay)
    fb_delay = np.where(valid, rest + ack_path_delay[:, None], 0)
    # Base RTT and BDP (third.cc maxRtt / maxBdp over the flows' paths; ns: 2 x propagation +
    # one MTU serialization per hop).
    mtu = float(c["mtu_bytes"])
    bps = np.append(inp.link_bps, np.inf)
    rtt_ns = np.where(valid, 2 * np.append(inp.link_delay_ps, 0)[path] / 1000 + mtu * 8e9 / bps[path], 0).sum(1)
    bw = np.where(valid, bps[path], np.inf).min(1)
    max_rtt_ns = float(rtt_ns.max())
    max_bdp = float((rtt_ns * bw / 8e9).max())
    wire = float(c["data_packet_bytes"])
    hdr = wire - mtu
    pkts = np.ceil(np.maximum(inp.flow_size_bytes, 1) / mtu)
    size_wire = inp.flow_size_bytes + pkts * hdr
    line_bps = bps[path[:, 0]]
    # PFC: the switch an egress port (link) leaves from, and the ingress link feeding hop h.
    node_ids = np.unique(np.concatenate([inp.link_src, inp.link_dst]))
    node_index = {int(n): i for i, n in enumerate(node_ids)}
    into_switch = ~np.isin(inp.link_dst, inp.link_src[inp.link_src_is_host])
    ingress = np.concatenate([np.full((F, 1), L), path[:, :-1]], axis=1)
    ingress = np.where(valid & (np.arange(H) > 0), ingress, L)
    shift = np.full(L + 1, 63, dtype=np.int64)
    headroom = np.zeros(len(node_ids) + 1)
    for link in range(L):
        if not into_switch[link]:
            continue
        s, r = int(c["pfc_shift"]), inp.link_bps[link]
        while r > _NIC_RATE_BPS and s > 0:
            s, r = s - 1, r / 2
        shift[link] = s
        n = node_index[int(inp.link_dst[link])]
        headroom[n] += 3 * inp.link_bps[link] * inp.link_delay_ps[link] / 1000 / 8e9 + c["reserve_bytes"]
    free_base = np.maximum(c["buffer_bytes"] - headroom, 0)
    free_base[-1] = 0.0  # the padding node
    ingress_node = np.array([node_index[int(d)] for d in inp.link_dst] + [len(node_ids)])
    return {
        "step_ps": step_ps,
        "dt": dt,
        "L": L,
        "F": F,
        "H": H,
        "N": len(node_ids),
        "path": path,
        "valid": valid,
        "nhop": nhop,
        "last_hop": nhop - 1,
        "dsteps": dl,
        "ack_path": ack_path,
        "fb_delay": fb_delay,
        "cap": np.append(inp.link_bps / 8 * dt, 1e30),  # bytes per step
        "link_bps": bps,
        "ecn_port": np.append(~inp.link_src_is_host, False),
        "ratio_100g": np.append(inp.link_bps / _NIC_RATE_BPS, 1.0),
        "size_wire": size_wire,
        "wire_per_payload": size_wire / np.maximum(inp.flow_size_bytes, 1),
        "start_step": np.ceil(inp.flow_start_ps / step_ps).astype(np.int64),
        "start_ps": inp.flow_start_ps.astype(np.float64),
        "line_bps": line_bps,
        "max_rtt_ns": max_rtt_ns,
        "max_bdp": max_bdp,
        "wire": wire,
        "ack_ratio": float(c["ack_packet_bytes"]) / wire,
        "ingress": ingress,
        "ingress_node": ingress_node,
        "shift": shift,
        "free_base": free_base,
        "stop_step": int(c["stop_time_ps"] // step_ps),
    }


def _param_columns(inp: Ns3Inputs, points: Sequence[Mapping[str, float]]) -> dict[str, np.ndarray]:
    base = inp.base_params()
    cols: dict[str, list[float]] = {k: [] for k in base}
    for p in points:
        for k in p:
            if k not in base:
                raise ValueError(f"unknown batch parameter {k!r}; valid: {', '.join(sorted(base))}")
        for k, v in base.items():
            cols[k].append(float(p.get(k, v)))
    return {k: np.asarray(v, dtype=np.float32) for k, v in cols.items()}


def run_batch(
    inp: Ns3Inputs,
    points: Sequence[Mapping[str, float]],
    *,
    seed: int = 1,
    backend: str | None = None,
    max_steps: int | None = None,
    fifo_cohorts: int | None = None,
    cohort_steps: int | None = None,
) -> BatchResult:
    """Runs one experiment per parameter point (``{"rate_ai_bps": 4e7, ...}``; a parameter a point
    leaves out keeps ``config.txt``'s value) in one batch on JAX's ``backend`` (``None``: JAX's
    default device, a GPU when a CUDA jaxlib finds one). Deterministic for a seed and backend.
    ``fifo_cohorts`` x ``cohort_steps``: the ports' FIFO age cohorts (``None``: the CC's default
    in ``FIFO_COHORTS``; 1 cohort: proportional sharing, a queue state that many times smaller)."""
    if not points:
        raise ValueError("run_batch needs at least one parameter point")
    if inp.cc not in ("dcqcn", "hpcc"):
        raise ValueError(f"the batch engine models CC_MODE 1 (dcqcn) and 3 (hpcc), not {inp.cc!r}")
    k0, b0 = FIFO_COHORTS[inp.cc]
    fifo_cohorts = k0 if fifo_cohorts is None else fifo_cohorts
    cohort_steps = b0 if cohort_steps is None else cohort_steps
    if fifo_cohorts < 1 or cohort_steps < 1:
        raise ValueError("fifo_cohorts and cohort_steps must be at least 1")
    jax = _jax()
    st = _static(inp)
    cols = _param_columns(inp, points)
    dev = _device(jax, backend)
    limit = st["stop_step"] if max_steps is None else min(max_steps, st["stop_step"])
    key = (id(inp), backend, fifo_cohorts, cohort_steps)
    if key not in _CACHE or _CACHE[key][0] is not inp:
        _CACHE[key] = (inp, _compiled(jax, st, inp.cc, inp.config, fifo_cohorts, cohort_steps))
        while len(_CACHE) > 8:
            _CACHE.pop(next(iter(_CACHE)))
    fn = _CACHE[key][1]
    with jax.default_device(dev):
        fct, steps, max_q, pause_steps, sent = fn(cols, np.uint32(seed), np.int32(limit))
        fct = np.asarray(fct, dtype=np.float64)
    fct[fct < 0] = np.nan
    return BatchResult(
        fct_ns=fct,
        max_queue_bytes=max_q,
        pause_us=pause_steps * st["step_ps"] / 1e6,
        sent_bytes=sent,
        steps=int(steps),
        step_ps=st["step_ps"],
        device=f"{dev.platform}:{dev.id}",
    )


# Jitted engines by experiment (kept alive with it) and backend: a second batch over the same
# inputs reuses the compiled step (JAX recompiles only for a new number of points).
_CACHE: dict[tuple[int, str | None, int, int], tuple[Ns3Inputs, Any]] = {}


def _compiled(jax: Any, st: dict[str, Any], cc: str, cfg: Mapping[str, Any], K: int, B: int) -> Any:
    jnp = jax.numpy
    lax = jax.lax
    f32 = jnp.float32
    F, H, L, N = st["F"], st["H"], st["L"], st["N"]
    Ha = st["ack_path"].shape[1]
    dt = st["dt"]
    step_ns = st["step_ps"] / 1000.0
    path = jnp.asarray(st["path"])
    valid = jnp.asarray(st["valid"])
    last_hop = jnp.asarray(st["last_hop"])
    cap = jnp.asarray(st["cap"], f32)
    ecn_port = jnp.asarray(st["ecn_port"])
    ratio = jnp.asarray(st["ratio_100g"], f32)
    size_wire = jnp.asarray(st["size_wire"], f32)
    start_step = jnp.asarray(st["start_step"], jnp.int32)
    start_ps = np.asarray(st["start_ps"])
    line_bps = jnp.asarray(st["line_bps"], f32)
    ack_path = jnp.asarray(st["ack_path"])
    ingress_node = jnp.asarray(st["ingress_node"])
    shift = jnp.asarray(np.exp2(-st["shift"].astype(np.float64)), f32)
    free_base = jnp.asarray(st["free_base"], f32)
    wire = st["wire"]
    ack_ratio = st["ack_ratio"]
    reserve = float(cfg["reserve_bytes"])
    resume_off = float(cfg["resume_offset_bytes"])
    # Delay lines: served bytes enter the next hop after the link's delay; feedback reaches the
    # sender after fb_delay steps. Ring buffers indexed by step modulo their length.
    dsteps = st["dsteps"]
    hop_delay = np.where(st["valid"], dsteps[st["path"]], 1)
    D = int(hop_delay.max()) + 1
    fb_delay = np.where(st["valid"], st["fb_delay"], 1)
    # The last hop's bytes come back as ACKs after their own delay line.
    ack_delay = fb_delay[np.arange(F), st["last_hop"]]
    # Feedback also waits in the queues after the hop (data) and on the way back (ACKs queue
    # with data in the switches): up to QDELAY_MAX steps of queueing are carried, more is cut.
    D2 = int(max(fb_delay.max(), ack_delay.max())) + QDELAY_MAX + 1
    # Bytes served at hop h reach hop h + 1 after hop h's link delay: one mask per distinct delay.
    arrive_delay = np.concatenate([np.ones((F, 1), np.int64), hop_delay[:, :-1]], axis=1)
    uniq = np.unique(arrive_delay)
    delay_masks = [(int(d), None if len(uniq) == 1 else jnp.asarray(arrive_delay == d, f32)) for d in uniq]
    fb_delay = jnp.asarray(fb_delay)
    ack_delay = jnp.asarray(ack_delay)
    fidx = jnp.arange(F)
    is_last = jnp.arange(H)[None, :] == last_hop[:, None]
    # CC constants.
    T_ns = st["max_rtt_ns"]
    win_wire = st["max_bdp"] * float(np.max(st["wire_per_payload"])) if cfg["has_win"] else 0.0
    var_win = bool(cfg["var_win"])
    alpha_iv = max(1, round(cfg["alpha_resume_interval_ps"] / st["step_ps"]))
    dec_iv = max(1, round(cfg["rate_decrease_interval_ps"] / st["step_ps"]))
    first_cnp_k = float(cfg["rate_on_first_cnp"])
    clamp_cfg = bool(cfg["clamp_target_rate"])
    fast_react = bool(cfg["fast_react"])
    hpcc = cc == "hpcc"
    hp_w = 1.0 - math.exp(-min(step_ns, T_ns) / T_ns)
    big = jnp.int32(2**30)

    def gather_matrix(idx: np.ndarray, n: int) -> Any:
        """The one-hot matrix that sums entries into slots ``idx`` (``None``: too large, scatter)."""
        idx = np.asarray(idx).reshape(-1)
        if idx.size * n > 2**24:
            return None
        m = np.zeros((idx.size, n), np.float32)
        m[np.arange(idx.size), idx] = 1.0
        return m

    mats: dict[str, Any] = {}

    def seg(vals: Any, idx: Any, n: int, name: str) -> Any:
        """Sums ``vals[e, ...]`` into ``out[e, idx[...]]`` (n slots): a matmul with a one-hot
        matrix (dense, fast on CPU and GPU) where it is small, else a scatter-add."""
        e = vals.shape[0]
        if name not in mats:
            mats[name] = gather_matrix(np.asarray(idx), n)
        m = mats[name]
        if m is None:
            return jnp.zeros((e, n), vals.dtype).at[:, jnp.asarray(idx).reshape(-1)].add(vals.reshape(e, -1))
        return vals.reshape(e, -1) @ m

    def seg_k(qk: Any) -> Any:
        """Sums ``qk[e, f, h, k]`` into ``out[e, path[f, h], k]``: the ports' bytes per cohort."""
        e = qk.shape[0]
        if "path" not in mats:
            mats["path"] = gather_matrix(st["path"], L + 1)
        m = mats["path"]
        x = qk.reshape(e, F * H, K)
        if m is None:
            return jnp.zeros((e, L + 1, K), qk.dtype).at[:, jnp.asarray(st["path"]).reshape(-1)].add(x)
        return jnp.einsum("exk,xl->elk", x, m)

    def step(carry: dict[str, Any], key: Any) -> dict[str, Any]:
        t = carry["t"]
        P = carry["P"]
        E = carry["q"].shape[0]
        eidx = jnp.arange(E)
        qk, pipe, fb = carry["q"], carry["pipe"], carry["fb"]
        rate, sent, acked = carry["rate"], carry["sent"], carry["acked"]
        active = (t >= start_step)[None, :] & (carry["fct"] < 0)
        # 0. The FIFO cohort that takes this step's arrivals: on entering a slot, bytes still in
        #    it (older than the horizon) fold into the next oldest.
        c = (t // B) % K
        if K > 1:
            stale = jnp.where(c != carry["cohort"], qk[..., c], 0.0)
            qk = qk.at[..., (c + 1) % K].add(stale).at[..., c].add(-stale)
        # 1. Arrivals from the links' delay lines.
        slot = t % D
        qk = qk.at[..., c].add(pipe[slot])
        q = jnp.sum(qk, axis=3)
        pipe = pipe.at[slot].set(0.0)
        # 2. The sender's NIC: paced at the CC rate, within the window, at most one step of line rate.
        want = rate * f32(dt / 8.0)
        if win_wire > 0:
            w = win_wire * (rate / line_bps[None, :] if var_win else 1.0)
            want = jnp.minimum(want, jnp.maximum(w - (sent - acked), 0.0))
        want = jnp.where(active, jnp.minimum(want, size_wire[None, :] - sent), 0.0)
        nic = path[:, 0]
        nic_q = seg(q[:, :, 0], st["path"][:, 0], L + 1, "nic")
        nic_want = seg(want, st["path"][:, 0], L + 1, "nic")
        room = jnp.maximum(cap[None, :] - nic_q, 0.0) * (1.0 - carry["paused"])
        scale = jnp.where(nic_want > 0, jnp.minimum(room / jnp.maximum(nic_want, 1e-9), 1.0), 0.0)
        want = want * scale[:, nic]
        sent = sent + want
        q = q.at[:, :, 0].add(want)
        qk = qk.at[:, :, 0, c].add(want)
        # 3. Every egress port pulls from the flows queued at it (oldest cohort first, a cohort in
        #    proportion to its flows' bytes); ACK bytes (last step's deliveries) take their share
        #    of the reverse links.
        Q = seg(q, st["path"], L + 1, "path")
        ack_load = seg(
            jnp.broadcast_to(carry["deliv"][:, :, None] * ack_ratio, (E, F, Ha)), st["ack_path"], L + 1, "ack"
        )
        avail = jnp.maximum(cap[None, :] - ack_load, 0.0) * (1.0 - carry["paused"])
        served_port = jnp.minimum(Q, avail)
        if K == 1:
            frac = jnp.where(Q > 0, served_port / jnp.maximum(Q, 1e-9), 0.0)
            served = q * frac[:, path]
            qk = qk - served[..., None]
        else:
            # Oldest cohort first: a cohort is served once the older ones are; its flows share
            # it in proportion to their bytes.
            Qk = seg_k(qk)
            age = (c - jnp.arange(K)) % K
            older = (age[:, None] > age[None, :]).astype(f32)
            before = Qk @ older
            fk = jnp.where(Qk > 0, jnp.clip((served_port[..., None] - before) / jnp.maximum(Qk, 1e-9), 0.0, 1.0), 0.0)
            served_k = qk * fk[:, path, :]
            qk = qk - served_k
            served = jnp.sum(served_k, axis=3)
        q = jnp.sum(qk, axis=3)
        Qa = Q - served_port
        # 4. Served bytes travel to the next hop; the last hop's come back as ACKs.
        to_next = jnp.where(is_last[None], 0.0, served)
        arrive = jnp.concatenate([jnp.zeros_like(to_next[:, :, :1]), to_next[:, :, :-1]], axis=2)
        for d, m in delay_masks:
            pipe = pipe.at[(t + d) % D].add(arrive * m[None] if m is not None else arrive)
        deliv = jnp.sum(jnp.where(is_last[None], served, 0.0), axis=2)
        qd_link = jnp.where(Qa > 0, Qa / jnp.maximum(avail, 1e-3 * cap[None, :]), 0.0)
        qd_path = jnp.where(valid[None], qd_link[:, path], 0.0)
        qd_down = jnp.flip(jnp.cumsum(jnp.flip(qd_path, 2), 2), 2) - qd_path  # queues after hop h
        qd_ack = jnp.sum(qd_link[:, ack_path], axis=2)
        q_fb = jnp.minimum(jnp.rint(qd_down + qd_ack[:, :, None]), QDELAY_MAX).astype(jnp.int32)
        fb_slot = (t + fb_delay[None] + q_fb) % D2
        ack_slot = (t + ack_delay[None, :] + q_fb[:, fidx, last_hop]) % D2
        fb = fb.at[ack_slot, 0, fidx[None, :], eidx[:, None]].add(deliv)
        # 5. Feedback the served packets carry: ECN marks, HPCC's per-hop utilisation.
        if hpcc:
            tx = (served_port + ack_load) / cap[None, :]
            qmin = jnp.minimum(Qa, carry["Qprev"])
            u_hop = tx + qmin / f32(max(st["max_bdp"], 1.0)) * (line_bps.max() / (cap * 8 / dt))[None, :]
            u_fh = jnp.where(valid[None] & (served > 0), u_hop[:, path], 0.0)
            # Each hop's word reaches the sender at its own delay (the INT words of one packet
            # arrive together); the sender takes the largest.
            fb = fb.at[fb_slot, 2, fidx[None, :, None], eidx[:, None, None]].max(u_fh)
        else:
            kmin = P["kmin_bytes"][:, None] * ratio[None, :]
            kmax = P["kmax_bytes"][:, None] * ratio[None, :]
            p = jnp.where(
                Qa > kmax,
                1.0,
                jnp.where(Qa > kmin, (Qa - kmin) / jnp.maximum(kmax - kmin, 1.0) * P["pmax"][:, None], 0.0),
            )
            p = jnp.where(ecn_port[None, :], jnp.minimum(p, 1.0 - 1e-6), 0.0)
            lognm = served / f32(wire) * jnp.log1p(-p[:, path])
            # Each hop's marks reach the sender at that hop's delay: a packet marked upstream still
            # waits in the queues after it, one marked at the last hop does not.
            fb = fb.at[fb_slot, 1, fidx[None, :, None], eidx[:, None, None]].add(lognm)
        # 6. PFC: pause the upstream port of an ingress holding more than its dynamic threshold.
        held = seg(q, st["ingress"], L + 1, "ingress")
        shared = jnp.maximum(held - reserve, 0.0)
        used = seg(shared, st["ingress_node"], N + 1, "node")
        thr = jnp.maximum(free_base[None, :] - used, 0.0)[:, ingress_node] * shift[None, :]
        pause = shared > thr
        resume = shared + resume_off <= thr
        paused = jnp.where(pause, 1.0, jnp.where(resume, 0.0, carry["paused"]))
        # 7. The sender reads this step's feedback.
        s2 = t % D2
        got = fb[s2]
        fb = fb.at[s2].set(0.0)
        new_acked = got[0].T
        has_ack = new_acked > 0
        acked_before = acked
        acked = acked + new_acked
        # Within half a packet: float32 sums of a flow's bytes drift by a few bytes, and the
        # proportional service leaves a vanishing tail in the queues.
        done_now = active & (acked >= size_wire[None, :] - f32(wire / 2))
        part = jnp.clip((size_wire[None, :] - acked_before) / jnp.maximum(new_acked, 1e-9), 0.0, 1.0)
        fct = jnp.where(done_now, (t + part).astype(f32), carry["fct"])
        cc_state = dict(carry["cc"])
        if hpcc:
            rate, cc_state = _hpcc(jnp, cc_state, P, rate, sent, acked, has_ack & active, got[2].T)
        else:
            u = jax.random.uniform(key, (E, F))
            # A mark comes back on its own ACK: the feedback word is that ACK (no separate
            # ACK delivery needed in the same step).
            cnp = active & (u < -jnp.expm1(got[1].T))
            rate, cc_state = _dcqcn(jnp, cc_state, P, rate, cnp, t, active)
        # Nothing started, queued or in flight: jump to the next flow's start.
        idle = ~jnp.any(active)
        later = jnp.where(start_step > t, start_step, big)
        t_next = jnp.where(idle, jnp.maximum(jnp.min(later), t + 1), t + 1)
        return {
            "t": t_next,
            "P": P,
            "q": qk,
            "cohort": c,
            "pipe": pipe,
            "fb": fb,
            "rate": rate,
            "sent": sent,
            "acked": acked,
            "deliv": deliv,
            "paused": paused,
            "Qprev": Qa,
            "fct": fct,
            "cc": cc_state,
            "max_q": jnp.maximum(carry["max_q"], Qa),
            "pause_steps": carry["pause_steps"] + paused,
        }

    def _dcqcn(jnp: Any, c: dict[str, Any], P: dict[str, Any], rate: Any, cnp: Any, t: Any, active: Any) -> Any:
        rp_iv = jnp.maximum(jnp.round(P["rp_timer_us"] * 1e6 / st["step_ps"]), 1).astype(jnp.int32)[:, None]
        g = P["ewma_gain"][:, None]
        # RdmaHw::cnp_received_mlx.
        first = cnp & c["first"]
        rate = jnp.where(first, rate * first_cnp_k, rate)
        alpha = jnp.where(first, 1.0, c["alpha"])
        alpha_cnp = jnp.where(first, False, cnp | c["alpha_cnp"])
        dec_cnp = cnp | c["dec_cnp"]
        target = jnp.where(first, rate, c["target"])
        t_alpha = jnp.where(first, t + alpha_iv, c["t_alpha"])
        t_dec = jnp.where(first, t + dec_iv, c["t_dec"])
        first_left = c["first"] & ~first
        # UpdateAlphaMlx.
        fire = t >= t_alpha
        alpha = jnp.where(fire, (1 - g) * alpha + jnp.where(alpha_cnp, g, 0.0), alpha)
        alpha_cnp = jnp.where(fire, False, alpha_cnp)
        t_alpha = jnp.where(fire, t_alpha + alpha_iv, t_alpha)
        # CheckRateDecreaseMlx.
        fire = t >= t_dec
        t_dec = jnp.where(fire, t_dec + dec_iv, t_dec)
        cut = fire & dec_cnp
        clamp = clamp_cfg | (c["stage"] != 0)
        target = jnp.where(cut & clamp, rate, target)
        rate = jnp.where(cut, jnp.maximum(P["min_rate_bps"][:, None], rate * (1 - alpha / 2)), rate)
        stage = jnp.where(cut, 0, c["stage"])
        dec_cnp = jnp.where(cut, False, dec_cnp)
        t_inc = jnp.where(cut, t + rp_iv, c["t_inc"])
        # RateIncEventTimerMlx + RateIncEventMlx.
        fire = t >= t_inc
        t_inc = jnp.where(fire, t_inc + rp_iv, t_inc)
        th = P["fast_recovery_times"][:, None]
        add = jnp.where(stage.astype(jnp.float32) == th, P["rate_ai_bps"][:, None], P["rate_hai_bps"][:, None])
        inc_target = fire & (stage.astype(jnp.float32) >= th)
        target = jnp.where(inc_target, jnp.minimum(target + add, line_bps[None, :]), target)
        rate = jnp.where(fire, rate / 2 + target / 2, rate)
        stage = jnp.where(fire, stage + 1, stage)
        return rate, {
            "alpha": alpha,
            "alpha_cnp": alpha_cnp,
            "dec_cnp": dec_cnp,
            "first": first_left,
            "target": target,
            "stage": stage,
            "t_alpha": t_alpha,
            "t_dec": t_dec,
            "t_inc": t_inc,
        }

    def _hpcc(
        jnp: Any, c: dict[str, Any], P: dict[str, Any], rate: Any, sent: Any, acked: Any, ack: Any, U: Any
    ) -> Any:
        init = ack & ~c["started"]
        upd = ack & c["started"]
        u = jnp.where(upd, c["u"] + (U - c["u"]) * f32(hp_w), c["u"])
        max_c = u / P["u_target"][:, None]
        mi = (max_c >= 1.0) | (c["stage"].astype(jnp.float32) >= P["mi_thresh"][:, None])
        r = jnp.where(mi, c["cur"] / jnp.maximum(max_c, 1e-6), c["cur"]) + P["rate_ai_bps"][:, None]
        r = jnp.clip(r, P["min_rate_bps"][:, None], line_bps[None, :])
        new_stage = jnp.where(mi, 0, c["stage"] + 1)
        commit = upd & (acked > c["last_seq"])
        rate = jnp.where(commit | (upd & fast_react), r, rate)
        return rate, {
            "started": c["started"] | init,
            "u": u,
            "cur": jnp.where(commit, r, c["cur"]),
            "stage": jnp.where(commit, new_stage, c["stage"]),
            "last_seq": jnp.where(init | commit, sent, c["last_seq"]),
        }

    def run(cols: dict[str, Any], seed: Any, limit: Any) -> Any:
        P = {k: jnp.asarray(v, f32) for k, v in cols.items()}
        E = P["pmax"].shape[0]
        zeros = jnp.zeros((E, F), f32)
        line = jnp.broadcast_to(line_bps[None, :], (E, F))
        if hpcc:
            cc0 = {
                "started": jnp.zeros((E, F), bool),
                "u": jnp.ones((E, F), f32),
                "cur": line,
                "stage": jnp.zeros((E, F), jnp.int32),
                "last_seq": zeros,
            }
        else:
            cc0 = {
                "alpha": jnp.ones((E, F), f32),
                "alpha_cnp": jnp.zeros((E, F), bool),
                "dec_cnp": jnp.zeros((E, F), bool),
                "first": jnp.ones((E, F), bool),
                "target": line,
                "stage": jnp.zeros((E, F), jnp.int32),
                "t_alpha": jnp.full((E, F), big),
                "t_dec": jnp.full((E, F), big),
                "t_inc": jnp.full((E, F), big),
            }
        carry = {
            "t": jnp.min(start_step).astype(jnp.int32),
            "P": P,
            "q": jnp.zeros((E, F, H, K), f32),
            "cohort": (jnp.min(start_step) // B % K).astype(jnp.int32),
            "pipe": jnp.zeros((D, E, F, H), f32),
            "fb": jnp.zeros((D2, 3, F, E), f32),
            "rate": line,
            "sent": zeros,
            "acked": zeros,
            "deliv": zeros,
            "paused": jnp.zeros((E, L + 1), f32),
            "Qprev": jnp.zeros((E, L + 1), f32),
            "fct": jnp.full((E, F), -1.0, f32),
            "cc": cc0,
            "max_q": jnp.zeros((E, L + 1), f32),
            "pause_steps": jnp.zeros((E, L + 1), f32),
        }
        key = jax.random.PRNGKey(seed)

        def cond(c: dict[str, Any]) -> Any:
            return (c["t"] < limit) & jnp.any(c["fct"] < 0)

        def body(c: dict[str, Any]) -> Any:
            return step(c, jax.random.fold_in(key, c["t"]))

        out = lax.while_loop(cond, body, carry)
        return out["fct"], out["t"], out["max_q"][:, :L], out["pause_steps"][:, :L], out["sent"]

    jitted = jax.jit(run)

    def call(cols: dict[str, np.ndarray], seed: Any, limit: Any) -> Any:
        fin_steps, steps, max_q, pause_steps, sent = jitted(cols, seed, limit)
        fin = np.asarray(fin_steps, dtype=np.float64)
        fct = np.where(fin >= 0, (fin * st["step_ps"] - start_ps[None, :]) / 1000.0, -1.0)
        return (
            fct,
            steps,
            np.asarray(max_q, np.float64),
            np.asarray(pause_steps, np.float64),
            np.asarray(sent, np.float64),
        )

    return call
