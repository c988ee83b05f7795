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
//! - **Memoization** (§4, `memo.rs`; knob `memo`): when a partition's flow set changes (at the
//!   instant of the start or finish, after every event of that instant), its flow-conflict
//!   graph is built and looked up. A miss opens an episode; when the partition is next found
//!   steady with the same flows, the episode's outcome is stored: its duration, and per flow the
//!   bytes it moved, its steady rate and CC state. A hit freezes the partition at once with a
//!   plan of two legs: the stored transient (each flow moves its stored bytes in the stored
//!   time), then the steady rates. On resume past the transient each flow takes the stored CC
//!   state (rate, DCQCN α/target/stage and timers, HPCC U/stage, TIMELY/DCTCP estimators); a
//!   skip-back inside the transient moves the stored bytes pro rata and keeps the flow's own CC
//!   state. A flow too short for the stored transient ends the skip inside it, pro rata, where
//!   its last stretch is left to packets, and the flows take the stored CC state at that
//!   planned resume; the hit is refused (counted a miss) if that cut would come before 90% of
//!   the transient (`PRO_RATA_MIN`). Flows that just started have no window in flight at the
//!   freeze: on resume what they would have in flight by then (their own path's RTT at the
//!   rate) counts as delivered.
//! - **Episodes that end in a completion** (a short flow never looks steady): a lone flow's
//!   episode notes where it stands at a checkpoint one base RTT in (its first window in
//!   flight by then) and, at its completion, stores the stretch from there, keyed by the graph with the
//!   bytes left at the episode's start. A lone flow starting with the same key runs on packets
//!   to its checkpoint, then freezes and moves at the stored average rate until a round trip
//!   and a few chunks before the stored completion; it takes the stored CC state on resume.
//!   Contended partitions are not replayed this way (see `COMPLETION_MAX_FLOWS`).
//! - **Mirrored twins** (one rail's share of an all-to-all or of a DP ring): when partitions
//!   with the same canonical graph and the same flow sizes all start at one instant with fresh
//!   flows, the first is simulated (the leader: on packets, fast-forwarded when steady, frozen on
//!   a stored transient on a memo hit) and the others freeze at once. Each
//!   flow of a twin finishes at the instant its leader counterpart does, with no packets of its
//!   own; the twin's links thaw when its last flow is done. A flow that joins the leader's
//!   partition, or arrives on a twin's links, ends the mirror: the twin resumes on packets where
//!   its leader stands (as a deferred twin does, below). Flows that start on a leader's and on
//!   each twin's partition at the same instant, matching flow by flow on corresponding links,
//!   join the mirror instead (a DP ring meeting a rail's all-to-all on every rail).
//! - **Deferred twins**: identical partitions whose flow sets change at one instant without
//!   being fresh (a flow of each ended together) look up once: the first simulates its
//!   transient, the others freeze and take its outcome (or resume where it stands).
//! - **Run entries**: a leader's run that nothing joined, from its fresh start to its last
//!   completion, is stored (each flow's completion offset) under its graph weighted by the flow
//!   sizes. A later fresh short partition with that key freezes at once and finishes each flow
//!   at its stored offset; a flow arriving on its links resumes it on packets, each flow having
//!   moved its bytes at its stored average rate.
//! - **Joined runs**: a leader's history stays reproducible while only fresh flows join its
//!   partition (an all-to-all starting on a rail while that rail's DP step runs): its state at
//!   a join is then a function of its start key and of each join (the joining flows' sizes and
//!   start offsets), whether it ran on packets or was replayed. Its run from the join to its
//!   last completion is stored under that history (`join_key`); a leader meeting the same
//!   history later freezes at the join and finishes each flow at its stored offset from it.
//!
//! Not done: link failures and rerouting (routes are static).

use llmsim_core::SimTime;

use super::PacketError;
use super::config::WormholeConfig;
use super::engine::Engine;
use super::events::{
    self, EV_ARRIVE, EV_CC_TIMER, EV_CC_TIMER_LAST, EV_HOP, EV_RESUME, EV_SAMPLE, EV_START, EV_TXDONE, EV_WAKE, MASK30, ev,
};
use super::memo::{CcSnap, Fcg, FlowDesc, MemoDb, MemoFlow, MemoValue, fnv, mix};
use super::tables::{Nic, Pkt};

/// No slot, mirror or episode.
pub(crate) const NONE: u32 = u32::MAX;

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
    /// Memo lookups that skipped a transient.
    pub memo_hits: u64,
    /// Memo lookups that found nothing usable (the episode is then simulated).
    pub memo_misses: u64,
    /// Episodes stored in the memo database.
    pub memo_inserts: u64,
    /// Partitions that started together with an identical one and waited for its outcome
    /// instead of simulating the same transient (each then counts as a hit, or as a miss when
    /// that episode ended unsteady), or mirrored it to its completions (a hit when every flow
    /// finished with its leader counterpart, a miss when an arrival ended the mirror first).
    pub memo_deferred: u64,
    /// Partitions recomputed from scratch (union-find over every running flow's links).
    pub repartitions: u64,
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
    /// A memo hit: the stored transient comes first.
    plan: Option<MemoPlan>,
    /// A deferred twin: frozen the instant it started, while an identical partition that
    /// started with it records the transient they share.
    twin: Option<Twin>,
    /// The twin mirrors its leader to each completion (`Mirror`): a flow starting on its links
    /// is checked against the leader's partition at the episode check, not a skip-back at once.
    mirror: bool,
    /// A run entry's replay: each flow's completion time (empty otherwise).
    finish: Vec<u64>,
    /// Frozen with no resume event of its own (a twin, a replay, until `TWIN_MAX_PS`): the
    /// watchdog event stands in for it.
    watched: bool,
}

/// The recording partition a deferred twin follows: its flows in the twin's flow order and
/// their acknowledged bytes when both started.
struct Twin {
    leader: Vec<u32>,
    una0: Vec<u64>,
}

/// How long a deferred twin stays frozen at most (its leader's episode ends far sooner, and
/// always resolves it).
const TWIN_MAX_PS: u64 = 10_000_000_000_000;
/// The slot number of the watchdog's `EV_RESUME`: one event for the `TWIN_MAX_PS` deadlines of
/// all watched slots, instead of one per freeze (each stayed in the queue, stale, until its
/// time: thousands on an MoE run, scanned at every freeze).
const WATCHDOG: u32 = MASK30 as u32;

/// The stored transient of a memo hit, per flow of the frozen slot.
struct MemoPlan {
    t_conv: u64,
    bytes: Vec<u64>,
    cc: Vec<CcSnap>,
    /// A replay of an episode that ended in a completion `t_conv` after the checkpoint where
    /// the partition froze: each flow moves at its stored average rate over that stretch, with
    /// its own window in flight and its own CC state.
    completion: bool,
}

/// Base RTTs of data left to packets at the end of a skip.
const GUARD_RTTS: u64 = 2;

/// A memo hit whose stored transient outlasts a flow is taken only if the skip still covers
/// this share of the transient (the rest is pro rata, see `ww_memo_freeze`).
const PRO_RATA_MIN: f64 = 0.9;

/// Partitions above this many flows are not memoized (graph search cost).
const MEMO_MAX_FLOWS: usize = 64;
/// A partition this much larger than `MEMO_MAX_FLOWS` is not repartitioned at an episode
/// check when flows only left it (see `ww_episodes`).
const SPLIT_DEFER_FLOWS: usize = 4 * MEMO_MAX_FLOWS;

/// An episode opened by a miss, waiting for its partition to be steady.
struct Episode {
    live: bool,
    t_s: u64,
    hash: u64,
    graph: Fcg,
    /// Flows in the graph's (canonical) vertex order, and their acknowledged bytes at `t_s`.
    flows: Vec<u32>,
    una: Vec<u64>,
    /// Checkpoint `delta` after `t_s` (one base RTT: the flows' first windows are in flight
    /// by then): the time it was taken (0: not yet) and the acknowledged bytes then.
    delta: u64,
    t_check: u64,
    una_check: Vec<u64>,
    /// A replay waiting for its checkpoint: the stored completion time after it, per-flow bytes
    /// and rates (canonical order).
    replay: Option<(u64, Vec<MemoFlow>)>,
    /// Deferred twins (frozen slot, its generation): identical partitions that started at
    /// `t_s` and wait for this episode's outcome.
    followers: Vec<(u32, u32)>,
}

/// Entries of episodes that ended in a completion live under their graph's hash mixed with
/// this and their checkpoint delay (their graphs also weigh each flow by its bytes left).
const COMPLETION_TAG: u64 = 0xC0;

/// Episodes ending in a completion are replayed only for partitions of this many flows: a
/// lone flow's run to its end is reproducible; contended ones (a DCQCN incast of short flows)
/// replayed at their stored average rates ended 14-19% early in tests.
const COMPLETION_MAX_FLOWS: usize = 1;

/// A leader partition whose flows mirrored twins copy (`Engine::ww_episodes`).
struct Mirror {
    live: bool,
    /// The leader's flows, in the twins' flow order.
    leaders: Vec<u32>,
    /// The twins: (frozen slot, its generation).
    followers: Vec<(u32, u32)>,
    /// The leader's run being recorded: from its fresh start, or from the last join.
    record: Option<RunRecord>,
    /// The key of the leader's history while it is reproducible: the run key of its fresh
    /// start, then each join by fresh flows folded in (`join_key`). `None` once anything else
    /// touched it (or for long partitions, which have no run key).
    hist: Option<u64>,
    /// Fresh flows joined the leader's partition at this episode check.
    joined: bool,
    /// When the leader started, and its flow-conflict graph then: twins start at that instant
    /// with the same graph and the same sizes.
    t_s: u64,
    hash: u64,
    graph: Fcg,
}

/// A run being recorded from `t_base` (its mirror's fresh start, or a join): its key, and each
/// leader flow's completion offset from `t_base` (0: not yet).
struct RunRecord {
    t_base: u64,
    hash: u64,
    graph: Fcg,
    /// The leader (index into `Mirror::leaders`) of each flow vertex of `graph`.
    order: Vec<u32>,
    finish: Vec<u64>,
    /// Each leader flow's CC state when it finished.
    cc: Vec<CcSnap>,
}

