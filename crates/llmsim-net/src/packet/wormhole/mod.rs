//! Wormhole steady-state fast-forwarding (Long et al., NSDI'26, §3 and §5), native to the engine.
//!
//! - **Partitions** (§3.1.1, App. B): union-find over the data links of the running flows,
//!   recomputed at a sample tick after any flow started or finished. ACK paths do not join
//!   partitions: a ring's flows, each alone on its data path but each one's ACKs leaving on the
//!   next one's data link, are as many partitions. A frozen partition owns its data links
//!   (their ports' transmissions, NIC wake-ups) and its flows' packets wherever they are; an
//!   ACK (or NACK, CNP) of a running flow reaching a frozen link crosses it as through an idle
//!   port (`PacketEngine::ww_pass`, also for those queued there when it froze). A frozen flow
//!   sends no ACKs, so the links of its ACK path lose the share of their time its ACKs would
//!   take (`PacketEngine::add_ack_load`: 4.8% at 400 Gbit/s for a flow at line rate; without
//!   it a ring's flow ran at line rate beside its frozen neighbours). A flow starting or
//!   finishing with its ACK path on a frozen partition's data link resumes it, as a flow
//!   starting on it does. Memo keys count the ACK streams on each flow's data links and its
//!   priority class.
//! - **Steady state** (§5.1.2, eq. 6): every `sample_interval` each running flow samples its rate
//!   (bytes acknowledged over the interval). A flow is steady when the last `l` samples satisfy
//!   `(max - min) / mean < θ`; a partition when all its flows are. A contended partition is
//!   not steady while a flow's CC will move its rate at a timer longer than the window
//!   (`cc::recovering`: DCQCN more than θ below its target, whose next `RP_TIMER` halves the
//!   gap), nor below its fair shares where its CC rises only at such a timer (DCQCN under line
//!   rate): flat samples there are a stretch of a cycle whose mean is lower (issue 29: a
//!   32-GPU DCQCN job came out -8% to +127% of the exact engine over ECMP seeds 1-12).
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
//!   its leader stands (as a deferred twin does, below), at that instant's episode check and
//!   before its lookups, so the released twin's partition is looked up like any other (a
//!   stored transient skips it; identical twins released together defer to the first). Flows
//!   that start on a leader's and on each twin's partition at the same instant, matching flow
//!   by flow on corresponding links, join the mirror instead (a DP ring meeting a rail's
//!   all-to-all on every rail).
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
//! - **Links changing during the run** (a failure, repair, bandwidth or loss change; §5: a
//!   failure or reroute interrupts steady state): every frozen partition resumes at the change
//!   (leaders before the twins that follow them), and memoization stops for the rest of the
//!   run, since an episode recorded across the change would store a transient its key does not
//!   describe. Steady-state fast-forward goes on: partitions freeze again once their rates
//!   settle under the new conditions ([`PacketEngine::ww_interrupt`]).

use llmsim_core::SimTime;

use super::PacketError;
use super::config::WormholeConfig;
use super::engine::PacketEngine;
use super::events::{
    self, EV_ARRIVE, EV_CC_TIMER, EV_CC_TIMER_LAST, EV_HOP, EV_RESUME, EV_SAMPLE, EV_START, EV_TXDONE, EV_WAKE, MASK30, ev,
};
use super::memo::{CcSnap, Fcg, FlowDesc, MemoDb, MemoFlow, MemoValue, fnv, mix};
use super::tables::{Nic, Pkt};

mod episodes;
mod freeze;
mod partition;
mod twins;

/// No slot, mirror or episode.
pub(crate) const NONE: u32 = u32::MAX;

