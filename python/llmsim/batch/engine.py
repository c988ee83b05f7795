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
- ECN: each switch egress marks with ns-3's kmin/kmax/pmax rule on its queue after the step;
  each hop's marks reach the sender at that hop's own delay (the rest of the path, the queues
  after the hop and the ACK path). Marks come back on ACKs, one per data packet: a flow sees a
  CNP in a step where a whole ACK packet arrives, with the probability that any packet acked
  since its last whole ACK was marked (a seeded Bernoulli draw per flow and step).
- DCQCN (Mellanox variant, ``cc/dcqcn.rs``): alpha update, rate decrease and rate increase
  timers on the step grid; first-CNP cut, fast recovery, additive and hyper increase.
- HPCC (``cc/hpcc.rs``): the per-hop utilisation ``tx/C + q/win`` the INT words of the switch
  ports carry (a host's NIC stamps none), the EWMA over the base RTT (a sample weighs the time
  since the flow's last one, up to the base RTT),
  ``rate = cur_rate / (U / eta) + rai`` applied on every ACK (fast react) and committed once per
  RTT of acked data (an ACK a whole packet beyond the data sent at the last commit), ``MI_THRESH``
  stages.
- PFC: a switch ingress pauses its upstream port while the bytes it holds exceed the dynamic
  threshold ``(free buffer - shared used) >> shift`` (ns-3's ``SwitchMmu``), resuming 3 KiB
  under it.

Not modelled: packet granularity (serialization of single packets, go-back-N, drops), per-packet
RNG streams of ns-3, queueing delay beyond QDELAY_MAX steps, PFC headroom.
"""

from __future__ import annotations

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
# which flows' packets the bottleneck serves, and so marks, first); so does HPCC's (which flows'
# first window leaves the queue last, and so waits without ACKs, sets its rate after the drain).
# HPCC ran with proportional sharing (K = 1) until its EWMA weighed the gap since a flow's last
# sample: before that fix FIFO cohorts made its incast 6% too fast and sharing 3% too slow.
FIFO_COHORTS = {"dcqcn": (64, 8), "hpcc": (64, 8)}


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
    windows: int = 1  # live-flow windows run (WINDOW_STEPS)
    slots: int = 0  # the most flow slots a window held (the flows padded to a power of two)

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
    window_steps: int | None = None,
) -> BatchResult:
    """Runs one experiment per parameter point (``{"rate_ai_bps": 4e7, ...}``; a parameter a point
    leaves out keeps ``config.txt``'s value) in one batch on JAX's ``backend`` (``None``: JAX's
    default device, a GPU when a CUDA jaxlib finds one). Deterministic for a seed and backend.
    ``fifo_cohorts`` x ``cohort_steps``: the ports' FIFO age cohorts (``None``: the CC's default
    in ``FIFO_COHORTS``; 1 cohort: proportional sharing, a queue state that many times smaller).
    ``window_steps``: the live-flow windows (``None``: ``WINDOW_STEPS`` when the experiment has
    more than ``DENSE_FLOWS`` flows, else one window holding every flow; 0: one window)."""
    if not points:
        raise ValueError("run_batch needs at least one parameter point")
    if inp.cc not in ("dcqcn", "hpcc"):
        raise ValueError(f"the batch engine models CC_MODE 1 (dcqcn) and 3 (hpcc), not {inp.cc!r}")
    k0, b0 = FIFO_COHORTS[inp.cc]
    fifo_cohorts = k0 if fifo_cohorts is None else fifo_cohorts
    cohort_steps = b0 if cohort_steps is None else cohort_steps
    if fifo_cohorts < 1 or cohort_steps < 1:
        raise ValueError("fifo_cohorts and cohort_steps must be at least 1")
    if window_steps is None:
        window_steps = WINDOW_STEPS if inp.num_flows > DENSE_FLOWS else 0
    if window_steps < 0:
        raise ValueError("window_steps must be at least 0")
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
    eng = _CACHE[key][1]
    with jax.default_device(dev):
        fin, steps, max_q, pause_steps, sent, windows, slots = eng.run(cols, seed, limit, window_steps)
    fct = np.where(fin >= 0, (fin * st["step_ps"] - st["start_ps"][None, :]) / 1000.0, np.nan)
    return BatchResult(
        fct_ns=fct,
        max_queue_bytes=max_q,
        pause_us=pause_steps * st["step_ps"] / 1e6,
        sent_bytes=sent,
        steps=int(steps),
        step_ps=st["step_ps"],
        device=f"{dev.platform}:{dev.id}",
        windows=windows,
        slots=slots,
    )


# Jitted engines by experiment (kept alive with it) and backend: a second batch over the same
# inputs reuses the compiled step (JAX recompiles only for a new number of points or a new
# live-flow bucket).
_CACHE: dict[tuple[int, str | None, int, int], tuple[Ns3Inputs, Any]] = {}

# Live-flow windows. The engine holds only the flows that can move in the next WINDOW_STEPS
# steps (started before the window ends, not yet done in every experiment), in slots padded to a
# power of two (at least MIN_SLOTS; each bucket compiles once). On the web-search fabric (3,491
# flows over 5 ms) a 128-step window holds about 100 flows on average and 330 at most, so a step
# costs a few percent of the dense one. Flows done in every experiment leave at the next window;
# what they left in queues (under half a packet) is dropped. Experiments of at most DENSE_FLOWS
# flows run in one window with every flow.
WINDOW_STEPS = 128
MIN_SLOTS = 16
DENSE_FLOWS = 64
# Segment sums (flows' bytes into ports) as a one-hot matmul while the one-hot matrix of the
# whole experiment's flow-hops has at most this many entries, else as scatter-adds.
ONEHOT_MAX = 2**18


def _kahan_add(total: Any, comp: Any, x: Any) -> tuple[Any, Any]:
    """``total + x`` with Kahan's compensation ``comp`` (the low-order bits the last sums lost,
    carried into the next): a flow's sent and acked bytes are float32 sums of one increment per
    step, and a plain sum drifts by up to half a unit in the last place per step, the same way
    while the increment stays the same (a flow at a steady rate). Above 2^24 bytes (a unit of 2
    bytes) that is kilobytes over a few thousand steps, more than the half packet the done test
    allows, and sent and acked drift apart (their increments differ when a port splits its
    service): 11 of the 100 fat320 DCQCN points kept a 20-27 MB flow live to the stop time
    (every byte sent, never all acked; bench/README.md). Compensated, each sum stays within a
    unit of the exact one."""
    y = x - comp
    t = total + y
    return t, (t - total) - y


def _hash32(jnp: Any, x: Any) -> Any:
    """murmur3's 32-bit finaliser: a well-mixed uint32 of a uint32."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


class _Engine:
    """One experiment's jitted window function (per slot bucket and batch size) and the host loop
    that moves flows in and out of the slots between windows."""

    def __init__(self, jax: Any, st: dict[str, Any], window: Any, flows: dict[str, np.ndarray]) -> None:
        self.jax, self.st, self.window, self.flows = jax, st, window, flows

    def _slots(self, idx: np.ndarray, S: int) -> dict[str, np.ndarray]:
        """The per-flow static columns of flows ``idx`` in S slots (the rest padding)."""
        out = {}
        for k, v in self.flows.items():
            pad = self.flows_pad[k]
            a = np.broadcast_to(pad, (S, *v.shape[1:])).copy()
            a[: len(idx)] = v[idx]
            out[k] = a
        return out

    def run(self, cols: Mapping[str, np.ndarray], seed: int, limit: int, window_steps: int) -> Any:
        jax, st = self.jax, self.st
        jnp = jax.numpy
        F = st["F"]
        E = len(next(iter(cols.values())))
        P = {k: jnp.asarray(v, jnp.float32) for k, v in cols.items()}
        start = st["start_step"]
        fin = np.full((E, F), -1.0)
        sent = np.zeros((E, F))
        done_all = np.zeros(F, bool)
        t = int(start.min())
        ports = self.window.ports(E, t)
        slots = np.zeros(0, np.int64)  # flow of each slot now held
        pslots = np.zeros(0, np.int64)  # link of each port slot now held
        state: Any = None
        pk: Any = None
        windows = max_slots = 0
        while t < limit:
            end = limit if window_steps == 0 else min(limit, t + window_steps)
            live = np.flatnonzero((start < end) & ~done_all)
            if len(live) == 0:
                later = start[(start >= end) & ~done_all]
                if len(later) == 0:
                    break
                t = int(later.min())
                continue
            S = len(live) if window_steps == 0 else max(MIN_SLOTS, 1 << int(len(live) - 1).bit_length())
            # Carry the flows held before into their new slots; new flows start fresh.
            pos = {int(f): i for i, f in enumerate(slots)}
            src = np.array([pos.get(int(f), -1) for f in live] + [-1] * (S - len(live)), np.int32)
            fresh = src < 0
            fl = self._slots(live, S)
            # The window's port slots: the links its flows' data cross (their cohorts), and an
            # empty one (the padding link) last.
            L = st["L"]
            used = np.unique(st["path"][live][st["valid"][live]])
            Pw = len(used) + 1 if window_steps == 0 else max(MIN_SLOTS, 1 << len(used).bit_length())
            pw = np.full(Pw, L, np.int32)
            pw[: len(used)] = used
            lut = np.full(L + 1, Pw - 1, np.int32)
            lut[used] = np.arange(len(used))
            fl["pslot"] = lut[fl["path"]]
            fl["pw"] = pw
            ppos = {int(x): i for i, x in enumerate(pslots)}
            psrc = np.array([ppos.get(int(x), -1) for x in used] + [-1] * (Pw - len(used)), np.int32)
            state = self.window.remap(state, src, fresh, fl, E, S)
            pk = self.window.remap_ports(pk, psrc, E, Pw)
            state, ports, pk, t_out = self.window.run(
                state, ports, pk, fl, P, np.uint32(seed), np.int32(t), np.int32(end)
            )
            pslots = used
            windows += 1
            max_slots = max(max_slots, S)
            f_fin, f_sent = (np.asarray(x, np.float64) for x in self.window.results(state))
            fin[:, live] = f_fin[:, : len(live)]
            sent[:, live] = f_sent[:, : len(live)]
            done_all[live] = (f_fin[:, : len(live)] >= 0).all(axis=0)
            slots = live
            t = int(t_out)
            if window_steps == 0:
                break
        max_q, pause_steps = (np.asarray(x, np.float64)[:, : st["L"]] for x in self.window.port_stats(ports))
        return fin, t, max_q, pause_steps, sent, windows, max_slots


def _compiled(jax: Any, st: dict[str, Any], cc: str, cfg: Mapping[str, Any], K: int, B: int) -> _Engine:
    jnp = jax.numpy
    lax = jax.lax
    f32 = jnp.float32
    F, H, L, N = st["F"], st["H"], st["L"], st["N"]
    Ha = st["ack_path"].shape[1]
    dt = st["dt"]
    step_ns = st["step_ps"] / 1000.0
    cap = jnp.asarray(st["cap"], f32)
    ecn_port = jnp.asarray(st["ecn_port"])
    ratio = jnp.asarray(st["ratio_100g"], f32)
    ingress_node = jnp.asarray(st["ingress_node"])
    shift = jnp.asarray(np.exp2(-st["shift"].astype(np.float64)), f32)
    free_base = jnp.asarray(st["free_base"], f32)
    wire = st["wire"]
    ack_ratio = st["ack_ratio"]
    reserve = float(cfg["reserve_bytes"])
    resume_off = float(cfg["resume_offset_bytes"])
    line_max = float(st["line_bps"].max())
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
    uniq = [int(d) for d in np.unique(arrive_delay)]
    # The per-flow columns a window's slots hold, and the padding of an empty slot: on the
    # padding link (index L, never queues), never starting, already done.
    big_i = 2**30
    flows = {
        "path": st["path"].astype(np.int32),
        "valid": st["valid"],
        "last_hop": st["last_hop"].astype(np.int32),
        "ack_path": st["ack_path"].astype(np.int32),
        "ingress": st["ingress"].astype(np.int32),
        "fb_delay": fb_delay.astype(np.int32),
        "ack_delay": ack_delay.astype(np.int32),
        "arrive_delay": arrive_delay.astype(np.int32),
        "size_wire": st["size_wire"].astype(np.float32),
        "start_step": np.minimum(st["start_step"], big_i).astype(np.int32),
        "line_bps": st["line_bps"].astype(np.float32),
        # The flow's own stream of ECN draws (by flow, not slot: windows do not change them).
        "fkey": np.arange(F, dtype=np.uint32),
    }
    flows_pad = {
        "path": np.int32(L),
        "valid": False,
        "last_hop": np.int32(0),
        "ack_path": np.int32(L),
        "ingress": np.int32(L),
        "fb_delay": np.int32(1),
        "ack_delay": np.int32(1),
        "arrive_delay": np.int32(1),
        "size_wire": np.float32(0.0),
        "start_step": np.int32(big_i),
        "line_bps": np.float32(line_max),
        "fkey": np.uint32(0),
    }
    onehot = F * H * (L + 1) <= ONEHOT_MAX
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
    big = jnp.int32(big_i)

    def seg(vals: Any, idx: Any, n: int, m: Any) -> Any:
        """Sums ``vals[e, x, ...]`` into ``out[e, idx[x], ...]`` (n slots; idx flattened over
        vals' axes after the first): a matmul with the one-hot matrix ``m`` of idx when given,
        else a scatter-add."""
        e = vals.shape[0]
        flat = idx.reshape(-1)
        x = vals.reshape(e, flat.shape[0], -1)
        if m is None:
            out = jnp.zeros((e, n, x.shape[2]), vals.dtype).at[:, flat].add(x)
        else:
            out = jnp.einsum("exk,xl->elk", x, m)
        return out if vals.ndim - idx.ndim > 1 else out[..., 0]

    def step(carry: dict[str, Any], fl: dict[str, Any], P: dict[str, Any], seed: Any) -> dict[str, Any]:
        t = carry["t"]
        S = fl["path"].shape[0]
        E = carry["q"].shape[0]
        eidx = jnp.arange(E)
        fidx = jnp.arange(S)
        path, valid, last_hop, is_last = fl["path"], fl["valid"], fl["last_hop"], fl["is_last"]
        line_bps, size_wire, start_step = fl["line_bps"], fl["size_wire"], fl["start_step"]
        mats = fl["mats"]
        qk, pipe, fb_ack, fb_cc = carry["q"], carry["pipe"], carry["fb_ack"], carry["fb_cc"]
        rate, sent, acked = carry["rate"], carry["sent"], carry["acked"]
        active = (t >= start_step)[None, :] & (carry["fct"] < 0)
        # 0. The FIFO cohort that takes this step's arrivals: on entering a slot, bytes still in
        #    it (older than the horizon) fold into the next oldest.
        #    The ports keep their bytes per cohort (Qk) and, per cohort, the bytes older than it
        #    (``before``) up to date as bytes arrive and leave, so no step sums the flows' cohorts
        #    into ports: a cohort that becomes the newest has every queued byte before it, the one
        #    after it becomes the oldest (nothing before it).
        c = (t // B) % K
        if K > 1:

            def roll(x: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
                qk, Qk, before = x
                nxt = (c + 1) % K
                qk = qk.at[..., nxt].add(qk[..., c]).at[..., c].set(0.0)
                Qk = Qk.at[..., nxt].add(Qk[..., c]).at[..., c].set(0.0)
                before = before.at[..., c].set(jnp.sum(Qk, axis=2)).at[..., nxt].set(0.0)
                return qk, Qk, before

            # Only every B steps (a cond: the other steps skip the passes over the cohorts).
            qk, Qk, before = lax.cond(c != carry["cohort"], roll, lambda x: x, (qk, carry["Qk"], carry["before"]))
            pslot, pw = fl["pslot"], fl["pw"]
            Pw = pw.shape[0]
        # 1. Arrivals from the links' delay lines.
        slot = t % D
        arr = pipe[slot]
        qk = qk.at[..., c].add(arr)
        if K > 1:
            Qk = Qk.at[..., c].add(seg(arr, pslot, Pw, mats.get("pslot")))
        q = jnp.sum(qk, axis=3)
        pipe = pipe.at[slot].set(0.0)
        # 2. The sender's NIC: paced at the CC rate, within the window, at most one step of line rate.
        want = rate * f32(dt / 8.0)
        if win_wire > 0:
            w = win_wire * (rate / line_bps[None, :] if var_win else 1.0)
            want = jnp.minimum(want, jnp.maximum(w - (sent - acked), 0.0))
        want = jnp.where(active, jnp.minimum(want, size_wire[None, :] - sent), 0.0)
        nic = path[:, 0]
        nic_q = seg(q[:, :, 0], nic, L + 1, mats.get("nic"))
        nic_want = seg(want, nic, L + 1, mats.get("nic"))
        room = jnp.maximum(cap[None, :] - nic_q, 0.0) * (1.0 - carry["paused"])
        scale = jnp.where(nic_want > 0, jnp.minimum(room / jnp.maximum(nic_want, 1e-9), 1.0), 0.0)
        want = want * scale[:, nic]
        sent, sent_c = _kahan_add(sent, carry["sent_c"], want)
        q = q.at[:, :, 0].add(want)
        qk = qk.at[:, :, 0, c].add(want)
        if K > 1:
            Qk = Qk.at[..., c].add(seg(want, pslot[:, 0], Pw, mats.get("pnic")))
        # 3. Every egress port pulls from the flows queued at it (oldest cohort first, a cohort in
        #    proportion to its flows' bytes); ACK bytes (last step's deliveries) take their share
        #    of the reverse links.
        Q = seg(q, path, L + 1, mats.get("path")) if K == 1 else seg(jnp.sum(Qk, axis=2), pw, L + 1, mats.get("pw"))
        ack_load = seg(
            jnp.broadcast_to(carry["deliv"][:, :, None] * ack_ratio, (E, S, Ha)), fl["ack_path"], L + 1, mats.get("ack")
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
            sp = served_port[:, pw, None]
            fk = jnp.where(Qk > 0, jnp.clip((sp - before) / jnp.maximum(Qk, 1e-9), 0.0, 1.0), 0.0)
            served_k = qk * fk[:, pslot, :]
            qk = qk - served_k
            served = jnp.sum(served_k, axis=3)
            Qk = Qk * (1.0 - fk)
            before = jnp.maximum(before - sp, 0.0)
        q = jnp.sum(qk, axis=3)
        Qa = Q - served_port
        # 4. Served bytes travel to the next hop; the last hop's come back as ACKs.
        to_next = jnp.where(is_last[None], 0.0, served)
        arrive = jnp.concatenate([jnp.zeros_like(to_next[:, :, :1]), to_next[:, :, :-1]], axis=2)
        for d in uniq:
            m = None if len(uniq) == 1 else (fl["arrive_delay"] == d).astype(f32)
            pipe = pipe.at[(t + d) % D].add(arrive * m[None] if m is not None else arrive)
        deliv = jnp.sum(jnp.where(is_last[None], served, 0.0), axis=2)
        qd_link = jnp.where(Qa > 0, Qa / jnp.maximum(avail, 1e-3 * cap[None, :]), 0.0)
        qd_path = jnp.where(valid[None], qd_link[:, path], 0.0)
        qd_down = jnp.flip(jnp.cumsum(jnp.flip(qd_path, 2), 2), 2) - qd_path  # queues after hop h
        qd_ack = jnp.sum(qd_link[:, fl["ack_path"]], axis=2)
        q_fb = jnp.minimum(jnp.rint(qd_down + qd_ack[:, :, None]), QDELAY_MAX).astype(jnp.int32)
        # The feedback rings are (D2, E, S), written through flat indices (one scatter of scalars).
        fb_slot = (t + fl["fb_delay"][None] + q_fb) % D2
        fb_at = (fb_slot * E + eidx[:, None, None]) * S + fidx[None, :, None]
        ack_slot = (t + fl["ack_delay"][None, :] + q_fb[:, fidx, last_hop]) % D2
        ack_at = (ack_slot * E + eidx[:, None]) * S + fidx[None, :]
        fb_ack = fb_ack.reshape(-1).at[ack_at.reshape(-1)].add(deliv.reshape(-1), mode="promise_in_bounds")
        fb_ack = fb_ack.reshape(D2, E, S)
        # 5. Feedback the served packets carry: ECN marks, HPCC's per-hop utilisation.
        if hpcc:
            tx = (served_port + ack_load) / cap[None, :]
            qmin = jnp.minimum(Qa, carry["Qprev"])
            u_hop = tx + qmin / f32(max(st["max_bdp"], 1.0)) * (line_max / (cap * 8 / dt))[None, :]
            # Switches stamp the INT words (at dequeue); a host's NIC does not (the exact engine's
            # ``engine/switch.rs``, as ns-3's SwitchNode), so the sender's own link is not in U:
            # several flows of one host may fill its link together while each sees only the
            # switch ports of its path.
            u_fh = jnp.where(valid[None] & (served > 0) & ecn_port[path][None], u_hop[:, path], 0.0)
            # Each hop's word reaches the sender at its own delay (the INT words of one packet
            # arrive together); the sender takes the largest.
            fb_cc = fb_cc.reshape(-1).at[fb_at.reshape(-1)].max(u_fh.reshape(-1), mode="promise_in_bounds")
            fb_cc = fb_cc.reshape(D2, E, S)
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
            fb_cc = fb_cc.reshape(-1).at[fb_at.reshape(-1)].add(lognm.reshape(-1), mode="promise_in_bounds")
            fb_cc = fb_cc.reshape(D2, E, S)
        # 6. PFC: pause the upstream port of an ingress holding more than its dynamic threshold.
        held = seg(q, fl["ingress"], L + 1, mats.get("ingress"))
        shared = jnp.maximum(held - reserve, 0.0)
        used = seg(shared, ingress_node, N + 1, fl["node_mat"])
        thr = jnp.maximum(free_base[None, :] - used, 0.0)[:, ingress_node] * shift[None, :]
        pause = shared > thr
        resume = shared + resume_off <= thr
        paused = jnp.where(pause, 1.0, jnp.where(resume, 0.0, carry["paused"]))
        # 7. The sender reads this step's feedback.
        s2 = t % D2
        new_acked, got_cc = fb_ack[s2], fb_cc[s2]
        fb_ack = fb_ack.at[s2].set(0.0)
        fb_cc = fb_cc.at[s2].set(0.0)
        has_ack = new_acked > 0
        acked_before = acked
        acked, acked_c = _kahan_add(acked, carry["acked_c"], new_acked)
        # Within half a packet: the (compensated) float32 sums of a flow's bytes are a few bytes
        # off, and the proportional service leaves a vanishing tail in the queues.
        done_now = active & (acked >= size_wire[None, :] - f32(wire / 2))
        part = jnp.clip((size_wire[None, :] - acked_before) / jnp.maximum(new_acked, 1e-9), 0.0, 1.0)
        fct = jnp.where(done_now, (t + part).astype(f32), carry["fct"])
        cc_state = dict(carry["cc"])
        if hpcc:
            rate, cc_state = _hpcc(jnp, cc_state, P, rate, sent, acked, has_ack & active, got_cc, line_bps, t)
        else:
            # A seeded draw per experiment, flow and step (a hash of the four: the flow's draws
            # do not depend on the slot it holds).
            h = _hash32(jnp, fl["fseed"] ^ (t.astype(jnp.uint32) * jnp.uint32(0x9E3779B1)))
            h = _hash32(jnp, h[None, :] + (eidx.astype(jnp.uint32) * jnp.uint32(0x85EBCA77) + seed)[:, None])
            u = (h >> 8).astype(f32) * f32(2.0**-24)
            # A mark comes back on its own ACK (the receiver ACKs every data packet and echoes
            # its CE bit as the CNP flag: ``receive_data`` in the exact engine's nic.rs), so a
            # CNP can reach the sender only in a step where a whole ACK does. A flow under one
            # packet a step (below ~8 Gb/s: at MIN_RATE, 1 Gb/s, a packet every 8.4 us) gathers
            # its fractional packets' no-mark log-probabilities until its next whole ACK, and
            # draws then. Drawing every step on fractional packets made a flow at MIN_RATE under a
            # queue above kmax see a CNP in ~80% of its 1 us steps (1 - 1e-6 ** 0.12) instead of
            # one per packet, which kept its alpha near 1 (set once per packet, alpha decays to
            # about 1/8 of that rate), so its cuts after recovering were deeper than the exact
            # engine's: the small-kmin incast points were 5-14% slow (bench/README.md).
            # The chance of no CNP over many packets is the same either way.
            n_ack = carry["cc"]["ack_pk"] + new_acked / f32(wire)
            whole = n_ack >= 1.0
            ack_pk = jnp.where(whole, n_ack - jnp.floor(n_ack), n_ack)
            marks = carry["cc"]["ack_marks"] + got_cc
            cnp = active & whole & (u < -jnp.expm1(marks))
            ack_marks = jnp.where(whole, 0.0, marks)
            rate, cc_dcqcn = _dcqcn(jnp, cc_state, P, rate, cnp, t, active, line_bps)
            cc_state = {**cc_dcqcn, "ack_pk": ack_pk, "ack_marks": ack_marks}
        # Nothing started, queued or in flight: jump to the next flow's start (within the window).
        idle = ~jnp.any(active)
        later = jnp.where(start_step > t, start_step, big)
        t_next = jnp.where(idle, jnp.maximum(jnp.min(later), t + 1), t + 1)
        return {
            "t": jnp.minimum(t_next, carry["t_stop"]),
            "t_stop": carry["t_stop"],
            "q": qk,
            "cohort": c,
            "pipe": pipe,
            "fb_ack": fb_ack,
            "fb_cc": fb_cc,
            "rate": rate,
            "sent": sent,
            "sent_c": sent_c,
            "acked": acked,
            "acked_c": acked_c,
            "deliv": deliv,
            "paused": paused,
            "Qprev": Qa,
            "fct": fct,
            "cc": cc_state,
            "max_q": jnp.maximum(carry["max_q"], Qa),
            "pause_steps": carry["pause_steps"] + paused,
            **({"Qk": Qk, "before": before} if K > 1 else {}),
        }

    def _dcqcn(
        jnp: Any, c: dict[str, Any], P: dict[str, Any], rate: Any, cnp: Any, t: Any, active: Any, line_bps: Any
    ) -> Any:
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
        jnp: Any,
        c: dict[str, Any],
        P: dict[str, Any],
        rate: Any,
        sent: Any,
        acked: Any,
        ack: Any,
        U: Any,
        line_bps: Any,
        t: Any,
    ) -> Any:
        init = ack & ~c["started"]
        upd = ack & c["started"]
        # The EWMA weighs a sample by the time since the flow's last one, up to the base RTT
        # (``hpcc.rs``: tau, the INT time delta at the hop, capped at T): a flow that got no ACK
        # for a while (window-bound behind a deep queue) takes the first sample after the gap at
        # full weight, as the exact engine does, instead of a step's worth. With a fixed weight
        # per step such a flow kept the utilisation of the queue it waited behind for many RTTs
        # and came out of an incast's first drain far slower than the flows ACKed throughout,
        # which FIFO service made the most of (bench/README.md, issue 36).
        gap = jnp.minimum((t - c["t_int"]).astype(f32) * f32(step_ns), f32(T_ns))
        u = jnp.where(upd, c["u"] + (U - c["u"]) * (gap / f32(T_ns)), c["u"])
        max_c = u / P["u_target"][:, None]
        mi = (max_c >= 1.0) | (c["stage"].astype(jnp.float32) >= P["mi_thresh"][:, None])
        r = jnp.where(mi, c["cur"] / jnp.maximum(max_c, 1e-6), c["cur"]) + P["rate_ai_bps"][:, None]
        r = jnp.clip(r, P["min_rate_bps"][:, None], line_bps[None, :])
        new_stage = jnp.where(mi, 0, c["stage"] + 1)
        # A commit needs an ACK beyond the data sent at the last one (``pk.seq > last_update_seq``,
        # seq and snd_nxt at packet boundaries): one more whole packet acked. A fluid flow at a few
        # Gb/s would otherwise commit (and multiply its rate) once per RTT instead of once per
        # RTT plus a packet's pacing gap.
        commit = upd & (acked >= c["last_seq"] + f32(wire))
        rate = jnp.where(commit | (upd & fast_react), r, rate)
        return rate, {
            "started": c["started"] | init,
            "u": u,
            "cur": jnp.where(commit, r, c["cur"]),
            "stage": jnp.where(commit, new_stage, c["stage"]),
            "last_seq": jnp.where(init | commit, sent, c["last_seq"]),
            "t_int": jnp.where(ack, t, c["t_int"]),
        }

    # The per-flow state, by its slot axis, and a new flow's value there (a callable of the
    # slots' line rates: the sender starts at line rate).
    def fresh(E: int, S: int, line: Any) -> dict[str, Any]:
        zeros = jnp.zeros((E, S), f32)
        line = jnp.broadcast_to(line[None, :], (E, S))
        if hpcc:
            cc0 = {
                "started": jnp.zeros((E, S), bool),
                "u": jnp.ones((E, S), f32),
                "cur": line,
                "stage": jnp.zeros((E, S), jnp.int32),
                "last_seq": zeros,
                "t_int": jnp.zeros((E, S), jnp.int32),  # the step of the flow's last INT sample
            }
        else:
            cc0 = {
                "alpha": jnp.ones((E, S), f32),
                "alpha_cnp": jnp.zeros((E, S), bool),
                "dec_cnp": jnp.zeros((E, S), bool),
                "first": jnp.ones((E, S), bool),
                "target": line,
                "stage": jnp.zeros((E, S), jnp.int32),
                "t_alpha": jnp.full((E, S), big),
                "t_dec": jnp.full((E, S), big),
                "t_inc": jnp.full((E, S), big),
                # ACK packets (fractional) since the last whole one, and the no-mark
                # log-probability their marks gathered since then.
                "ack_pk": zeros,
                "ack_marks": zeros,
            }
        return {
            "q": jnp.zeros((E, S, H, K), f32),
            "pipe": jnp.zeros((D, E, S, H), f32),
            "fb_ack": jnp.zeros((D2, E, S), f32),
            "fb_cc": jnp.zeros((D2, E, S), f32),
            "rate": line,
            "sent": zeros,
            "sent_c": zeros,
            "acked": zeros,
            "acked_c": zeros,
            "deliv": zeros,
            "fct": jnp.full((E, S), -1.0, f32),
            "cc": cc0,
        }

    axis = {"q": 1, "pipe": 2, "fb_ack": 2, "fb_cc": 2}

    @jax.jit
    def remap_jit(old: Any, src: Any, fresh_mask: Any, line: Any, pad: Any) -> Any:
        E = old["rate"].shape[0]
        S = src.shape[0]
        new = fresh(E, S, line)
        j = jnp.maximum(src, 0)

        def one(key: str, o: Any, n: Any) -> Any:
            a = axis.get(key, 1)
            shape = [1] * n.ndim
            shape[a] = S
            took = jnp.take(o, j, axis=a)
            return jnp.where(fresh_mask.reshape(shape), n, took)

        out = {k: one(k, old[k], new[k]) for k in new if k != "cc"}
        out["cc"] = {k: one(k, old["cc"][k], new["cc"][k]) for k in new["cc"]}
        # An empty slot is done from the start (the loop waits for no one there).
        out["fct"] = jnp.where(pad[None, :], 0.0, out["fct"])
        return out

    @jax.jit
    def fresh_jit(line: Any, pad: Any, e: Any) -> Any:
        out = fresh(e.shape[0], line.shape[0], line)
        out["fct"] = jnp.where(pad[None, :], 0.0, out["fct"])
        return out

    def prepare(fl: dict[str, Any]) -> dict[str, Any]:
        """A window's per-flow columns as the step uses them (loop invariants)."""
        fl = dict(fl)
        fl["is_last"] = jnp.arange(H)[None, :] == fl["last_hop"][:, None]
        fl["fseed"] = _hash32(jnp, fl["fkey"] * jnp.uint32(0x27D4EB2F) + jnp.uint32(0x165667B1))
        if onehot:
            oh = lambda idx: jax.nn.one_hot(idx.reshape(-1), L + 1, dtype=f32)
            fl["mats"] = {"nic": oh(fl["path"][:, 0]), "path": oh(fl["path"]), "ack": oh(fl["ack_path"])}
            fl["mats"]["ingress"] = oh(fl["ingress"])
            if K > 1:
                Pw = fl["pw"].shape[0]
                ohp = lambda idx: jax.nn.one_hot(idx.reshape(-1), Pw, dtype=f32)
                fl["mats"].update(pslot=ohp(fl["pslot"]), pnic=ohp(fl["pslot"][:, 0]), pw=oh(fl["pw"]))
            fl["node_mat"] = jax.nn.one_hot(ingress_node, N + 1, dtype=f32)
        else:
            fl["mats"] = {}
            fl["node_mat"] = None
        return fl

    def run_window(state: Any, ports: Any, pk: Any, fl: Any, P: Any, seed: Any, t0: Any, t_stop: Any) -> Any:
        fl = prepare(fl)
        carry = dict(state, **ports, **pk, t=t0, t_stop=t_stop)

        def cond(c: dict[str, Any]) -> Any:
            return (c["t"] < c["t_stop"]) & jnp.any(c["fct"] < 0)

        def body(c: dict[str, Any]) -> Any:
            return step(c, fl, P, seed)

        out = lax.while_loop(cond, body, carry)
        state = {k: out[k] for k in state}
        ports = {k: out[k] for k in ports}
        pk = {k: out[k] for k in pk}
        return state, ports, pk, out["t"]

    window_jit = jax.jit(run_window, donate_argnums=(0, 1, 2))

    @jax.jit
    def remap_ports_jit(old: Any, src: Any) -> Any:
        keep = (src >= 0)[None, :, None]
        return {k: jnp.where(keep, jnp.take(v, jnp.maximum(src, 0), axis=1), 0.0) for k, v in old.items()}

    class Window:
        @staticmethod
        def ports(E: int, t0: int) -> dict[str, Any]:
            return {
                "cohort": jnp.int32(t0 // B % K),
                **{k: jnp.zeros((E, L + 1), f32) for k in ("paused", "Qprev", "max_q", "pause_steps")},
            }

        @staticmethod
        def remap_ports(pk: Any, src: np.ndarray, E: int, Pw: int) -> Any:
            """The ports' cohort columns (``Qk``, ``before``) moved to a window's port slots."""
            if K == 1:
                return {}
            if pk is None:
                return {k: jnp.zeros((E, Pw, K), f32) for k in ("Qk", "before")}
            return remap_ports_jit(pk, jnp.asarray(src))

        @staticmethod
        def remap(
            state: Any, src: np.ndarray, fresh_mask: np.ndarray, fl: dict[str, np.ndarray], E: int, S: int
        ) -> Any:
            line = jnp.asarray(fl["line_bps"])
            pad = jnp.asarray(fl["start_step"] >= big_i)
            if state is None:
                return fresh_jit(line, pad, jnp.zeros(E))
            return remap_jit(state, jnp.asarray(src), jnp.asarray(fresh_mask), line, pad)

        @staticmethod
        def run(state: Any, ports: Any, pk: Any, fl: Any, P: Any, seed: Any, t0: Any, t_stop: Any) -> Any:
            return window_jit(state, ports, pk, fl, P, seed, t0, t_stop)

        @staticmethod
        def results(state: Any) -> Any:
            return state["fct"], state["sent"]

        @staticmethod
        def port_stats(ports: Any) -> Any:
            return ports["max_q"], ports["pause_steps"]

    eng = _Engine(jax, st, Window, flows)
    eng.flows_pad = flows_pad
    return eng