impl RunRecord {
    /// A record from `t_base` of a mirror with `n` leaders, under key `(hash, graph)`.
    fn new(t_base: u64, hash: u64, graph: Fcg, order: Vec<u32>, n: usize) -> RunRecord {
        RunRecord {
            t_base,
            hash,
            graph,
            order,
            finish: vec![0; n],
            cc: vec![CcSnap::default(); n],
        }
    }
}

fn new_mirror(m: &mut Memo, leaders: Vec<u32>, t_s: u64, hash: u64, graph: Fcg, hist: Option<u64>) -> usize {
    let mi = Mirror {
        live: true,
        leaders,
        followers: Vec::new(),
        record: None,
        hist,
        joined: false,
        t_s,
        hash,
        graph,
    };
    let g = reuse_or_push(&mut m.mirrors, |x| !x.live, mi);
    for &f in &m.mirrors[g].leaders {
        m.mirror_of[f as usize] = g as u32;
    }
    g
}

/// Puts `x` in the first entry of `v` that `free` accepts, else at the end; returns its index.
fn reuse_or_push<T>(v: &mut Vec<T>, free: impl Fn(&T) -> bool, x: T) -> usize {
    match v.iter().position(free) {
        Some(i) => {
            v[i] = x;
            i
        }
        None => {
            v.push(x);
            v.len() - 1
        }
    }
}

struct Memo {
    db: MemoDb,
    mirrors: Vec<Mirror>,
    /// The mirror each running leader flow belongs to (`NONE`: none).
    mirror_of: Vec<u32>,
    context: u64,
    /// Links a flow started or finished on since the last episode check.
    touched: Vec<bool>,
    touched_list: Vec<u32>,
    check_pending: bool,
    episodes: Vec<Episode>,
    episode_of: Vec<u32>,
    root_mark: Vec<bool>,
    /// Mirrors that fresh flows joined at this episode check.
    joined: Vec<u32>,
}

pub(crate) struct Wormhole {
    cfg: WormholeConfig,
    pub(crate) stats: WormholeStats,
    tick_pending: bool,
    /// Partitions must be recomputed (a flow started or finished).
    dirty: bool,
    /// A flow started since the last repartition (partitions may have merged; with only
    /// finishes they can only have split).
    merged: bool,
    /// Flows in each partition (by root link) at the last repartition.
    part_size: Vec<u32>,
    /// Running flows (started, maybe done: pruned at each tick).
    active: Vec<u32>,
    last_una: Vec<u64>,
    /// Each flow's latest measured rate (its last sample, or the rate a skip moved it at; 0
    /// before its first): the rate an FCG vertex is weighed by.
    last_rate: Vec<f64>,
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
    /// When the watchdog event is due (`u64::MAX`: none queued).
    watchdog: u64,
    /// Scratch marks, one per link, all false between uses.
    link_mark: Vec<bool>,
    pub(crate) log: Vec<SkipRecord>,
    memo: Option<Box<Memo>>,
}

impl Memo {
    /// Stores an entry under this run's config context, counting it when it is new.
    fn store(&mut self, stats: &mut WormholeStats, hash: u64, graph: Fcg, value: MemoValue) {
        if self.db.insert(self.context, hash, graph, value) {
            stats.memo_inserts += 1;
        }
    }
}

impl Wormhole {
    pub(crate) fn new(e: &Engine) -> Wormhole {
        let nl = e.link_rate.len();
        Wormhole {
            cfg: e.cfg.wormhole,
            stats: WormholeStats::default(),
            tick_pending: false,
            dirty: false,
            merged: false,
            part_size: vec![0; nl],
            active: Vec::new(),
            last_una: Vec::new(),
            last_rate: Vec::new(),
            samples: Vec::new(),
            nsamp: Vec::new(),
            flow_slot: Vec::new(),
            link_slot: vec![NONE; nl],
            link_touched: vec![false; nl],
            uf: (0..nl as u32).collect(),
            root: Vec::new(),
            slots: Vec::new(),
            scratch: Vec::new(),
            link_mark: vec![false; nl],
            watchdog: u64::MAX,
            log: Vec::new(),
            memo: e.cfg.wormhole.memo.then(|| {
                Box::new(Memo {
                    db: MemoDb::default(),
                    mirrors: Vec::new(),
                    mirror_of: Vec::new(),
                    context: memo_context(&e.cfg),
                    touched: vec![false; nl],
                    touched_list: Vec::new(),
                    check_pending: false,
                    episodes: Vec::new(),
                    episode_of: Vec::new(),
                    root_mark: vec![false; nl],
                    joined: Vec::new(),
                })
            }),
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
            self.last_rate.resize(nflows, 0.0);
            self.nsamp.resize(nflows, 0);
            self.root.resize(nflows, NONE);
            self.samples.resize(nflows * l, 0.0);
        }
        if let Some(m) = self.memo.as_mut()
            && m.episode_of.len() < nflows
        {
            m.episode_of.resize(nflows, NONE);
            m.mirror_of.resize(nflows, NONE);
        }
    }

