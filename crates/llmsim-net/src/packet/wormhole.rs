//! Wormhole steady-state fast-forwarding (Long et al., NSDI'26, §3 and §5), native to the engine.
//!
//! - **Partitions** (§3.1.1, App. B): union-find over the links (data and ACK paths) of the running
//!   flows, recomputed at a sample tick after any flow started or finished.
//! - **Steady state** (§5.1.2, eq. 6): every `sample_interval` each running flow samples its rate
//!   (bytes acknowledged over the interval). A flow is steady when the last `l` samples satisfy
//!   `(max - min) / mean < θ`; a partition when all its flows are.
//! - **Fast-forward** (§5.3, §6.2): a steady partition is frozen at `t0`. Its pending events
//!   (packet arrivals and transmissions on its links, NIC wake-ups, CC timers) leave the event
//!   queue and are parked; its queues and their shared-buffer occupancy stay as they are, so the
//!   other partitions see the same buffer. It resumes at the earliest interrupting event: a flow
//!   that starts on one of its links (skip-back: the resume time moves to that start) or the
//!   planned end, chosen so that no flow can finish inside the skip. On resume at `t0 + D`, each
//!   flow has moved `B = R̂ · D` bytes (whole chunks; `R̂` the mean of its samples, capped at its
//!   bottleneck's payload rate): sender and receiver sequence numbers, in-flight packets, CC
//!   sequence marks shift by `B`, and every absolute time of the partition (parked events,
//!   pacing, port busy times, packet and INT timestamps) by `D`. The rest of the flow runs packet
//!   by packet; it finishes only through the packet path.
//!
//! Not done: memoization of unsteady episodes (§4), link failures and rerouting (routes are static).

use llmsim_core::SimTime;

use super::PacketError;
use super::config::{CcMode, WormholeConfig};
use super::engine::{
    EV_ALPHA, EV_ARRIVE, EV_DECREASE, EV_RESUME, EV_RPTIMER, EV_SAMPLE, EV_START, EV_TXDONE, EV_WAKE, Engine, Kind, MASK30, ev,
};

const NONE: u32 = u32::MAX;

/// Counters of the fast-forwarding of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WormholeStats {
    /// Partitions frozen (steady episodes skipped).
    pub freezes: u64,
    /// Resumes earlier than planned because a flow started on a frozen partition (skip-back).
    pub skip_backs: u64,
    /// Sum over freezes of the skipped time (ps).
    pub skipped_ps: u64,
    /// Payload bytes moved by fast-forwarding instead of packets.
    pub skipped_bytes: u64,
    /// Rate-sample ticks run.
    pub ticks: u64,
}

/// One flow's fast-forward: from `start` to `end` at `rate_bps` (payload), `bytes` moved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SkipRecord {
    pub flow: u32,
    pub start: SimTime,
    pub end: SimTime,
    pub rate_bps: f64,
    pub bytes: u64,
}

#[derive(Default)]
struct Frozen {
    live: bool,
    generation: u32,
    t0: u64,
    resume_at: u64,
    links: Vec<u32>,
    flows: Vec<u32>,
    /// Estimated rate of each flow of `flows` (payload bits/s).
    rates: Vec<f64>,
    /// Parked events: (time, seq, event).
    parked: Vec<(u64, u64, u64)>,
}

pub(crate) struct Wormhole {
    cfg: WormholeConfig,
    pub(crate) stats: WormholeStats,
    tick_pending: bool,
    /// Partitions must be recomputed (a flow started or finished).
    dirty: bool,
    /// Running flows (started, maybe done: pruned at each tick).
    active: Vec<u32>,
    last_una: Vec<u64>,
    /// Rate samples, `window` per flow (ring), and how many were taken since the last reset.
    samples: Vec<f64>,
    nsamp: Vec<u32>,
    flow_slot: Vec<u32>,
    link_slot: Vec<u32>,
    /// Links a flow started or finished on since the last tick (their partitions restart sampling).
    link_touched: Vec<bool>,
    uf: Vec<u32>,
    root: Vec<u32>,
    slots: Vec<Frozen>,
    scratch: Vec<(u32, u32)>,
    pub(crate) log: Vec<SkipRecord>,
}