/// Counters of the fast-forwarding of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WormholeStats {
    /// Partitions frozen (steady episodes skipped).
    pub freezes: u64,
    /// Resumes earlier than planned because a flow started on a frozen partition (skip-back).
    pub skip_backs: u64,
    /// Sum over freezes of the skipped time (serialized as `skipped_ps`, in ps).
    #[serde(rename = "skipped_ps", serialize_with = "ser_ps")]
    pub skipped: SimTime,
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
    /// Frozen partitions that no event resolved and the `TWIN_MAX_PS` watchdog resumed (a
    /// twin whose leader never ended its wait): their flows moved nothing while frozen, so
    /// they finish late and the run's times with them. Zero (and not serialized) in a sound run.
    #[serde(skip_serializing_if = "is_zero")]
    pub watchdog_resumes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Writes a time as its picoseconds (the `skipped_ps` key of reports).
fn ser_ps<S: serde::Serializer>(t: &SimTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(t.as_ps())
}

/// One flow's fast-forward: from `start` to `end` at `rate_bps` (payload), `bytes` moved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SkipRecord {
    /// The flow's index.
    pub flow: u32,
    /// When the fast-forward began.
    pub start: SimTime,
    /// When it ended.
    pub end: SimTime,
    /// Payload rate over the skip, in bits per second.
    pub rate_bps: f64,
    /// Payload bytes moved by the skip.
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
    /// The ACK loads its flows put on their ACK paths' links while frozen (`add_ack_load`).
    acks: Vec<(u32, u32)>,
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

/// Contended partitions above this many flows keep eq. 6's full window (`at_fair_share`).
const FAIR_MAX_FLOWS: usize = SPLIT_DEFER_FLOWS;

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

/// A leader partition whose flows mirrored twins copy (`PacketEngine::ww_episodes`).
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
    /// The links marked in `link_touched` (the tick clears only these).
    link_touched_list: Vec<u32>,
    /// Running flows whose ACK path crosses each link (a memo key counts them on a flow's data
    /// links: partitions are made of data links, and ACKs sharing a link slow its data).
    ack_users: Vec<u32>,
    /// The engine's reverse of each link.
    link_rev: Vec<u32>,
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
    /// The memo database after a link change stopped memoization (kept for the caller).
    memo_db_kept: Option<MemoDb>,
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
    /// Marks link `l` touched by a flow starting or finishing (its partition restarts sampling).
    fn touch_link(&mut self, l: u32) {
        if !self.link_touched[l as usize] {
            self.link_touched[l as usize] = true;
            self.link_touched_list.push(l);
        }
    }

    pub(crate) fn new(e: &PacketEngine) -> Wormhole {
        let nl = e.num_links();
        Wormhole {
            cfg: e.config().wormhole,
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
            link_touched_list: Vec::new(),
            ack_users: vec![0; nl],
            link_rev: e.link_rev.clone(),
            uf: (0..nl as u32).collect(),
            root: Vec::new(),
            slots: Vec::new(),
            scratch: Vec::new(),
            link_mark: vec![false; nl],
            watchdog: u64::MAX,
            log: Vec::new(),
            memo: e.config().wormhole.memo.then(|| {
                Box::new(Memo {
                    db: MemoDb::default(),
                    mirrors: Vec::new(),
                    mirror_of: Vec::new(),
                    context: memo_context(e.config()),
                    touched: vec![false; nl],
                    touched_list: Vec::new(),
                    check_pending: false,
                    episodes: Vec::new(),
                    episode_of: Vec::new(),
                    root_mark: vec![false; nl],
                    joined: Vec::new(),
                })
            }),
            memo_db_kept: None,
        }
    }

    /// Whether flow `f` is in a frozen partition now (its acknowledgements wait for the resume).
    pub(crate) fn flow_frozen(&self, f: u32) -> bool {
        self.flow_slot.get(f as usize).is_some_and(|&s| s != NONE)
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
            // A packet belongs to its flow's slot, wherever it is: partitions are made of data
            // links, so a flow's ACKs may cross another partition's links (see `ww_pass`).
            // A PFC frame belongs to the port it pauses or resumes (the reverse of its link).
            EV_ARRIVE | EV_HOP => {
                let pk = &pkts[events::op_b(e) as usize];
                if pk.kind.is_pfc() {
                    self.link_slot[self.link_rev[a as usize] as usize]
                } else {
                    self.flow_slot.get(pk.flow as usize).copied().unwrap_or(NONE)
                }
            }
            EV_TXDONE => self.link_slot[a as usize],
            EV_WAKE => self.link_slot[nics[a as usize].link as usize],
            EV_CC_TIMER..=EV_CC_TIMER_LAST => self.flow_slot.get(a as usize).copied().unwrap_or(NONE),
            _ => NONE,
        }
    }
}