    /// The slot (frozen partition) event `e` belongs to, if any (`nics`, `pkts`: the engine's).
    #[inline]
    pub(crate) fn owner(&self, nics: &[Nic], pkts: &[Pkt], e: u64) -> u32 {
        let a = events::op_a(e);
        match events::kind(e) {
            EV_ARRIVE | EV_TXDONE => self.link_slot[a as usize],
            // A packet into a switch: the link it is on (the event carries its next one).
            EV_HOP => self.link_slot[pkts[events::op_b(e) as usize].in_link as usize],
            EV_WAKE => self.link_slot[nics[a as usize].link as usize],
            EV_CC_TIMER..=EV_CC_TIMER_LAST => self.flow_slot.get(a as usize).copied().unwrap_or(NONE),
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

    /// Payload bytes of flow `f` acknowledged so far; `None` when the engine has no flow `f`.
    pub fn flow_bytes_acked(&self, f: u32) -> Option<u64> {
        self.flows.get(f as usize).map(|fl| fl.snd_una)
    }

    /// Fast-forward statistics (`None` when fast-forwarding is off).
    pub fn wormhole_stats(&self) -> Option<WormholeStats> {
        self.ww.as_ref().map(|w| w.stats)
    }

    /// The memo database (`None` when memoization is off).
    pub fn memo_db(&self) -> Option<&MemoDb> {
        self.ww.as_ref()?.memo.as_ref().map(|m| &m.db)
    }

    /// Replaces the memo database, e.g. with one loaded from a file or taken from another run.
    ///
    /// # Errors
    /// `PacketError::Config` when memoization is off.
    pub fn set_memo_db(&mut self, db: MemoDb) -> Result<(), PacketError> {
        match self.ww.as_mut().and_then(|w| w.memo.as_mut()) {
            Some(m) => {
                m.db = db;
                Ok(())
            }
            None => Err(PacketError::Config(
                "a memo database needs wormhole fast_forward and memo on".into(),
            )),
        }
    }

    /// Takes the memo database out (an empty one stays), e.g. to hand it to the next run.
    pub fn take_memo_db(&mut self) -> Option<MemoDb> {
        self.ww.as_mut()?.memo.as_mut().map(|m| std::mem::take(&mut m.db))
    }

    /// Handles Wormhole's own events and parks events of frozen partitions; true when `e` is
    /// consumed.
    #[inline(never)]
    pub(crate) fn ww_intercept(&mut self, e: u64, kind: u64, a: u32, b: u32) -> bool {
        let mut w = self.ww.take().expect("wormhole on");
        let consumed = match kind {
            EV_SAMPLE if b == 1 => {
                self.ww_episodes(&mut w);
                true
            }
            EV_SAMPLE if b == 2 => {
                self.ww_checkpoint(&mut w, a);
                true
            }
            EV_SAMPLE if b == 3 => {
                self.ww_replay_finish(&mut w, a);
                true
            }
            EV_SAMPLE => {
                w.tick_pending = false;
                self.ww_tick(&mut w);
                true
            }
            EV_RESUME if a == WATCHDOG => {
                self.ww_watchdog(&mut w);
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
                    // A mirrored twin waits for this instant's episode check, which keeps it if
                    // its leader gained a corresponding flow.
                    if s != NONE && !(w.slots[s as usize].live && w.slots[s as usize].mirror) {
                        if self.now < w.slots[s as usize].resume_at {
                            w.stats.skip_backs += 1;
                        }
                        self.ww_resume(&mut w, s);
                    }
                }
                false
            }
            _ => {
                let s = w.owner(&self.nics, &self.pkts, e);
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
        w.last_rate[f as usize] = 0.0;
        w.dirty = true;
        w.merged = true;
        for i in flow_links(self, f as usize) {
            w.link_touched[self.paths[i] as usize] = true;
        }
        self.memo_touch(&mut w, f);
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
        if w.memo.is_some() {
            self.memo_record_completion(&mut w, f);
        }
        if let Some(m) = w.memo.as_mut() {
            let twins = end_episode(m, f);
            self.ww_resolve_twins(&mut w, &twins, None);
        }
        self.memo_touch(&mut w, f);
        self.ww_mirror_finish(&mut w, f);
        self.ww = Some(w);
    }

    /// Leader flow `f` finished: the matching flow of each of its mirrored twins finishes now
    /// too, and a twin whose flows are all done thaws.
    fn ww_mirror_finish(&mut self, w: &mut Wormhole, f: u32) {
        let Some(m) = w.memo.as_mut() else { return };
        let g = m.mirror_of.get(f as usize).copied().unwrap_or(NONE);
        if g == NONE {
            return;
        }
        m.mirror_of[f as usize] = NONE;
        let mi = &mut m.mirrors[g as usize];
        let Some(k) = mi.leaders.iter().position(|&x| x == f) else { return };
        if let Some(r) = mi.record.as_mut() {
            r.finish[k] = (self.now - r.t_base).max(1);
            r.cc[k] = super::cc::snapshot(&self.flows[f as usize]);
        }
        let followers = mi.followers.clone();
        if mi.leaders.iter().all(|&x| self.flows[x as usize].done) {
            mi.live = false;
            mi.followers.clear();
            // A clean run to its last completion: store each flow's completion offset (in
            // `bytes`: the sizes are in the key).
            if let Some(r) = mi.record.take() {
                let value = MemoValue {
                    t_conv_ps: r.finish.iter().copied().max().unwrap_or(0),
                    flows: r
                        .order
                        .iter()
                        .map(|&j| MemoFlow {
                            bytes: r.finish[j as usize],
                            rate_bps: 0.0,
                            cc: r.cc[j as usize],
                        })
                        .collect(),
                };
                m.store(&mut w.stats, r.hash, r.graph, value);
            }
        }
        for (s, g) in followers {
            let si = s as usize;
            if !w.slots[si].live || w.slots[si].generation != g || w.slots[si].twin.is_none() {
                continue;
            }
            let t = w.slots[si].flows[k];
            if self.flows[t as usize].done {
                continue;
            }
            self.ww_mirror_complete(w, t, w.slots[si].t0);
            if w.slots[si].flows.iter().all(|&x| self.flows[x as usize].done) {
                w.stats.memo_hits += 1;
                self.ww_resume(w, s);
            } else {
                self.ww_slot_shrink(w, s);
            }
        }
    }

    /// A flow of twin slot `s` finished: the links none of its running flows uses thaw, so other
    /// flows can use them. Their parked events go back to the queue and their ports' clocks move
    /// on, both by the time the slot has been frozen, as a resume would.
    fn ww_slot_shrink(&mut self, w: &mut Wormhole, s: u32) {
        let si = s as usize;
        // Mark the links the slot's running flows use (no allocation: this runs at every
        // completion of a mirrored leader flow, for each twin).
        for &f in &w.slots[si].flows {
            if !self.flows[f as usize].done {
                for i in flow_links(self, f as usize) {
                    w.link_mark[self.paths[i] as usize] = true;
                }
            }
        }
        let split = (!w.slots[si].links.iter().all(|&l| w.link_mark[l as usize])).then(|| {
            let (gone, kept): (Vec<u32>, Vec<u32>) = w.slots[si].links.iter().partition(|&&l| !w.link_mark[l as usize]);
            (gone, kept)
        });
        for &l in &w.slots[si].links {
            w.link_mark[l as usize] = false;
        }
        let Some((gone, kept)) = split else { return };
        let t0 = w.slots[si].t0;
        let d = (self.now - t0).div_ceil(1000) * 1000;
        for &l in &gone {
            w.link_slot[l as usize] = NONE;
            self.ww_shift_port_clocks(l, t0, d);
        }
        // The parked events of the thawed links (they belong to no slot now) go back.
        let parked = std::mem::take(&mut w.slots[si].parked);
        let mut keep = Vec::with_capacity(parked.len());
        for (t, seq, e) in parked {
            if w.owner(&self.nics, &self.pkts, e) == s {
                keep.push((t, seq, e));
            } else {
                self.events.push_seq(t + d, seq, e);
            }
        }
        w.slots[si].parked = keep;
        w.slots[si].links = kept;
        self.ww_kick_stray_ports(&gone);
    }

    /// Thawing link `l` of a slot frozen at `t0` for `d`: its port's busy time and, on a host's
    /// link, the NIC's pending wake-up move on by `d`.
    fn ww_shift_port_clocks(&mut self, l: u32, t0: u64, d: u64) {
        let li = l as usize;
        if self.ports[li].busy_until > t0 {
            self.ports[li].busy_until += d;
        }
        let src = self.ports[li].src;
        if src < self.topo.num_hosts()
            && let Some(t) = self.nics[src as usize].next_send.as_mut()
        {
            *t += d;
        }
    }

    /// Thawed switch ports left with packets and nothing scheduled (a stray packet queued while
    /// frozen) start sending.
    fn ww_kick_stray_ports(&mut self, links: &[u32]) {
        for &k in links {
            let ki = k as usize;
            let pt = &self.ports[ki];
            if !pt.busy && pt.total > 0 && self.ports[ki].src >= self.topo.num_hosts() {
                self.switch_send(k);
            }
        }
    }

    /// A run entry's hit: freezes `flows` (fresh, just started, or a joined run's partition) and
    /// finishes each `fin[k]` from now. Until then a flow arriving on their links resumes them on
    /// packets (a skip-back), each having moved its bytes at its stored average rate, with the CC
    /// state it had when it finished in the stored run (not a fresh flow's line rate).
    fn ww_replay_freeze(&mut self, w: &mut Wormhole, flows: &[u32], fin: &[u64], cc: Vec<CcSnap>) {
        let left = self.remaining(flows);
        let rates = left.iter().zip(fin).map(|(&b, &t)| b as f64 * 8e12 / t.max(1) as f64).collect();
        let plan = MemoPlan {
            t_conv: fin.iter().copied().max().unwrap_or(0),
            bytes: left,
            cc,
            completion: true,
        };
        let s = self.ww_freeze_slot(w, flows.to_vec(), rates, TWIN_MAX_PS, Some(plan));
        let at: Vec<u64> = fin.iter().map(|&t| self.now + t).collect();
        let mut times = at.clone();
        times.sort_unstable();
        times.dedup();
        for t in times {
            self.schedule(t, ev(EV_SAMPLE, s, 3));
        }
        w.slots[s as usize].finish = at;
    }

    /// A completion time of replay slot `s`: the flows due by now finish; the slot thaws when
    /// all have, else the links only finished flows used do.
    fn ww_replay_finish(&mut self, w: &mut Wormhole, s: u32) {
        let si = s as usize;
        if !w.slots[si].live || w.slots[si].finish.is_empty() {
            return;
        }
        let t0 = w.slots[si].t0;
        for k in 0..w.slots[si].flows.len() {
            let f = w.slots[si].flows[k];
            if !self.flows[f as usize].done && w.slots[si].finish[k] <= self.now {
                self.ww_mirror_complete(w, f, t0);
                self.ww_mirror_finish(w, f);
            }
        }
        if w.slots[si].flows.iter().all(|&x| self.flows[x as usize].done) {
            self.ww_resume(w, s);
        } else {
            self.ww_slot_shrink(w, s);
        }
    }

    /// Flow `f` started at this instant and has had nothing acknowledged: a fresh flow, as a
    /// mirror's or a run entry's flows must be.
    fn ww_fresh(&self, f: u32) -> bool {
        let fl = &self.flows[f as usize];
        fl.start == self.now && fl.snd_una == 0
    }

    /// Twin flow `t`, frozen since `t0`, finishes now without packets: all its bytes count as
    /// delivered and acknowledged.
    fn ww_mirror_complete(&mut self, w: &mut Wormhole, t: u32, t0: u64) {
        let fl = &mut self.flows[t as usize];
        let (size, una, rx) = (fl.size, fl.snd_una, fl.rx_expected);
        fl.snd_una = size;
        fl.snd_nxt = size;
        fl.max_sent = size;
        fl.rx_expected = size;
        self.stats.payload_delivered += size - rx.min(size);
        w.stats.skipped_bytes += size - una.min(size);
        let d = self.now.saturating_sub(t0);
        w.log.push(SkipRecord {
            flow: t,
            start: SimTime::from_ps(t0),
            end: SimTime::from_ps(self.now),
            rate_bps: if d > 0 {
                (size - una.min(size)) as f64 * 8e12 / d as f64
            } else {
                0.0
            },
            bytes: size - una.min(size),
        });
        self.mark_done(t);
        w.dirty = true;
        for i in flow_links(self, t as usize) {
            w.link_touched[self.paths[i] as usize] = true;
        }
        if let Some(m) = w.memo.as_mut() {
            let twins = end_episode(m, t);
            debug_assert!(twins.is_empty(), "a twin leads no episode");
        }
        self.memo_touch(w, t);
    }

    /// Bytes each flow has left to acknowledge.
    fn remaining(&self, flows: &[u32]) -> Vec<u64> {
        flows
            .iter()
            .map(|&f| {
                let fl = &self.flows[f as usize];
                fl.size - fl.snd_una.min(fl.size)
            })
            .collect()
    }

    /// `f` finished inside an open episode (the first completion since the flow set changed),
    /// after its checkpoint: stores the stretch from the checkpoint to here, keyed by the graph,
    /// every flow's bytes left at the episode's start and the checkpoint delay.
    fn memo_record_completion(&mut self, w: &mut Wormhole, f: u32) {
        let m = w.memo.as_mut().expect("memo on");
        let Some(&k) = m.episode_of.get(f as usize) else { return };
        if k == NONE {
            return;
        }
        let ep = &m.episodes[k as usize];
        if ep.flows.len() > COMPLETION_MAX_FLOWS || ep.replay.is_some() || ep.t_check == 0 || self.now <= ep.t_check {
            return;
        }
        let t_c = self.now - ep.t_check;
        let rem: Vec<u64> = ep
            .flows
            .iter()
            .zip(&ep.una)
            .map(|(&g, &u0)| self.flows[g as usize].size - u0)
            .collect();
        let (cg, ch, corder) = completion_key(&ep.graph, &rem, ep.delta);
        let flows = corder
            .iter()
            .map(|&v| {
                let fl = &self.flows[ep.flows[v as usize] as usize];
                let b = fl.snd_una.min(fl.size) - ep.una_check[v as usize];
                MemoFlow {
                    bytes: b,
                    rate_bps: b as f64 * 8.0 / (t_c as f64 * 1e-12),
                    cc: super::cc::snapshot(fl),
                }
            })
            .collect();
        let value = MemoValue { t_conv_ps: t_c, flows };
        m.store(&mut w.stats, ch, cg, value);
    }

    /// An episode's checkpoint: a recording one notes where its flows stand; a replay freezes
    /// its partition along the stored stretch.
    fn ww_checkpoint(&mut self, w: &mut Wormhole, k: u32) {
        let mut m = w.memo.take().expect("memo on");
        let ki = k as usize;
        if ki < m.episodes.len() && m.episodes[ki].live && m.episodes[ki].t_s + m.episodes[ki].delta == self.now {
            let ep = &mut m.episodes[ki];
            ep.t_check = self.now;
            ep.una_check = ep.flows.iter().map(|&f| self.flows[f as usize].snd_una).collect();
            if let Some((t_c, per)) = ep.replay.take() {
                let flows = std::mem::take(&mut ep.flows);
                ep.live = false;
                for &f in &flows {
                    m.episode_of[f as usize] = NONE;
                }
                if self.ww_memo_completion(w, &flows, t_c, &per) {
                    w.stats.memo_hits += 1;
                } else {
                    w.stats.memo_misses += 1;
                }
            }
        }
        w.memo = Some(m);
    }

    /// Marks `f`'s links for the episode check, scheduled at this instant after the events
    /// already queued for it (so flows starting together form one episode).
    fn memo_touch(&mut self, w: &mut Wormhole, f: u32) {
        let Some(m) = w.memo.as_mut() else { return };
        for i in flow_links(self, f as usize) {
            let l = self.paths[i];
            if !m.touched[l as usize] {
                m.touched[l as usize] = true;
                m.touched_list.push(l);
            }
        }
        if !m.check_pending {
            m.check_pending = true;
            self.schedule(self.now, ev(EV_SAMPLE, 0, 1));
        }
    }

    /// Recomputes the partitions (union-find over the links of the running flows).
    fn ww_repartition(&mut self, w: &mut Wormhole) {
        w.dirty = false;
        w.merged = false;
        w.stats.repartitions += 1;
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
        w.part_size.fill(0);
        for k in 0..w.active.len() {
            let f = w.active[k] as usize;
            let first = self.paths[self.flows[f].path_data as usize];
            w.root[f] = w.find(first);
            w.part_size[w.root[f] as usize] += 1;
        }
    }

    /// The episode check: every partition whose flow set changed at this instant looks its
    /// flow-conflict graph up; a hit skips the transient, a miss opens an episode.
    fn ww_episodes(&mut self, w: &mut Wormhole) {
        let flows = &self.flows;
        w.active.retain(|&f| !flows[f as usize].done);
        let mut m = w.memo.take().expect("memo on");
        m.check_pending = false;
        if w.dirty {
            // Flows only finished, and only in partitions far too large to memoize (an
            // all-to-all of thousands of flows): what they split into cannot be looked up
            // before many more finish, and a sample tick repartitions before then. Skip the
            // repartition (it walks every running flow's path: at every completion instant of
            // a 128-GPU all-to-all it made a memo run 2.5x slower than the exact engine).
            if !w.merged
                && m.touched_list.iter().all(|&l| {
                    let r = w.find(l);
                    w.part_size[r as usize] as usize > SPLIT_DEFER_FLOWS
                })
            {
                for &l in &m.touched_list {
                    m.touched[l as usize] = false;
                }
                m.touched_list.clear();
                w.memo = Some(m);
                return;
            }
            self.ww_repartition(w);
        }
        for &l in &m.touched_list {
            let r = w.find(l);
            m.root_mark[r as usize] = true;
        }
        let mut groups = std::mem::take(&mut w.scratch);
        groups.clear();
        groups.extend(
            w.active
                .iter()
                .filter(|&&f| m.root_mark[w.root[f as usize] as usize])
                .map(|&f| (w.root[f as usize], f)),
        );
        for &l in &m.touched_list {
            m.touched[l as usize] = false;
            let r = w.find(l);
            m.root_mark[r as usize] = false;
        }
        m.touched_list.clear();
        groups.sort_unstable();
        let mut orphans = Vec::new();
        self.ww_mirror_changes(w, &mut m, &groups, &mut orphans);
        for run in groups.chunk_by(|a, b| a.0 == b.0) {
            let members: Vec<u32> = run.iter().map(|&(_, f)| f).collect();
            for &f in &members {
                orphans.extend(end_episode(&mut m, f));
            }
            // A mirrored leader's partition that fresh flows joined, holding all its running
            // flows: its history continues (replayed or recorded below).
            let jm = m.mirror_of[members[0] as usize];
            let jm = (jm != NONE
                && m.mirrors[jm as usize].joined
                && members.iter().all(|&f| m.mirror_of[f as usize] == jm)
                && m.mirrors[jm as usize]
                    .leaders
                    .iter()
                    .filter(|&&f| !self.flows[f as usize].done)
                    .count()
                    == members.len())
            .then_some(jm);
            if members.len() > MEMO_MAX_FLOWS || members.iter().any(|&f| w.flow_slot[f as usize] != NONE) {
                continue;
            }
            let (graph, hash, order) = self.fcg(w, &members);
            let flows: Vec<u32> = order.iter().map(|&v| members[v as usize]).collect();
            if let Some(g) = jm {
                m.mirrors[g as usize].joined = false;
            }
            if let Some(g) = jm
                && let Some(hist) = m.mirrors[g as usize].hist
            {
                let gi = g as usize;
                let (jg, jh, jorder) = self.join_key(&flows, m.mirrors[gi].t_s, hist);
                m.mirrors[gi].hist = Some(jh);
                if let Some((val, map)) = m.db.lookup(m.context, jh, &jg) {
                    // Stored: each flow's completion offset from the join, and its CC state then.
                    let (fin, cc) = stored_run(val, &map, &jorder, flows.len());
                    self.ww_replay_freeze(w, &flows, &fin, cc);
                    w.stats.memo_hits += 1;
                    continue;
                }
                let mi = &mut m.mirrors[gi];
                let n = mi.leaders.len();
                let order = jorder
                    .iter()
                    .map(|&v| {
                        let f = flows[v as usize];
                        mi.leaders.iter().position(|&x| x == f).expect("a leader of its mirror") as u32
                    })
                    .collect();
                mi.record = Some(RunRecord::new(self.now, jh, jg, order, n));
            }
            let fresh_all = flows.iter().all(|&f| self.ww_fresh(f));
            // A partition of fresh flows that started at this instant with an identical one
            // (same graph, same sizes flow by flow): mirror that leader instead of simulating
            // the same dynamics again (one rail's share of an all-to-all or of a DP ring).
            if fresh_all
                && let Some(g) = m.mirrors.iter().position(|x| {
                    x.live
                        && x.t_s == self.now
                        && x.hash == hash
                        && x.graph == graph
                        && x.leaders
                            .iter()
                            .zip(&flows)
                            .all(|(&a, &b)| self.ww_fresh(a) && self.flows[a as usize].size == self.flows[b as usize].size)
                })
            {
                let leaders = m.mirrors[g].leaders.clone();
                let s = self.ww_freeze_slot(w, flows.clone(), vec![0.0; flows.len()], TWIN_MAX_PS, None);
                w.slots[s as usize].twin = Some(Twin {
                    una0: vec![0; leaders.len()],
                    leader: leaders,
                });
                w.slots[s as usize].mirror = true;
                m.mirrors[g].followers.push((s, w.slots[s as usize].generation));
                w.stats.memo_deferred += 1;
                continue;
            }
            // A partition of fresh flows: the key of its run (its graph weighed by the sizes),
            // which starts the history of the mirror it leads.
            let start = fresh_all.then(|| {
                let sizes: Vec<u64> = flows.iter().map(|&f| self.flows[f as usize].size).collect();
                run_key(&graph, &sizes)
            });
            let plan = m.db.lookup(m.context, hash, &graph).map(|(val, map)| {
                let per: Vec<MemoFlow> = (0..flows.len()).map(|v| val.flows[map[v] as usize]).collect();
                (val.t_conv_ps, per)
            });
            if let Some((t_conv, per)) = plan
                && self.ww_memo_freeze(w, &flows, t_conv, &per)
            {
                w.stats.memo_hits += 1;
                if let Some((_, sh, _)) = start {
                    // Frozen on its stored transient, it still leads the same-instant twins.
                    new_mirror(&mut m, flows, self.now, hash, graph, Some(sh));
                }
                continue;
            }
            // An episode that ended in a completion, with the same flows and bytes left: replay
            // it from its checkpoint on (the flows run on packets until then).
            let delta = flows.iter().map(|&f| self.own_rtt_ns(f)).max().unwrap_or(0) * 1000;
            let (cg, ch, corder) = completion_key(&graph, &self.remaining(&flows), delta);
            let replay = (flows.len() <= COMPLETION_MAX_FLOWS)
                .then(|| m.db.lookup(m.context, ch, &cg))
                .flatten()
                .map(|(val, map)| {
                    // Flow vertex i of the completion graph is flow corder[i] of `flows`.
                    let mut per = vec![MemoFlow::default(); flows.len()];
                    for (i, &v) in corder.iter().enumerate() {
                        per[v as usize] = val.flows[map[i] as usize];
                    }
                    (val.t_conv_ps, per)
                });
            // A twin of a partition that started at this very instant and records its
            // transient: wait for that outcome instead of simulating the same transient again.
            // Only partitions that can reach steady state: each flow, even at its line rate,
            // outlasts a sampling window (a short flow's episode ends in its completion, and a
            // twin resumed from there would pay its last round trip again).
            let window_ps = w.cfg.sample_interval.as_ps() * w.cfg.window as u64;
            let long = flows.iter().all(|&f| {
                let fl = &self.flows[f as usize];
                (fl.size - fl.snd_una.min(fl.size)) as f64 * 8.0 / self.payload_cap(f) * 1e12 > window_ps as f64
            });
            // A short partition of fresh flows: the key of its run to its last completion.
            let start_hist = start.as_ref().map(|r| r.1);
            let run = start.filter(|_| replay.is_none() && !long);

            if replay.is_none()
                && long
                && let Some(k) = m
                    .episodes
                    .iter()
                    .position(|x| x.live && x.t_s == self.now && x.replay.is_none() && x.hash == hash && x.graph == graph)
            {
                let s = self.ww_freeze_slot(w, flows.clone(), vec![0.0; flows.len()], TWIN_MAX_PS, None);
                let ep = &mut m.episodes[k];
                w.slots[s as usize].twin = Some(Twin {
                    leader: ep.flows.clone(),
                    una0: ep.una.clone(),
                });
                ep.followers.push((s, w.slots[s as usize].generation));
                w.stats.memo_deferred += 1;
                continue;
            }
            // A stored run with the same key: replay it (this partition still leads any twins
            // that start with it; if a flow joins, it resumes on packets and they follow it).
            if let Some((rg, rh, rorder)) = &run
                && let Some((val, map)) = m.db.lookup(m.context, *rh, rg)
            {
                let (fin, cc) = stored_run(val, &map, rorder, flows.len());
                self.ww_replay_freeze(w, &flows, &fin, cc);
                new_mirror(&mut m, flows, self.now, hash, graph, Some(*rh));
                w.stats.memo_hits += 1;
                continue;
            }
            if replay.is_none() {
                w.stats.memo_misses += 1;
            }
            let una = flows.iter().map(|&f| self.flows[f as usize].snd_una).collect();
            let e = Episode {
                live: true,
                t_s: self.now,
                hash,
                graph,
                flows,
                una,
                delta,
                t_check: 0,
                una_check: Vec::new(),
                replay,
                followers: Vec::new(),
            };
            let k = reuse_or_push(&mut m.episodes, |x| !x.live, e);
            for &f in &m.episodes[k].flows {
                m.episode_of[f as usize] = k as u32;
            }
            // The leader of any twins that start with it (a short one's run is recorded).
            if fresh_all {
                let ep = &m.episodes[k];
                let (leaders, hash, graph) = (ep.flows.clone(), ep.hash, ep.graph.clone());
                let n = leaders.len();
                let g = new_mirror(&mut m, leaders, self.now, hash, graph, start_hist);
                if let Some((rgraph, rhash, order)) = run {
                    m.mirrors[g].record = Some(RunRecord::new(self.now, rhash, rgraph, order, n));
                }
            }
            if delta > 0 {
                self.schedule(self.now + delta, ev(EV_SAMPLE, k as u32, 2));
            }
        }
        // A join not looked up (the leader's flows in several partitions, or one too large or
        // partly frozen) ends the leader's reproducible history.
        for g in std::mem::take(&mut m.joined) {
            let mi = &mut m.mirrors[g as usize];
            if mi.joined {
                mi.joined = false;
                mi.hist = None;
            }
        }
        w.scratch = groups;
        w.memo = Some(m);
        self.ww_resolve_twins(w, &orphans, None);
    }

    /// The canonical flow-conflict graph of `members` (one partition), its hash, and for each
    /// canonical flow vertex the index into `members`.
    fn fcg(&self, w: &Wormhole, members: &[u32]) -> (Fcg, u64, Vec<u32>) {
        let descs: Vec<FlowDesc> = members
            .iter()
            .map(|&f| {
                let fl = &self.flows[f as usize];
                // The flow's weight: its rate over its line rate in 5% steps (§4.2), its line
                // rate, path delays and bottleneck (the paper leaves path length out; RTT shapes
                // the transient, so it is kept), and whether it has had an ACK yet. The rate is
                // the measured one (its last sample): the CC's own rate variable moves with every
                // ACK under HPCC and TIMELY, so the same situation met it on either side of a
                // step; before its first sample, a flow is weighed by that variable.
                let measured = w.last_rate[f as usize];
                let rate = if measured > 0.0 { measured } else { fl.rate as f64 };
                let step = (rate / fl.max_rate.max(1) as f64 * 20.0).round() as u64;
                let d = self.flow_desc(f, step);
                FlowDesc {
                    label: mix(d.label, u64::from(fl.snd_una == 0)),
                    ..d
                }
            })
            .collect();
        let mtu = u64::from(self.cfg.mtu + self.hdr_bytes);
        let g = Fcg::build(&descs, |l| {
            // A shared link's weight: its rate and its queue, empty or in powers of two of MTUs.
            let q = self.ports[l as usize].total / mtu;
            let qb = if q < 2 { 0 } else { 64 - u64::from(q.leading_zeros()) };
            mix(self.link_rate[l as usize], qb)
        });
        let (hash, order) = g.canonical();
        let canon = g.relabel(&order);
        let nf = members.len();
        (canon, hash, order[..nf].to_vec())
    }

    /// Flow `f`'s data and ACK paths, and a label of `seed` with its line rate, path delays and
    /// bottleneck rate.
    fn flow_desc(&self, f: u32, seed: u64) -> FlowDesc<'_> {
        let fl = &self.flows[f as usize];
        let data = &self.paths[fl.path_data as usize..fl.path_ack as usize];
        let ack = &self.paths[fl.path_ack as usize..flow_links(self, f as usize).end];
        let delay = |p: &[u32]| p.iter().map(|&l| self.ports[l as usize].delay / 1000).sum::<u64>();
        let bottleneck = data.iter().map(|&l| self.link_rate[l as usize]).min().unwrap_or(0);
        let mut label = mix(seed, fl.max_rate);
        label = mix(label, delay(data));
        label = mix(label, delay(ack));
        label = mix(label, bottleneck);
        FlowDesc { label, data, ack }
    }

    /// The key of a mirrored leader's partition that fresh flows joined: its graph with each
    /// flow weighed by its size and its start offset since the leader's fresh start `t_s`, and
    /// each shared link by its rate alone (no live state: a leader replayed from the store and
    /// one simulated on packets, with the same history, must meet the same key), under a hash
    /// that folds in that history `hist` (the run key of the start, then each join's key).
    /// Returns the graph, the hash, and for each of its flow vertices the index into `flows`.
    fn join_key(&self, flows: &[u32], t_s: u64, hist: u64) -> (Fcg, u64, Vec<u32>) {
        let descs: Vec<FlowDesc> = flows
            .iter()
            .map(|&f| {
                let fl = &self.flows[f as usize];
                let offset = (fl.start - t_s + JOIN_QUANTUM_PS / 2) / JOIN_QUANTUM_PS;
                let d = self.flow_desc(f, JOIN_TAG);
                FlowDesc {
                    label: mix(mix(d.label, fl.size), offset),
                    ..d
                }
            })
            .collect();
        let g = Fcg::build(&descs, |l| self.link_rate[l as usize]);
        let (h, order) = g.canonical();
        let nf = flows.len();
        (g.relabel(&order), mix(mix(h, JOIN_TAG), hist), order[..nf].to_vec())
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
            w.last_rate[f] = r;
            let n = w.nsamp[f] as usize;
            w.samples[f * l + n % l] = r;
            w.nsamp[f] = w.nsamp[f].saturating_add(1);
        }
        if w.dirty {
            self.ww_repartition(w);
        }
        // Group the flows by partition; test each for steadiness.
        let mut groups = std::mem::take(&mut w.scratch);
        groups.clear();
        groups.extend(w.active.iter().map(|&f| (w.root[f as usize], f)));
        groups.sort_unstable();
        for members in groups.chunk_by(|a, b| a.0 == b.0) {
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
            } else if !frozen {
                // Eq. 6 over `window` samples; over the last `uncontended_window` when the
                // partition is uncontended (see `uncontended`).
                let k = if w.cfg.uncontended_window < l && uncontended(self, members, &mut w.link_mark) {
                    w.cfg.uncontended_window
                } else {
                    l
                };
                if members.iter().all(|&(_, f)| steady(w, f as usize, k)) {
                    let fl: Vec<u32> = members.iter().map(|&(_, f)| f).collect();
                    if w.memo.is_some() {
                        self.memo_record(w, &fl, k);
                    }
                    self.ww_freeze(w, fl, k);
                }
            }
        }
        w.scratch = groups;
        w.link_touched.iter_mut().for_each(|t| *t = false);
        if !w.active.is_empty() {
            w.tick_pending = true;
            self.schedule(self.now + iv, ev(EV_SAMPLE, 0, 0));
        }
    }