impl Wormhole {
    pub(crate) fn new(e: &Engine) -> Wormhole {
        let nl = e.link_rate.len();
        Wormhole {
            cfg: e.cfg.wormhole,
            stats: WormholeStats::default(),
            tick_pending: false,
            dirty: false,
            active: Vec::new(),
            last_una: Vec::new(),
            samples: Vec::new(),
            nsamp: Vec::new(),
            flow_slot: Vec::new(),
            link_slot: vec![NONE; nl],
            link_touched: vec![false; nl],
            uf: (0..nl as u32).collect(),
            root: Vec::new(),
            slots: Vec::new(),
            scratch: Vec::new(),
            log: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn link_frozen(&self, link: u32) -> bool {
        self.link_slot[link as usize] != NONE
    }

    fn find(&mut self, mut x: u32) -> u32 {
        while self.uf[x as usize] != x {
            let p = self.uf[x as usize];
            self.uf[x as usize] = self.uf[p as usize];
            x = p;
        }
        x
    }

    fn grow(&mut self, nflows: usize) {
        let l = self.cfg.window;
        if self.flow_slot.len() < nflows {
            self.flow_slot.resize(nflows, NONE);
            self.last_una.resize(nflows, 0);
            self.nsamp.resize(nflows, 0);
            self.root.resize(nflows, NONE);
            self.samples.resize(nflows * l, 0.0);
        }
    }

    /// The slot (frozen partition) an event belongs to, if any.
    #[inline]
    fn owner(&self, e: &Engine, kind: u64, a: u32) -> u32 {
        match kind {
            EV_ARRIVE | EV_TXDONE => self.link_slot[a as usize],
            EV_WAKE => self.link_slot[e.nics[a as usize].link as usize],
            EV_ALPHA | EV_DECREASE | EV_RPTIMER => self.flow_slot.get(a as usize).copied().unwrap_or(NONE),
            _ => NONE,
        }
    }
}

/// The links of flow `f` (data path then ACK path).
fn flow_links(e: &Engine, f: usize) -> std::ops::Range<usize> {
    let start = e.flows[f].path_data as usize;
    let end = e.flows.get(f + 1).map_or(e.paths.len(), |n| n.path_data as usize);
    start..end
}

impl Engine {
    /// Sets the fast-forward knobs; call before the run starts (no flow started yet).
    ///
    /// # Errors
    /// `PacketError::Config` naming a knob out of range, or when a flow has already started.
    pub fn set_wormhole(&mut self, cfg: WormholeConfig) -> Result<(), PacketError> {
        cfg.validate().map_err(PacketError::Config)?;
        if self.flows.iter().any(|f| f.started) {
            return Err(PacketError::Config("wormhole knobs must be set before any flow starts".into()));
        }
        self.cfg.wormhole = cfg;
        self.ww = if cfg.fast_forward {
            Some(Box::new(Wormhole::new(self)))
        } else {
            None
        };
        Ok(())
    }

    /// Every flow's fast-forwards so far, in the order they ended.
    pub fn wormhole_log(&self) -> &[SkipRecord] {
        self.ww.as_ref().map_or(&[], |w| &w.log)
    }

    /// Payload bytes of flow `f` acknowledged so far.
    pub fn flow_bytes_acked(&self, f: u32) -> u64 {
        self.flows[f as usize].snd_una
    }

    /// Fast-forward statistics (`None` when fast-forwarding is off).
    pub fn wormhole_stats(&self) -> Option<WormholeStats> {
        self.ww.as_ref().map(|w| w.stats)
    }

    /// Handles Wormhole's own events and parks events of frozen partitions; true when `e` is
    /// consumed.
    #[inline(never)]
    pub(crate) fn ww_intercept(&mut self, e: u64, kind: u64, a: u32, b: u32) -> bool {
        let mut w = self.ww.take().expect("wormhole on");
        let consumed = match kind {
            EV_SAMPLE => {
                w.tick_pending = false;
                self.ww_tick(&mut w);
                true
            }
            EV_RESUME => {
                let s = a as usize;
                if w.slots[s].live && w.slots[s].generation & MASK30 as u32 == b {
                    self.ww_resume(&mut w, a);
                }
                true
            }
            EV_START => {
                // Skip-back: a flow arriving on a frozen partition ends its skip now.
                w.grow(self.flows.len());
                for i in flow_links(self, a as usize) {
                    let s = w.link_slot[self.paths[i] as usize];
                    if s != NONE {
                        if self.now < w.slots[s as usize].resume_at {
                            w.stats.skip_backs += 1;
                        }
                        self.ww_resume(&mut w, s);
                    }
                }
                false
            }
            _ => {
                let s = w.owner(self, kind, a);
                if s != NONE {
                    let seq = self.events.cur_seq();
                    w.slots[s as usize].parked.push((self.now, seq, e));
                    self.stats.events -= 1;
                    true
                } else {
                    false
                }
            }
        };
        self.ww = Some(w);
        consumed
    }

    #[cold]
    pub(crate) fn ww_on_start(&mut self, f: u32) {
        let mut w = self.ww.take().expect("wormhole on");
        w.grow(self.flows.len());
        w.active.push(f);
        w.nsamp[f as usize] = 0;
        w.last_una[f as usize] = 0;
        w.dirty = true;
        for i in flow_links(self, f as usize) {
            w.link_touched[self.paths[i] as usize] = true;
        }
        if !w.tick_pending {
            w.tick_pending = true;
            let at = self.now + w.cfg.sample_interval.as_ps();
            self.schedule(at, ev(EV_SAMPLE, 0, 0));
        }
        self.ww = Some(w);
    }

    #[cold]
    pub(crate) fn ww_on_finish(&mut self, f: u32) {
        let mut w = self.ww.take().expect("wormhole on");
        w.dirty = true;
        for i in flow_links(self, f as usize) {
            w.link_touched[self.paths[i] as usize] = true;
        }
        self.ww = Some(w);
    }

    fn ww_tick(&mut self, w: &mut Wormhole) {
        w.stats.ticks += 1;
        let l = w.cfg.window;
        let iv = w.cfg.sample_interval.as_ps();
        let iv_s = iv as f64 * 1e-12;
        let flows = &self.flows;
        w.active.retain(|&f| !flows[f as usize].done);
        // Rate samples of the running, unfrozen flows.
        for k in 0..w.active.len() {
            let f = w.active[k] as usize;
            if w.flow_slot[f] != NONE {
                continue;
            }
            let una = self.flows[f].snd_una;
            let r = (una.saturating_sub(w.last_una[f])) as f64 * 8.0 / iv_s;
            w.last_una[f] = una;
            let n = w.nsamp[f] as usize;
            w.samples[f * l + n % l] = r;
            w.nsamp[f] = w.nsamp[f].saturating_add(1);
        }
        // Partitions.
        if w.dirty {
            w.dirty = false;
            for (i, x) in w.uf.iter_mut().enumerate() {
                *x = i as u32;
            }
            for k in 0..w.active.len() {
                let f = w.active[k] as usize;
                let r = flow_links(self, f);
                let first = self.paths[r.start];
                for i in r {
                    let (x, y) = (w.find(first), w.find(self.paths[i]));
                    if x != y {
                        w.uf[x as usize] = y;
                    }
                }
            }
            for k in 0..w.active.len() {
                let f = w.active[k] as usize;
                let first = self.paths[self.flows[f].path_data as usize];
                w.root[f] = w.find(first);
            }
        }
        // Group the flows by partition; test each for steadiness.
        let mut groups = std::mem::take(&mut w.scratch);
        groups.clear();
        groups.extend(w.active.iter().map(|&f| (w.root[f as usize], f)));
        groups.sort_unstable();
        let mut i = 0;
        while i < groups.len() {
            let r = groups[i].0;
            let mut j = i;
            while j < groups.len() && groups[j].0 == r {
                j += 1;
            }
            let members = &groups[i..j];
            let touched = members
                .iter()
                .any(|&(_, f)| flow_links(self, f as usize).any(|k| w.link_touched[self.paths[k] as usize]));
            let frozen = members.iter().any(|&(_, f)| w.flow_slot[f as usize] != NONE);
            if touched {
                for &(_, f) in members {
                    if w.flow_slot[f as usize] == NONE {
                        w.nsamp[f as usize] = 0;
                    }
                }
            } else if !frozen && members.iter().all(|&(_, f)| steady(w, f as usize)) {
                let fl: Vec<u32> = members.iter().map(|&(_, f)| f).collect();
                self.ww_freeze(w, fl);
            }
            i = j;
        }
        w.scratch = groups;
        w.link_touched.iter_mut().for_each(|t| *t = false);
        if !w.active.is_empty() {
            w.tick_pending = true;
            self.schedule(self.now + iv, ev(EV_SAMPLE, 0, 0));
        }
    }

    /// Freezes a steady partition made of `flows`, if its planned skip is worth it.
    fn ww_freeze(&mut self, w: &mut Wormhole, flows: Vec<u32>) {
        let l = w.cfg.window;
        let iv = w.cfg.sample_interval.as_ps();
        let mtu = u64::from(self.cfg.mtu);
        let unit = chunk_unit(self.cfg.chunk, mtu);
        let mut rates = Vec::with_capacity(flows.len());
        let mut skip_ps = u64::MAX;
        for &f in &flows {
            let fi = f as usize;
            let mean = w.samples[fi * l..fi * l + l].iter().sum::<f64>() / l as f64;
            // Safety: never faster than the bottleneck's payload rate.
            let bottleneck = self.paths[self.flows[fi].path_data as usize..self.flows[fi].path_ack as usize]
                .iter()
                .map(|&k| self.link_rate[k as usize])
                .min()
                .unwrap_or(0) as f64
                * mtu as f64
                / (mtu + u64::from(self.hdr_bytes)) as f64;
            let r = mean.min(bottleneck);
            rates.push(r);
            let fl = &self.flows[fi];
            // Leave the last stretch (two sample intervals' worth and a few chunks) to packets.
            let guard = (r * 2.0 * iv as f64 * 1e-12 / 8.0) as u64 + 8 * unit;
            let room = fl.size.saturating_sub(fl.max_sent.max(fl.snd_nxt) + guard);
            let t = room as f64 * 8.0 / r * 1e12;
            skip_ps = skip_ps.min(if t.is_finite() { t as u64 } else { 0 });
        }
        if skip_ps < 2 * iv {
            return;
        }
        let skip_ps = skip_ps / 1000 * 1000;
        let mut links = Vec::new();
        for &f in &flows {
            for i in flow_links(self, f as usize) {
                links.push(self.paths[i]);
            }
        }
        links.sort_unstable();
        links.dedup();
        let s = match w.slots.iter().position(|x| !x.live) {
            Some(s) => s,
            None => {
                w.slots.push(Frozen::default());
                w.slots.len() - 1
            }
        };
        for &k in &links {
            w.link_slot[k as usize] = s as u32;
        }
        for &f in &flows {
            w.flow_slot[f as usize] = s as u32;
        }
        let mut parked = std::mem::take(&mut w.slots[s].parked);
        parked.clear();
        {
            let w_ref: &Wormhole = w;
            let nics = &self.nics;
            self.events.extract(
                |e| {
                    let kind = e & 0xF;
                    let a = ((e >> 4) & MASK30) as u32;
                    let owner = match kind {
                        EV_ARRIVE | EV_TXDONE => w_ref.link_slot[a as usize],
                        EV_WAKE => w_ref.link_slot[nics[a as usize].link as usize],
                        EV_ALPHA | EV_DECREASE | EV_RPTIMER => w_ref.flow_slot.get(a as usize).copied().unwrap_or(NONE),
                        _ => NONE,
                    };
                    owner == s as u32
                },
                &mut parked,
            );
        }
        let slot = &mut w.slots[s];
        slot.live = true;
        slot.generation = slot.generation.wrapping_add(1);
        slot.t0 = self.now;
        slot.resume_at = self.now + skip_ps;
        slot.links = links;
        slot.flows = flows;
        slot.rates = rates;
        slot.parked = parked;
        let g = slot.generation;
        w.stats.freezes += 1;
        self.schedule(self.now + skip_ps, ev(EV_RESUME, s as u32, g));
    }

    /// Ends the skip of slot `s` now: advances its flows, shifts its times, re-queues its events.
    fn ww_resume(&mut self, w: &mut Wormhole, s: u32) {
        let si = s as usize;
        let t0 = w.slots[si].t0;
        let d = (self.now - t0).div_ceil(1000) * 1000;
        let d_ns = d / 1000;
        let d_s = d as f64 * 1e-12;
        let mtu = u64::from(self.cfg.mtu);
        let unit = chunk_unit(self.cfg.chunk, mtu);
        let generation = w.slots[si].generation;
        let slot = std::mem::replace(
            &mut w.slots[si],
            Frozen {
                generation,
                ..Frozen::default()
            },
        );
        // Bytes each flow moved during the skip.
        let mut moved = Vec::with_capacity(slot.flows.len());
        for (k, &f) in slot.flows.iter().enumerate() {
            let fl = &mut self.flows[f as usize];
            let want = (slot.rates[k] * d_s / 8.0) as u64 / unit * unit;
            let top = fl.max_sent.max(fl.snd_nxt);
            let cap = (fl.size.saturating_sub(top) / unit).saturating_sub(1) * unit;
            let b = want.min(cap);
            fl.snd_nxt += b;
            fl.snd_una += b;
            fl.max_sent += b;
            fl.rx_expected += b;
            fl.last_nack += b;
            if fl.nack_timer > 0 {
                fl.nack_timer += d;
            }
            fl.next_avail += d;
            if fl.cc.last_update_seq != 0 {
                fl.cc.last_update_seq += b;
            }
            if fl.cc.high_seq != 0 {
                fl.cc.high_seq += b;
            }
            for h in &mut fl.cc.hops {
                *h = super::cc::shift_int_time(*h, d_ns);
            }
            self.stats.payload_delivered += b;
            w.stats.skipped_bytes += b;
            w.flow_slot[f as usize] = NONE;
            w.log.push(SkipRecord {
                flow: f,
                start: SimTime::from_ps(t0),
                end: SimTime::from_ps(t0 + d),
                rate_bps: slot.rates[k],
                bytes: b,
            });
            moved.push((f, b));
        }
        moved.sort_unstable();
        let shift_pkt = |e: &mut Engine, p: u32| {
            let pk = &mut e.pkts[p as usize];
            if pk.kind == Kind::Pfc {
                return;
            }
            if let Ok(k) = moved.binary_search_by_key(&pk.flow, |&(f, _)| f) {
                pk.seq += moved[k].1;
                pk.ts_ns += d_ns;
                if e.cfg.cc == CcMode::Hpcc {
                    for h in &mut e.ints[p as usize] {
                        *h = super::cc::shift_int_time(*h, d_ns);
                    }
                }
            }
        };
        // Queued packets on the partition's ports and NICs' ACK queues.
        for &k in &slot.links {
            w.link_slot[k as usize] = NONE;
            let ki = k as usize;
            let queued: Vec<u32> = self.ports[ki].queues.iter().flat_map(|q| q.iter(&self.pkts)).collect();
            for p in queued {
                shift_pkt(self, p);
            }
            if self.ports[ki].busy_until > t0 {
                self.ports[ki].busy_until += d;
            }
            let src = self.link_src[ki];
            if src < self.topo.num_hosts() {
                let h = src as usize;
                let acks: Vec<u32> = self.nics[h].ackq.iter(&self.pkts).collect();
                for p in acks {
                    shift_pkt(self, p);
                }
                if let Some(t) = self.nics[h].next_send.as_mut() {
                    *t += d;
                }
            }
        }
        // Packets on the wire, then the parked events themselves.
        for &(_, _, e) in &slot.parked {
            if e & 0xF == EV_ARRIVE {
                shift_pkt(self, ((e >> 34) & MASK30) as u32);
            }
        }
        for &(t, seq, e) in &slot.parked {
            self.events.push_seq(t + d, seq, e);
        }
        w.stats.skipped_ps += d;
        for &(f, _) in &moved {
            w.nsamp[f as usize] = 0;
            w.last_una[f as usize] = self.flows[f as usize].snd_una;
        }
        // A port left with packets and nothing scheduled (a stray packet queued while frozen).
        for &k in &slot.links {
            let ki = k as usize;
            let pt = &self.ports[ki];
            if !pt.busy && pt.total > 0 && self.link_src[ki] >= self.topo.num_hosts() {
                self.switch_send(k);
            }
        }
        let mut slot = slot;
        slot.parked.clear();
        let keep = &mut w.slots[si];
        keep.parked = slot.parked;
    }
}

/// Fast-forwarded bytes are whole multiples of this: the MTU, or the ACK chunk when it is a
/// multiple of the MTU (chunk-aligned ACK points stay aligned).
fn chunk_unit(chunk: u64, mtu: u64) -> u64 {
    if chunk > 0 && chunk.is_multiple_of(mtu) { chunk } else { mtu }
}

/// Eq. 6: the last `l` samples fluctuate by less than θ of their mean.
fn steady(w: &Wormhole, f: usize) -> bool {
    let l = w.cfg.window;
    (w.nsamp[f] as usize) >= l && steady_estimate(&w.samples[f * l..f * l + l], w.cfg.theta).0
}

/// Eq. 6 and eq. 7 on one window of samples: `(steady, R̂)`.
pub fn steady_estimate(samples: &[f64], theta: f64) -> (bool, f64) {
    let l = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / l;
    let lo = samples.iter().copied().fold(f64::MAX, f64::min);
    let hi = samples.iter().copied().fold(0.0, f64::max);
    (mean > 0.0 && (hi - lo) / mean < theta, mean)
}