impl PacketEngine {
    /// Sets the fast-forward knobs; call before the run starts (no flow started yet).
    ///
    /// # Errors
    /// `PacketError::Config` naming a knob out of range, or when a flow has already started.
    pub fn set_wormhole(&mut self, cfg: WormholeConfig) -> Result<(), PacketError> {
        cfg.validate().map_err(PacketError::Config)?;
        if cfg.fast_forward {
            let mut c = self.config().clone();
            c.wormhole = cfg;
            crate::packet::engine::check_load_balance(&c)?;
        }
        if self.flow_table().iter().any(|f| f.started) {
            return Err(PacketError::Config("wormhole knobs must be set before any flow starts".into()));
        }
        self.set_wormhole_config(cfg);
        *self.ww_slot() = if cfg.fast_forward {
            Some(Box::new(Wormhole::new(self)))
        } else {
            None
        };
        Ok(())
    }

    /// Every flow's fast-forwards so far, in the order they ended.
    pub fn wormhole_log(&self) -> &[SkipRecord] {
        self.ww_state().map_or(&[], |w| &w.log)
    }

    /// Payload bytes of flow `f` acknowledged so far; `None` when the engine has no flow `f`.
    pub fn flow_bytes_acked(&self, f: u32) -> Option<u64> {
        self.flow_table().get(f as usize).map(|fl| fl.snd_una)
    }

    /// Fast-forward statistics (`None` when fast-forwarding is off).
    pub fn wormhole_stats(&self) -> Option<WormholeStats> {
        self.ww_state().map(|w| w.stats)
    }

    /// The memo database (`None` when memoization is off).
    pub fn memo_db(&self) -> Option<&MemoDb> {
        let w = self.ww_state()?;
        w.memo.as_ref().map(|m| &m.db).or(w.memo_db_kept.as_ref())
    }