    /// The base round trip of flow `f`'s own path (its `base_rtt_ns` is the network's largest
    /// under ns-3's `GLOBAL_T`, which is what the CC uses, not what its window in flight spans).
    fn own_rtt_ns(&self, f: u32) -> u64 {
        let fl = &self.flows[f as usize];
        self.path_rtt(&self.paths[fl.path_data as usize..fl.path_ack as usize]).0
    }

    /// A flow's payload rate cap: full packets back to back on its bottleneck link, at the
    /// engine's own serialization time (whole nanoseconds under `ns_resolution`, as ns-3: 1048
    /// bytes take 20 ns at 400 Gbit/s, not 20.96), so never faster than the packets could go.
    fn payload_cap(&self, f: u32) -> f64 {
        let fl = &self.flows[f as usize];
        let rate = self.paths[fl.path_data as usize..fl.path_ack as usize]
            .iter()
            .map(|&k| self.link_rate[k as usize])
            .min()
            .unwrap_or(0);
        let tx = self.tx_ps(self.cfg.mtu + self.hdr_bytes, rate);
        if tx == 0 {
            return 0.0;
        }
        f64::from(self.cfg.mtu) * 8.0 / (tx as f64 * 1e-12)
    }

    /// R̂ (eq. 7) of flow `f` over its last `nsamples` samples, capped at its payload rate.
    fn steady_rate(&self, w: &Wormhole, f: u32, nsamples: usize) -> f64 {
        let mean = window_estimate(last_samples(w, f as usize, nsamples), w.cfg.theta).1;
        mean.min(self.payload_cap(f))
    }

    /// The last stretch of flow `f` left to packets at rate `r`: a few chunks and GUARD_RTTS
    /// base RTTs at `r` (the in-flight data is already below `max_sent`), so the flow finishes
    /// through the packet path with its ACK clock running.
    fn guard_bytes(&self, f: u32, r: f64) -> u64 {
        let unit = chunk_unit(self.cfg.chunk, u64::from(self.cfg.mtu));
        let guard_ps = GUARD_RTTS * self.own_rtt_ns(f) * 1000;
        (r * guard_ps as f64 * 1e-12 / 8.0) as u64 + 8 * unit
    }

    /// Bytes flow `f` has left to move before the stretch left to packets at rate `r` (`None`:
    /// it is already inside that stretch).
    fn room_bytes(&self, f: u32, r: f64) -> Option<u64> {
        let fl = &self.flows[f as usize];
        fl.size.checked_sub(fl.max_sent.max(fl.snd_nxt) + self.guard_bytes(f, r))
    }

    /// How long flow `f` can run at `r` after moving `ahead` more bytes before it reaches the
    /// stretch left to packets (`None`: it reaches it first).
    fn steady_room_ps(&self, f: u32, r: f64, ahead: u64) -> Option<u64> {
        let room = self.room_bytes(f, r)?.checked_sub(ahead)?;
        let t = room as f64 * 8.0 / r * 1e12;
        Some(if t.is_finite() { t as u64 } else { 0 })
    }

    /// Freezes a steady partition made of `flows` (steady over their last `nsamples` samples),
    /// if its planned skip is worth it.
    fn ww_freeze(&mut self, w: &mut Wormhole, flows: Vec<u32>, nsamples: usize) {
        let iv = w.cfg.sample_interval.as_ps();
        let rates: Vec<f64> = flows.iter().map(|&f| self.steady_rate(w, f, nsamples)).collect();
        let mut skip_ps = u64::MAX;
        for (k, &f) in flows.iter().enumerate() {
            skip_ps = skip_ps.min(self.steady_room_ps(f, rates[k], 0).unwrap_or(0));
        }
        if skip_ps < 2 * iv {
            return;
        }
        self.ww_freeze_slot(w, flows, rates, skip_ps / 1000 * 1000, None);
    }