    /// Replaces the memo database, e.g. with one loaded from a file or taken from another run.
    ///
    /// # Errors
    /// `PacketError::Config` when memoization is off.
    pub fn set_memo_db(&mut self, db: MemoDb) -> Result<(), PacketError> {
        match self.ww_slot().as_mut().and_then(|w| w.memo.as_mut()) {
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
        let w = self.ww_slot().as_mut()?;
        match w.memo.as_mut() {
            Some(m) => Some(std::mem::take(&mut m.db)),
            None => w.memo_db_kept.take(),
        }
    }

    /// A link changes now (see the module doc): every frozen partition resumes, leaders before
    /// the twins that copy them, and memoization stops for the rest of the run (its open
    /// episodes, mirrors and run records are dropped unrecorded). Partitions are recomputed and
    /// every flow samples its rate afresh.
    #[cold]
    pub(crate) fn ww_interrupt(&mut self) {
        let Some(mut w) = self.ww_slot().take() else { return };
        for twins_pass in [false, true] {
            for s in 0..w.slots.len() {
                if w.slots[s].live && w.slots[s].twin.is_some() == twins_pass {
                    self.ww_resume(&mut w, s as u32);
                }
            }
        }
        if let Some(m) = w.memo.take() {
            w.memo_db_kept = Some(m.db);
        }
        w.dirty = true;
        w.merged = true;
        for k in 0..w.active.len() {
            let f = w.active[k] as usize;
            w.nsamp[f] = 0;
            w.last_una[f] = self.flow(f as u32).snd_una;
        }
        if !w.tick_pending && !w.active.is_empty() {
            w.tick_pending = true;
            let at = self.now_ps() + w.cfg.sample_interval.as_ps();
            self.ww_schedule(at, ev(EV_SAMPLE, 0, 0));
        }
        *self.ww_slot() = Some(w);
    }

    /// Handles Wormhole's own events and parks events of frozen partitions; true when `e` is
    /// consumed.
    #[inline(never)]
    pub(crate) fn ww_intercept(&mut self, e: u64, kind: u64, a: u32, b: u32) -> bool {
        let mut w = self.ww_slot().take().expect("wormhole on");
        let consumed = match kind {
            // After a link change stopped memoization, its queued checks are stale.
            EV_SAMPLE if b == 1 || b == 2 => {
                if w.memo.is_some() {
                    if b == 1 {
                        self.ww_episodes(&mut w);
                    } else {
                        self.ww_checkpoint(&mut w, a);
                    }
                }
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
                w.grow(self.num_flows());
                // By index: a resume below needs the engine mutably (paths never change).
                for i in 0..self.flow_links(a).len() {
                    let s = w.link_slot[self.flow_links(a)[i] as usize];
                    // A mirrored twin waits for this instant's episode check, which keeps it if
                    // its leader gained a corresponding flow.
                    if s != NONE && !(w.slots[s as usize].live && w.slots[s as usize].mirror) {
                        if self.now_ps() < w.slots[s as usize].resume_at {
                            w.stats.skip_backs += 1;
                        }
                        self.ww_resume(&mut w, s);
                    }
                }
                false
            }
            _ => {
                let s = self.event_owner(&w, e);
                if s != NONE {
                    let seq = self.park_current_event();
                    w.slots[s as usize].parked.push((self.now_ps(), seq, e));
                    true
                } else {
                    false
                }
            }
        };
        *self.ww_slot() = Some(w);
        consumed
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
fn uncontended(e: &PacketEngine, members: &[(u32, u32)], mark: &mut [bool]) -> bool {
    let data = |f: u32| e.flow_paths(f).0;
    if members.iter().any(|&(_, f)| !super::cc::settles_alone(e.config().cc, e.flow(f))) {
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

/// Max-min fair shares (bit/s) of `flows` on their data links, each link at its payload rate
/// (progressive filling: the most loaded link fixes its flows' share, which leaves the other
/// links; repeated). ACKs are not counted, so a share is an upper bound on what a flow can get.
pub(crate) fn max_min_shares(e: &PacketEngine, flows: &[u32]) -> Vec<f64> {
    let mut links: Vec<(u32, usize)> = Vec::new();
    for (k, &f) in flows.iter().enumerate() {
        links.extend(e.flow_paths(f).0.iter().map(|&l| (l, k)));
    }
    links.sort_unstable();
    links.dedup();
    let mut share = vec![f64::NAN; flows.len()];
    // Per distinct link: its remaining capacity and the unfixed flows on it.
    let mut cap: Vec<(u32, f64)> = Vec::new();
    for run in links.chunk_by(|a, b| a.0 == b.0) {
        cap.push((run[0].0, e.link_payload_bps(run[0].0)));
    }
    loop {
        let mut best: Option<(f64, u32)> = None;
        for run in links.chunk_by(|a, b| a.0 == b.0) {
            let n = run.iter().filter(|&&(_, k)| share[k].is_nan()).count();
            if n == 0 {
                continue;
            }
            let c = cap[cap.partition_point(|x| x.0 < run[0].0)].1;
            let s = (c / n as f64).max(0.0);
            if best.is_none_or(|(b, _)| s < b) {
                best = Some((s, run[0].0));
            }
        }
        let Some((s, l)) = best else { break };
        let fixed: Vec<usize> = links
            .iter()
            .filter(|&&(x, k)| x == l && share[k].is_nan())
            .map(|&(_, k)| k)
            .collect();
        for k in fixed {
            share[k] = s;
            for &(x, j) in &links {
                if j == k {
                    let i = cap.partition_point(|y| y.0 < x);
                    cap[i].1 -= s;
                }
            }
        }
    }
    share
}

/// Whether every flow of `members`' partition has `k` samples whose mean is within θ of its
/// max-min fair share ([`max_min_shares`]): a contended partition whose CCs have converged to
/// the shares they keep (a DCQCN flow recovering from a cut, or still taking bandwidth from
/// another, is below or above it), where eq. 6 may then run on the last `k` samples.
/// Only partitions of up to `FAIR_MAX_FLOWS` flows whose flows are all steady on those `k`
/// samples (what the caller then asks anyway) are filled: the filling costs flows x links.
fn at_fair_share(e: &PacketEngine, w: &Wormhole, members: &[(u32, u32)], k: usize) -> bool {
    if members.len() > FAIR_MAX_FLOWS || !members.iter().all(|&(_, f)| steady(w, f as usize, k)) {
        return false;
    }
    let flows: Vec<u32> = members.iter().map(|&(_, f)| f).collect();
    let shares = max_min_shares(e, &flows);
    flows.iter().zip(&shares).all(|(&f, &s)| {
        let mean = window_estimate(last_samples(w, f as usize, k), w.cfg.theta).1;
        s > 0.0 && (mean - s).abs() < w.cfg.theta * s
    })
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use llmsim_core::{NodeId, SimTime};

    use super::*;
    use crate::packet::config::{CcMode, PacketConfig, WormholeConfig};
    use crate::packet::engine::FlowSpec;

    /// Hosts 0, 1, 2 on switch 3; host 2's link is 50 Gbit/s, the others 100.
    fn star() -> PacketEngine {
        let text = "4 1 3\n3\n0 3 100Gbps 1000ns 0\n1 3 100Gbps 1000ns 0\n2 3 50Gbps 1000ns 0\n";
        let imp = llmsim_topo::ns3::parse_ns3(text, "test.txt", 1).expect("topology parses");
        PacketEngine::new(
            Arc::new(imp.topology),
            Some(imp.file_ids),
            PacketConfig::ns3_defaults(CcMode::Dcqcn),
        )
        .expect("engine")
    }

    fn add(e: &mut PacketEngine, src: u32, dst: u32) -> u32 {
        e.add_flow(FlowSpec {
            src: NodeId(src),
            dst: NodeId(dst),
            size: 1_000_000,
            start: SimTime::ZERO,
            pg: 3,
            dport: 100,
            tag: 0,
            flow_hash: 0,
        })
        .expect("flow")
    }

    /// The watchdog is the last resort for a slot frozen with no resume event of its own (a
    /// twin no leader resolves): it resumes it at `TWIN_MAX_PS`, having moved nothing, and the
    /// run counts it (`watchdog_resumes`, which the report turns into a warning).
    #[test]
    fn a_slot_no_event_resolves_is_resumed_by_the_watchdog_and_counted() {
        let mut e = star();
        let knobs = WormholeConfig::fast_forwarding(0.05, 4, 4, SimTime::from_us(100), true);
        e.set_wormhole(knobs).expect("knobs");
        let f = add(&mut e, 0, 1);
        e.run_until(SimTime::from_us(2));
        with_ww(&mut e, |e, w| e.ww_freeze_slot(w, vec![f], vec![0.0], TWIN_MAX_PS, None));
        e.run();
        assert_eq!(e.wormhole_stats().expect("on").watchdog_resumes, 1);
        let r = e.flow_result(f).expect("flow");
        assert!(r.finish.as_ps() > TWIN_MAX_PS, "it moved nothing while frozen: {:?}", r.finish);
    }

    /// Hosts 0-4 on switch 5, all links 100 Gbit/s.
    fn star5() -> PacketEngine {
        let mut text = String::from("6 1 5\n5\n");
        for h in 0..5 {
            text.push_str(&format!("{h} 5 100Gbps 1000ns 0\n"));
        }
        let imp = llmsim_topo::ns3::parse_ns3(&text, "test.txt", 1).expect("topology parses");
        PacketEngine::new(
            Arc::new(imp.topology),
            Some(imp.file_ids),
            PacketConfig::ns3_defaults(CcMode::Dcqcn),
        )
        .expect("engine")
    }

    fn add_at(e: &mut PacketEngine, src: u32, dst: u32, size: u64, start_us: u64) -> u32 {
        e.add_flow(FlowSpec {
            src: NodeId(src),
            dst: NodeId(dst),
            size,
            start: SimTime::from_us(start_us),
            pg: 3,
            dport: 100,
            tag: 0,
            flow_hash: 0,
        })
        .expect("flow")
    }

    /// Runs `f` with the engine's Wormhole state taken out of it (as the engine's own handlers
    /// do), then puts it back.
    fn with_ww<R>(e: &mut PacketEngine, f: impl FnOnce(&mut PacketEngine, &mut Wormhole) -> R) -> R {
        let mut w = e.ww_slot().take().expect("on");
        let r = f(e, &mut w);
        *e.ww_slot() = Some(w);
        r
    }

    /// A switch port that joins a frozen slot (a flow added to a mirrored twin) idle, its last
    /// transmission having ended after the slot froze, stays idle when the slot resumes. The
    /// resume moves every port clock past the freeze on by the whole skip; moved on, this one
    /// read busy for the skip's length after the resume, and the added flow's packets waited
    /// behind it (on the 1,024-GPU example a pipeline send's ACKs, for 5 ms).
    #[test]
    fn a_port_idle_when_it_joins_a_frozen_slot_is_idle_after_the_resume() {
        let mut e = star5();
        // theta this small: nothing turns steady, only the slot made below is frozen.
        let knobs = WormholeConfig::fast_forwarding(1e-9, 4, 4, SimTime::from_us(10), false);
        e.set_wormhole(knobs).expect("knobs");
        let twin = add_at(&mut e, 3, 4, 10_000_000, 0);
        // Into host 0 until about 10 us, after the freeze at 2 us, long before the join at 50.
        let early = add_at(&mut e, 1, 0, 100_000, 0);
        let late = add_at(&mut e, 2, 0, 1_000_000, 50);
        let into_0 = e.flow_paths(late).0[1];
        assert_eq!(e.flow_paths(early).0[1], into_0, "both flows end on the switch's port to host 0");
        e.run_until(SimTime::from_us(2));
        let s = with_ww(&mut e, |e, w| e.ww_freeze_slot(w, vec![twin], vec![0.0], TWIN_MAX_PS, None));
        e.run_until(SimTime::from_us(50));
        assert!(
            e.flow_result(early)
                .is_some_and(|r| r.finish.as_ps() > 0 && r.finish.as_ps() < 20_000_000),
            "the early flow is done"
        );
        let ended = e.ports[into_0 as usize].busy_until;
        assert!(
            ended > 2_000_000 && ended < 50_000_000,
            "its port's last transmission ended in between: {ended}"
        );
        with_ww(&mut e, |e, w| e.ww_slot_add(w, s, &[late]));
        e.run_until(SimTime::from_us(100));
        with_ww(&mut e, |e, w| e.ww_resume(w, s));
        let until = e.ports[into_0 as usize].busy_until;
        assert!(until <= 100_000_000, "the port reads idle after the resume, busy until {until} ps");
        e.run_until(SimTime::from_us(300));
        let r = e.flow_result(late).expect("the late flow");
        // 1 MB at 100 Gbit/s is 80 us from its resume at 100 us; the old clock held its packets
        // at the port until about 108 us, then the rest paced behind them.
        assert!(
            r.finish.as_ps() > 0 && r.finish.as_ps() < 200_000_000,
            "the late flow finishes: {:?}",
            r.finish
        );
    }

    /// Packets queued at a frozen switch port whose last transmission's TxDone was deferred
    /// (the port reads busy with no TxDone queued, see `transmit`) leave when the port thaws.
    /// The thaw kicked only ports that read idle, so they waited for the next packet to arrive
    /// at the port: here a flow that starts 1 s later.
    #[test]
    fn packets_queued_at_a_frozen_port_with_a_deferred_txdone_leave_at_the_thaw() {
        let mut e = star5();
        let knobs = WormholeConfig::fast_forwarding(1e-9, 4, 4, SimTime::from_us(10), false);
        e.set_wormhole(knobs).expect("knobs");
        // Leaves the switch's port to host 0 with a deferred TxDone.
        let early = add_at(&mut e, 1, 0, 10_000, 0);
        // The slot's flow: its links hold that port; it starts long after everything else.
        let held = add_at(&mut e, 3, 0, 10_000, 1_000_000);
        let queued = add_at(&mut e, 2, 0, 20_000, 20);
        let into_0 = e.flow_paths(queued).0[1];
        assert_eq!(e.flow_paths(held).0[1], into_0);
        e.run_until(SimTime::from_us(10));
        assert!(e.flow_result(early).is_some_and(|r| r.finish.as_ps() > 0), "the early flow is done");
        let pt = &e.ports[into_0 as usize];
        assert!(pt.busy && !pt.txdone_pending, "its last TxDone was deferred");
        let s = with_ww(&mut e, |e, w| {
            let s = e.ww_freeze_slot(w, vec![held], vec![0.0], TWIN_MAX_PS, None);
            // As a mirrored twin: a flow starting on its links does not resume it (the episode
            // check would).
            w.slots[s as usize].mirror = true;
            s
        });
        e.run_until(SimTime::from_us(50));
        assert!(
            e.ports[into_0 as usize].total > 0,
            "the late flow's packets wait at the frozen port"
        );
        with_ww(&mut e, |e, w| e.ww_resume(w, s));
        e.run_until(SimTime::from_us(500));
        let r = e.flow_result(queued).expect("flow");
        assert!(
            r.finish.as_ps() > 0 && r.finish.as_ps() < 100_000_000,
            "the queued flow finishes soon after the thaw at 50 us: {:?}",
            r.finish
        );
    }

    /// Progressive filling: A (0 -> 2) and B (1 -> 2) split host 2's 50 Gbit/s link; C (1 -> 0)
    /// takes what B leaves of host 1's uplink; D (0 -> 1) shares nothing with B or C's
    /// bottlenecks: host 0's uplink less A's share. Each at the links' payload rate.
    #[test]
    fn max_min_shares_fill_the_most_loaded_link_first() {
        let mut e = star();
        let (a, b, c, d) = (add(&mut e, 0, 2), add(&mut e, 1, 2), add(&mut e, 1, 0), add(&mut e, 0, 1));
        let fast = e.link_payload_bps(e.flow_paths(c).0[0]);
        let slow = e.link_payload_bps(*e.flow_paths(a).0.last().expect("a path"));
        assert!((slow / fast - 0.5).abs() < 0.02, "host 2's link is half as fast: {slow} vs {fast}");
        let s = max_min_shares(&e, &[a, b, c, d]);
        let want = [slow / 2.0, slow / 2.0, fast - slow / 2.0, fast - slow / 2.0];
        for (k, (&got, &w)) in s.iter().zip(&want).enumerate() {
            assert!((got - w).abs() < 1e-6 * w, "flow {k}: share {got} vs {w}");
        }
        // A lone flow gets its bottleneck's payload rate, as `payload_cap` says.
        let lone = max_min_shares(&e, &[a]);
        assert!((lone[0] - e.payload_cap(a)).abs() < 1e-6 * lone[0]);
    }
}