    /// A memo hit: freezes `flows` (canonical order) with the stored transient `per`, then their
    /// stored steady rates. A flow that ends inside the stored transient (an all-to-all that
    /// meets a DP step converges only near its own end) ends the skip pro rata, where its last
    /// stretch is left to packets. False (nothing done) when that point is too close to matter.
    fn ww_memo_freeze(&mut self, w: &mut Wormhole, flows: &[u32], t_conv: u64, per: &[MemoFlow]) -> bool {
        let mut skip_ps = u64::MAX;
        let mut rates = Vec::with_capacity(flows.len());
        for (k, &f) in flows.iter().enumerate() {
            let r = per[k].rate_bps.min(self.payload_cap(f));
            if r <= 0.0 {
                return false;
            }
            let t = match self.steady_room_ps(f, r, per[k].bytes) {
                Some(t) => t_conv.saturating_add(t),
                None => {
                    if per[k].bytes == 0 {
                        return false;
                    }
                    let room = self.room_bytes(f, r).unwrap_or(0);
                    (t_conv as f64 * room as f64 / per[k].bytes as f64) as u64
                }
            };
            skip_ps = skip_ps.min(t);
            rates.push(r);
        }
        let plan = MemoPlan {
            t_conv,
            bytes: per.iter().map(|p| p.bytes).collect(),
            cc: per.iter().map(|p| p.cc).collect(),
            completion: false,
        };
        let skip_ps = skip_ps / 1000 * 1000;
        // Cut only the transient's tail: bytes moved pro rata stand in for its real course, which
        // is not linear (a DCQCN start moves at line rate, then backs off); near its end the
        // two meet.
        if skip_ps == 0 || (skip_ps as f64) < PRO_RATA_MIN * t_conv as f64 {
            return false;
        }
        self.ww_freeze_slot(w, flows.to_vec(), rates, skip_ps, Some(plan));
        true
    }

    /// A completion replay at its checkpoint: freezes `flows` and moves them at their stored
    /// rates (`per`: bytes from the checkpoint to the completion `t_c` later), up to where the
    /// first of them has a round trip's worth and a few chunks left (that stretch, and the
    /// completion, run on packets). False when that point is too close to matter.
    fn ww_memo_completion(&mut self, w: &mut Wormhole, flows: &[u32], t_c: u64, per: &[MemoFlow]) -> bool {
        if flows
            .iter()
            .any(|&f| self.flows[f as usize].done || w.flow_slot[f as usize] != NONE)
        {
            return false;
        }
        let unit = chunk_unit(self.cfg.chunk, u64::from(self.cfg.mtu));
        let mut skip_ps = t_c as f64;
        let mut rates = Vec::with_capacity(flows.len());
        for (k, &f) in flows.iter().enumerate() {
            let fl = &self.flows[f as usize];
            let r = per[k].rate_bps.min(self.payload_cap(f));
            rates.push(r);
            if r <= 0.0 {
                continue;
            }
            let guard = r * (self.own_rtt_ns(f) * 1000) as f64 * 1e-12 / 8.0 + (8 * unit) as f64;
            let room = fl.size as f64 - fl.max_sent.max(fl.snd_nxt) as f64 - guard;
            skip_ps = skip_ps.min(room * 8.0 / r * 1e12);
        }
        let min_ps = flows.iter().map(|&f| self.own_rtt_ns(f) * 1000).max().unwrap_or(0) * 2;
        // NaN (no flow moved) or too short: not worth a freeze.
        if skip_ps.is_nan() || skip_ps < min_ps.max(1_000_000) as f64 {
            return false;
        }
        let plan = MemoPlan {
            t_conv: t_c,
            bytes: per.iter().map(|p| p.bytes).collect(),
            cc: per.iter().map(|p| p.cc).collect(),
            completion: true,
        };
        self.ww_freeze_slot(w, flows.to_vec(), rates, skip_ps as u64 / 1000 * 1000, Some(plan));
        true
    }

    /// Stores the episode that `flows`, steady now over their last `nsamples` samples, close (if
    /// one is open on exactly them).
    fn memo_record(&mut self, w: &mut Wormhole, flows: &[u32], nsamples: usize) {
        let mut m = w.memo.take().expect("memo on");
        let k = m.episode_of[flows[0] as usize];
        if k != NONE
            && m.episodes[k as usize].replay.is_none()
            && m.episodes[k as usize].flows.len() == flows.len()
            && flows.iter().all(|&f| m.episode_of[f as usize] == k)
        {
            let ep = &m.episodes[k as usize];
            let value = MemoValue {
                t_conv_ps: self.now - ep.t_s,
                flows: ep
                    .flows
                    .iter()
                    .zip(&ep.una)
                    .map(|(&f, &u0)| MemoFlow {
                        bytes: self.flows[f as usize].snd_una - u0,
                        rate_bps: self.steady_rate(w, f, nsamples),
                        cc: super::cc::snapshot(&self.flows[f as usize]),
                    })
                    .collect(),
            };
            let (hash, graph) = (ep.hash, ep.graph.clone());
            let twins = std::mem::take(&mut m.episodes[k as usize].followers);
            let outcome = (value.t_conv_ps, value.flows.clone());
            m.store(&mut w.stats, hash, graph, value);
            let fl = std::mem::take(&mut m.episodes[k as usize].flows);
            for f in fl {
                m.episode_of[f as usize] = NONE;
            }
            m.episodes[k as usize].live = false;
            w.memo = Some(m);
            self.ww_resolve_twins(w, &twins, Some(&outcome));
            return;
        }
        w.memo = Some(m);
    }

    /// Ends the wait of deferred twins (frozen slot, generation; stale ones are skipped). With
    /// their leader's stored outcome (transient time, per-flow bytes, steady rate and CC state in
    /// the twins' flow order) each becomes the memo hit it would have been at its start: frozen
    /// through the transient and the steady stretch after it. Without one (the leader's episode
    /// ended unsteady) each resumes now where its leader stands.
    fn ww_resolve_twins(&mut self, w: &mut Wormhole, twins: &[(u32, u32)], outcome: Option<&(u64, Vec<MemoFlow>)>) {
        for &(s, g) in twins {
            let si = s as usize;
            if !w.slots[si].live || w.slots[si].generation != g || w.slots[si].twin.is_none() {
                continue;
            }
            let planned = outcome.and_then(|(t_conv, per)| {
                let flows = &w.slots[si].flows;
                let mut skip = u64::MAX;
                let mut rates = Vec::with_capacity(flows.len());
                for (k, &f) in flows.iter().enumerate() {
                    let r = per[k].rate_bps.min(self.payload_cap(f));
                    skip = skip.min(self.steady_room_ps(f, r, per[k].bytes).filter(|_| r > 0.0)?);
                    rates.push(r);
                }
                let plan = MemoPlan {
                    t_conv: *t_conv,
                    bytes: per.iter().map(|p| p.bytes).collect(),
                    cc: per.iter().map(|p| p.cc).collect(),
                    completion: false,
                };
                Some((plan, rates, t_conv.saturating_add(skip) / 1000 * 1000))
            });
            match planned {
                Some((plan, rates, total)) => {
                    let slot = &mut w.slots[si];
                    slot.twin = None;
                    slot.plan = Some(plan);
                    slot.rates = rates;
                    slot.generation = slot.generation.wrapping_add(1);
                    slot.resume_at = (slot.t0 + total).max(self.now);
                    slot.watched = false;
                    let (at, g) = (slot.resume_at, slot.generation);
                    w.stats.memo_hits += 1;
                    self.schedule(at, ev(EV_RESUME, s, g));
                }
                None => {
                    w.stats.memo_misses += 1;
                    self.ww_resume(w, s);
                }
            }
        }
    }

    /// The plan of a deferred twin resumed before its leader's outcome: where the leader
    /// stands now (bytes since they both started, CC state), as a transient that took until now.
    fn twin_plan(&self, t: &Twin, t0: u64) -> (MemoPlan, Vec<f64>) {
        let t_conv = self.now.saturating_sub(t0).max(1);
        let bytes: Vec<u64> = t
            .leader
            .iter()
            .zip(&t.una0)
            .map(|(&f, &u0)| self.flows[f as usize].snd_una.saturating_sub(u0))
            .collect();
        let rates = bytes.iter().map(|&b| b as f64 * 8e12 / t_conv as f64).collect();
        let plan = MemoPlan {
            t_conv,
            cc: t.leader.iter().map(|&f| super::cc::snapshot(&self.flows[f as usize])).collect(),
            bytes,
            completion: false,
        };
        (plan, rates)
    }

    /// Parks the events of `flows`' links and schedules their resume `skip_ps` from now.
    fn ww_freeze_slot(&mut self, w: &mut Wormhole, flows: Vec<u32>, rates: Vec<f64>, skip_ps: u64, plan: Option<MemoPlan>) -> u32 {
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
        self.ww_extract(w, s as u32, &mut parked);
        let slot = &mut w.slots[s];
        slot.live = true;
        slot.generation = slot.generation.wrapping_add(1);
        slot.t0 = self.now;
        slot.resume_at = self.now + skip_ps;
        slot.links = links;
        slot.flows = flows;
        slot.rates = rates;
        slot.parked = parked;
        slot.plan = plan;
        slot.twin = None;
        slot.mirror = false;
        slot.finish.clear();
        slot.watched = skip_ps >= TWIN_MAX_PS;
        let g = slot.generation;
        w.stats.freezes += 1;
        if skip_ps < TWIN_MAX_PS {
            self.schedule(self.now + skip_ps, ev(EV_RESUME, s as u32, g));
        } else if w.watchdog == u64::MAX {
            w.watchdog = self.now + skip_ps;
            self.schedule(w.watchdog, ev(EV_RESUME, WATCHDOG, 0));
        }
        s as u32
    }

    /// The watchdog: resumes the watched slots whose deadline has come (a twin no leader
    /// resolved), and queues itself again for the next deadline.
    #[cold]
    fn ww_watchdog(&mut self, w: &mut Wormhole) {
        w.watchdog = u64::MAX;
        let mut next = u64::MAX;
        for s in 0..w.slots.len() {
            let sl = &w.slots[s];
            if !(sl.live && sl.watched) {
                continue;
            }
            if sl.resume_at <= self.now {
                self.ww_resume(w, s as u32);
            } else {
                next = next.min(sl.resume_at);
            }
        }
        if next != u64::MAX {
            w.watchdog = next;
            self.schedule(next, ev(EV_RESUME, WATCHDOG, 0));
        }
    }

    /// Moves the queued events that belong to slot `s` (its links' packets and transmissions,
    /// its NICs' wake-ups, its flows' CC timers) into `out`.
    fn ww_extract(&mut self, w: &Wormhole, s: u32, out: &mut Vec<(u64, u64, u64)>) {
        let (nics, pkts) = (&self.nics, &self.pkts);
        self.events.extract(|e| w.owner(nics, pkts, e) == s, out);
    }

    /// Freezes `flows` (just started) into mirrored twin slot `s`, frozen since `t0`: their
    /// links join the slot and their queued events are parked. A resume shifts every time of
    /// the slot by how long it was frozen, so what these flows scheduled after `t0` is parked
    /// that much earlier (and their pacing clocks set back), to land at the right time then.
    fn ww_slot_add(&mut self, w: &mut Wormhole, s: u32, flows: &[u32]) {
        let si = s as usize;
        let back = self.now - w.slots[si].t0;
        let mut links = Vec::new();
        for &f in flows {
            w.flow_slot[f as usize] = s;
            for i in flow_links(self, f as usize) {
                let l = self.paths[i];
                if w.link_slot[l as usize] != s {
                    links.push(l);
                }
            }
        }
        links.sort_unstable();
        links.dedup();
        for &l in &links {
            w.link_slot[l as usize] = s;
            let pt = &mut self.ports[l as usize];
            if pt.busy_until > self.now {
                pt.busy_until -= back;
            }
        }
        let mut fresh = Vec::new();
        self.ww_extract(w, s, &mut fresh);
        for &f in flows {
            let fl = &mut self.flows[f as usize];
            fl.next_avail = fl.next_avail.saturating_sub(back);
        }
        let slot = &mut w.slots[si];
        slot.parked.extend(fresh.into_iter().map(|(t, q, e)| (t - back, q, e)));
        slot.links.extend_from_slice(&links);
        slot.flows.extend_from_slice(flows);
        slot.rates.resize(slot.flows.len(), 0.0);
    }

    /// Before the lookups of an episode check: a mirrored leader's partition that gained flows
    /// keeps each twin whose own partition gained corresponding ones ([`Engine::ww_mirror_match`]),
    /// with them frozen in the twin; the other twins are released (`orphans`). A twin's
    /// partition that gained flows its leader did not is released too.
    fn ww_mirror_changes(&mut self, w: &mut Wormhole, m: &mut Memo, groups: &[(u32, u32)], orphans: &mut Vec<(u32, u32)>) {
        for run in groups.chunk_by(|a, b| a.0 == b.0) {
            let mut gs: Vec<u32> = run.iter().map(|&(_, f)| m.mirror_of[f as usize]).filter(|&g| g != NONE).collect();
            gs.sort_unstable();
            gs.dedup();
            let Some(&g) = gs.first() else { continue };
            if run.iter().all(|&(_, f)| m.mirror_of[f as usize] == g) {
                continue;
            }
            if gs.len() > 1 {
                // Two mirrored leaders' partitions merged: neither is copied any more.
                for g in gs {
                    orphans.extend(end_mirror(m, g));
                }
                continue;
            }
            let members: Vec<u32> = run.iter().map(|&(_, f)| f).collect();
            self.ww_mirror_extend(w, m, g, &members, groups, orphans);
        }
        for run in groups.chunk_by(|a, b| a.0 == b.0) {
            let twin = run
                .iter()
                .map(|&(_, f)| w.flow_slot[f as usize])
                .find(|&s| s != NONE && w.slots[s as usize].mirror);
            if let Some(s) = twin
                && run.iter().any(|&(_, f)| w.flow_slot[f as usize] == NONE)
            {
                orphans.push((s, w.slots[s as usize].generation));
            }
        }
    }

    /// Leader partition `members` of mirror `g` gained flows: extends the mirror to them in each
    /// twin that gained corresponding ones; releases the others. The mirror ends unless a twin
    /// is kept or, with its history reproducible, only fresh flows joined.
    fn ww_mirror_extend(
        &mut self,
        w: &mut Wormhole,
        m: &mut Memo,
        g: u32,
        members: &[u32],
        groups: &[(u32, u32)],
        orphans: &mut Vec<(u32, u32)>,
    ) {
        let gi = g as usize;
        m.mirrors[gi].record = None;
        let mut old = Vec::new();
        let mut new_l = Vec::new();
        for &f in members {
            if m.mirror_of[f as usize] == g {
                old.push(m.mirrors[gi].leaders.iter().position(|&x| x == f).expect("a leader of its mirror"));
            } else {
                new_l.push(f);
            }
        }
        let followers = std::mem::take(&mut m.mirrors[gi].followers);
        let mut kept = Vec::new();
        for (s, gen_) in followers {
            let si = s as usize;
            if !w.slots[si].live || w.slots[si].generation != gen_ || !w.slots[si].mirror {
                continue;
            }
            match self.ww_mirror_match(w, &m.mirrors[gi].leaders, &w.slots[si].flows, &old, &new_l, members.len(), groups) {
                Some(new_t) => kept.push((s, gen_, new_t)),
                None => orphans.push((s, gen_)),
            }
        }
        // With no twin left, the mirror still tracks the leader's history while only fresh
        // flows join it (its joined runs are recorded and replayed under `join_key`).
        if kept.is_empty() && !(m.mirrors[gi].hist.is_some() && new_l.iter().all(|&f| self.ww_fresh(f))) {
            orphans.extend(end_mirror(m, g));
            return;
        }
        for &f in &new_l {
            m.mirror_of[f as usize] = g;
        }
        m.mirrors[gi].joined = true;
        m.joined.push(g);
        m.mirrors[gi].leaders.extend_from_slice(&new_l);
        let leaders = m.mirrors[gi].leaders.clone();
        for (s, gen_, new_t) in kept {
            self.ww_slot_add(w, s, &new_t);
            if let Some(t) = w.slots[s as usize].twin.as_mut() {
                t.leader.clone_from(&leaders);
                t.una0.resize(leaders.len(), 0);
            }
            m.mirrors[gi].followers.push((s, gen_));
        }
    }

    /// The twin's new flows that correspond to the leader's `new_l`, or `None`. The twin's
    /// partition must be its flows at positions `old` of the mirror (those whose leader flows
    /// are in the leader's partition now) plus as many new flows as the leader gained, all fresh,
    /// and paired in submission order they must match flow by flow: size, class, line rate, and
    /// links that correspond one to one with the same rates along the data and ACK paths.
    #[allow(clippy::too_many_arguments)]
    fn ww_mirror_match(
        &self,
        w: &Wormhole,
        leaders: &[u32],
        twins: &[u32],
        old: &[usize],
        new_l: &[u32],
        n: usize,
        groups: &[(u32, u32)],
    ) -> Option<Vec<u32>> {
        let fresh = |f: u32| self.ww_fresh(f);
        if !new_l.iter().all(|&f| fresh(f)) {
            return None;
        }
        let r = w.root[twins[*old.first()?] as usize];
        let lo = groups.partition_point(|&(x, _)| x < r);
        let hi = groups.partition_point(|&(x, _)| x <= r);
        let t_members = &groups[lo..hi];
        if t_members.len() != n {
            return None;
        }
        let s = w.flow_slot[twins[old[0]] as usize];
        let new_t: Vec<u32> = t_members
            .iter()
            .map(|&(_, f)| f)
            .filter(|&f| w.flow_slot[f as usize] != s)
            .collect();
        if new_t.len() != new_l.len() || new_t.iter().any(|&f| w.flow_slot[f as usize] != NONE || !fresh(f)) {
            return None;
        }
        let mut map: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        let mut inv: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        let pairs = old
            .iter()
            .map(|&k| (leaders[k], twins[k]))
            .chain(new_l.iter().copied().zip(new_t.iter().copied()));
        for (a, b) in pairs {
            let (fa, fb) = (&self.flows[a as usize], &self.flows[b as usize]);
            if fa.size != fb.size || fa.pg != fb.pg || fa.max_rate != fb.max_rate {
                return None;
            }
            let (la, lb) = (flow_links(self, a as usize), flow_links(self, b as usize));
            if la.len() != lb.len() || fa.path_ack - fa.path_data != fb.path_ack - fb.path_data {
                return None;
            }
            for (i, j) in la.zip(lb) {
                let (x, y) = (self.paths[i], self.paths[j]);
                if self.link_rate[x as usize] != self.link_rate[y as usize]
                    || *map.entry(x).or_insert(y) != y
                    || *inv.entry(y).or_insert(x) != x
                {
                    return None;
                }
            }
        }
        Some(new_t)
    }

    /// Ends the skip of slot `s` now: advances its flows, shifts its times, re-queues its events.
    fn ww_resume(&mut self, w: &mut Wormhole, s: u32) {
        let si = s as usize;
        let t0 = w.slots[si].t0;
        if let Some(t) = w.slots[si].twin.take() {
            let (plan, rates) = self.twin_plan(&t, t0);
            w.slots[si].plan = Some(plan);
            w.slots[si].rates = rates;
        }
        let d = (self.now - t0).div_ceil(1000) * 1000;
        // The skip ran to its planned end (not cut short by an arrival: a skip-back).
        let planned = self.now >= w.slots[si].resume_at;
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
        let rtt_ns: Vec<u64> = slot.flows.iter().map(|&f| self.own_rtt_ns(f)).collect();
        let var_win = self.cfg.var_win;
        for (k, &f) in slot.flows.iter().enumerate() {
            let fl = &mut self.flows[f as usize];
            let want = match &slot.plan {
                // A completion replay froze at its checkpoint, windows in flight: linear.
                Some(p) if p.completion => slot.rates[k] * d_s / 8.0,
                Some(p) => {
                    let (moved, r) = if d >= p.t_conv {
                        (
                            p.bytes[k] as f64 + slot.rates[k] * (d - p.t_conv) as f64 * 1e-12 / 8.0,
                            slot.rates[k],
                        )
                    } else {
                        (
                            p.bytes[k] as f64 * d as f64 / p.t_conv as f64,
                            p.bytes[k] as f64 * 8e12 / p.t_conv as f64,
                        )
                    };
                    // The stored bytes are acknowledged ones, but the partition froze with its
                    // own window in flight (none for flows that just started): count the
                    // window the flow would have in flight by now as delivered, or it pays its
                    // start-up round trip twice.
                    let bdp = r * rtt_ns[k] as f64 * 1e-9 / 8.0;
                    let window = match fl.window(var_win) {
                        0 => bdp,
                        w => (w as f64).min(bdp),
                    };
                    moved + (window - (fl.snd_nxt - fl.snd_una) as f64).max(0.0)
                }
                None => slot.rates[k] * d_s / 8.0,
            };
            let want = want as u64 / unit * unit;
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
            fl.cc.fast_forward(b, d_ns);
            self.stats.payload_delivered += b;
            w.stats.skipped_bytes += b;
            w.flow_slot[f as usize] = NONE;
            if slot.rates[k] > 0.0 {
                w.last_rate[f as usize] = slot.rates[k];
            }
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
            if pk.kind.is_pfc() {
                return;
            }
            if let Ok(k) = moved.binary_search_by_key(&pk.flow, |&(f, _)| f) {
                pk.seq += moved[k].1;
                if e.cfg.cc.uses_send_ts() {
                    e.ts[p as usize] += d_ns;
                }
                if e.cfg.cc.uses_int() {
                    for h in &mut e.ints[p as usize] {
                        *h = super::cc::int::shift_int_time(*h, d_ns);
                    }
                }
            }
        };
        // Queued packets on the partition's ports and NICs' ACK queues.
        for &k in &slot.links {
            w.link_slot[k as usize] = NONE;
            let ki = k as usize;
            let queued: Vec<u32> = self.ports[ki].queues.iter().flat_map(|q| q.list.iter(&self.pkts)).collect();
            for p in queued {
                shift_pkt(self, p);
            }
            let src = self.ports[ki].src;
            if src < self.topo.num_hosts() {
                let acks: Vec<u32> = self.nics[src as usize].ackq.iter(&self.pkts).collect();
                for p in acks {
                    shift_pkt(self, p);
                }
            }
            self.ww_shift_port_clocks(k, t0, d);
        }
        // Packets on the wire, then the parked events themselves.
        for &(_, _, e) in &slot.parked {
            if matches!(events::kind(e), EV_ARRIVE | EV_HOP) {
                shift_pkt(self, events::op_b(e));
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
        self.ww_kick_stray_ports(&slot.links);
        if let Some(p) = &slot.plan
            && (p.completion || d >= p.t_conv || planned)
        {
            for (k, &f) in slot.flows.iter().enumerate() {
                super::cc::restore(self, f, &p.cc[k]);
            }
        }
        let mut slot = slot;
        slot.parked.clear();
        let keep = &mut w.slots[si];
        keep.parked = slot.parked;
    }
}

/// Run entries (a fresh partition's run to its last completion) live under their graph, each
/// flow weighted by its size, with this mixed into the hash.
const RUN_TAG: u64 = 0x52;
/// Tags the keys of joined runs (`join_key`).
const JOIN_TAG: u64 = 0x4A;
/// A joining flow's start offset counts in steps of this much in its key: 10 ns, far below
/// anything that moves a run, and above the picosecond jitter of start times that the
/// workload computes in floating point.
const JOIN_QUANTUM_PS: u64 = 10_000;

/// The key of a run entry: `graph` (canonical) with each flow weighed by its size,
/// re-canonicalized. Returns the graph, the hash, and for each of its flow vertices the index
/// into `graph`'s.
fn run_key(graph: &Fcg, sizes: &[u64]) -> (Fcg, u64, Vec<u32>) {
    let (g, h, order) = weighted_key(graph, sizes);
    (g, mix(h, RUN_TAG), order)
}

/// A stored run's value (each flow's completion offset, in `bytes`, and its CC state then) for
/// the `n` flows of a partition: stored flow `map[i]` is key vertex `i`, which is flow
/// `order[i]` of the partition.
fn stored_run(val: &MemoValue, map: &[u32], order: &[u32], n: usize) -> (Vec<u64>, Vec<CcSnap>) {
    let mut fin = vec![0u64; n];
    let mut cc = vec![CcSnap::default(); n];
    for (i, &v) in order.iter().enumerate() {
        fin[v as usize] = val.flows[map[i] as usize].bytes;
        cc[v as usize] = val.flows[map[i] as usize].cc;
    }
    (fin, cc)
}

/// `graph` (canonical) with each flow weighed by `weights`, re-canonicalized: the graph, its
/// hash, and for each of its flow vertices the index into `graph`'s.
fn weighted_key(graph: &Fcg, weights: &[u64]) -> (Fcg, u64, Vec<u32>) {
    let g = graph.with_flow_weights(weights);
    let (h, order) = g.canonical();
    let nf = g.num_flows();
    (g.relabel(&order), h, order[..nf].to_vec())
}

/// The key of an episode that ends in a completion: `graph` (canonical) with each flow weighed
/// by `rem` (its bytes left), re-canonicalized, under a hash tagged with the checkpoint delay.
/// Returns the graph, the hash, and for each of its flow vertices the index into `graph`'s.
fn completion_key(graph: &Fcg, rem: &[u64], delta: u64) -> (Fcg, u64, Vec<u32>) {
    let (g, h, order) = weighted_key(graph, rem);
    (g, mix(mix(h, COMPLETION_TAG), delta), order)
}

/// Ends mirror `g` (a flow joined its leader's partition): its twins, to resume now.
fn end_mirror(m: &mut Memo, g: u32) -> Vec<(u32, u32)> {
    let mi = &mut m.mirrors[g as usize];
    mi.live = false;
    mi.record = None;
    for &f in &mi.leaders {
        m.mirror_of[f as usize] = NONE;
    }
    std::mem::take(&mut mi.followers)
}

/// Closes the open episode `f` is part of, if any (its flow set changed before steady state).
/// Returns the deferred twins it leaves to resolve.
fn end_episode(m: &mut Memo, f: u32) -> Vec<(u32, u32)> {
    let Some(&k) = m.episode_of.get(f as usize) else {
        return Vec::new();
    };
    if k == NONE {
        return Vec::new();
    }
    let fl = std::mem::take(&mut m.episodes[k as usize].flows);
    for g in fl {
        m.episode_of[g as usize] = NONE;
    }
    m.episodes[k as usize].live = false;
    std::mem::take(&mut m.episodes[k as usize].followers)
}

/// What memo entries depend on besides their graph: every knob of the dynamics (CC and its
/// parameters, MTU, ACKs, buffers, PFC, ECN, θ, l, the sample interval), not the seed.
fn memo_context(cfg: &super::config::PacketConfig) -> u64 {
    let mut c = cfg.clone();
    c.seed = 0;
    c.ns3_stream_base = None;
    fnv(format!("{c:?}").as_bytes())
}

/// Fast-forwarded bytes are whole multiples of this: the MTU, or the ACK chunk when it is a
/// multiple of the MTU (chunk-aligned ACK points stay aligned).
fn chunk_unit(chunk: u64, mtu: u64) -> u64 {
    if chunk > 0 && chunk.is_multiple_of(mtu) { chunk } else { mtu }
}

/// Whether `members`' partition (partition root, flow) is uncontended: no two of its flows send
/// data over the same link (each has its data path to itself; only ACKs share links with the
/// others' data), so each flow's rate is only its own CC settling, and each flow's CC must settle alone within
/// the window (`CongestionControl::settles_alone`: DCQCN only at line rate).
/// `mark` is the per-link scratch bitmap (all false between uses).
fn uncontended(e: &Engine, members: &[(u32, u32)], mark: &mut [bool]) -> bool {
    let data = |f: u32| {
        let fl = &e.flows[f as usize];
        &e.paths[fl.path_data as usize..fl.path_ack as usize]
    };
    if members
        .iter()
        .any(|&(_, f)| !super::cc::settles_alone(e.cfg.cc, &e.flows[f as usize]))
    {
        return false;
    }
    let mut shared = false;
    'flows: for &(_, f) in members {
        for &l in data(f) {
            if mark[l as usize] {
                shared = true;
                break 'flows;
            }
            mark[l as usize] = true;
        }
    }
    for &(_, f) in members {
        for &l in data(f) {
            mark[l as usize] = false;
        }
    }
    !shared
}

/// Eq. 6 on flow `f`'s last `k` samples (see [`last_samples`]).
fn steady(w: &Wormhole, f: usize, k: usize) -> bool {
    (w.nsamp[f] as usize) >= k && window_estimate(last_samples(w, f, k), w.cfg.theta).0
}

/// The last `k` (at most `window`) rate samples of flow `f`, newest first; all `window` of them
/// in storage order (the order eq. 7's mean has always summed them in).
fn last_samples(w: &Wormhole, f: usize, k: usize) -> impl Iterator<Item = f64> + '_ {
    let l = w.cfg.window;
    let n = w.nsamp[f] as usize;
    (1..=k.min(l)).map(move |j| {
        if k >= l {
            w.samples[f * l + j - 1]
        } else {
            w.samples[f * l + (n + l - j) % l]
        }
    })
}

/// Eq. 6 and eq. 7 on one window of samples: `(steady, R̂)`.
pub fn steady_estimate(samples: &[f64], theta: f64) -> (bool, f64) {
    window_estimate(samples.iter().copied(), theta)
}

/// [`steady_estimate`] over any sequence of samples, in one pass.
fn window_estimate(samples: impl Iterator<Item = f64>, theta: f64) -> (bool, f64) {
    let (mut n, mut sum, mut lo, mut hi) = (0usize, 0.0, f64::MAX, 0.0f64);
    for x in samples {
        n += 1;
        sum += x;
        lo = lo.min(x);
        hi = hi.max(x);
    }
    let mean = sum / n as f64;
    (mean > 0.0 && (hi - lo) / mean < theta, mean)
}
