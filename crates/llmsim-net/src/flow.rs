//! The flow backend: max-min fair rates on directed links, event driven.
//!
//! - A flow holds every link of its route (with multiplicity for `Chain`/`Via`) from its start
//!   until its last byte is serialized (its *drain*); it completes one route latency later.
//! - Rates are max-min fair (progressive filling): all unfrozen flows of a component rise
//!   together; the link whose `remaining capacity / unfrozen multiplicity` is smallest
//!   saturates first and freezes its flows at that share. A link carried `k` times by a flow
//!   counts that flow `k` times.
//! - Rates are recomputed after the events of one timestamp, and only for the connected
//!   components (flows joined by shared links) that those arrivals and departures touched,
//!   resuming the filling at a level below which no rate changes (bit-identical to a filling
//!   of the whole component; `FlowNetwork::recompute`). A component of one flow — the common
//!   case of disjoint transfers — takes a fast path: its rate is its route's bottleneck.
//! - Where a changed link's last component filling was large (512 flows or more), a *local
//!   filling* is tried first: each flow keeps the key `(rate, link that froze it)`, and only the
//!   links whose flow set changed, and the flows and links that a changed saturation reaches in
//!   key order, are visited; the rest saturate as before. It is used only where it gives the
//!   component filling's rates to the bit (multiplicities 1, no rounding dip in any walk above
//!   the resume level: [`RateScratch::walk`], [`RateScratch::local_fill`]); elsewhere the
//!   component filling runs. A try whose walks visit more flows than a large component filling
//!   collects backs off for up to 1,024 triggered recomputations ([`RateScratch::weigh_local`]).
//!   `LLMSIM_FLOW_LOCAL=1` tries it at every recomputation, `=0` never.
//! - Time is integer picoseconds. Rates and remaining bits are `f64`; a predicted drain is
//!   rounded up to the picosecond and a flow completes exactly when its drain fires. Each rate
//!   change bumps the flow's version, and drain events of an older version are skipped.
//! - A flow that runs at its bottleneck rate from start to drain gets the exact integer
//!   serialization time, the same as the analytical backend.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use smallvec::SmallVec;

use llmsim_core::{Bandwidth, Bytes, LinkId, NodeId, SimTime, TransferId};
use llmsim_topo::Topology;

use crate::packet::LoadBalance;
use crate::route::{self, IdSet, RouteLink, RouteScratch, RouteSummary};
use crate::{Completion, LinkChange, NetError, NetStats, Network, RouteSpec, Transfer};

const PS_PER_S: f64 = SimTime::PS_PER_S as f64;
/// Relative tolerance of the rate checks.
const CHECK_TOL: f64 = 1e-9;
/// The relative margin of [`RateScratch::arrival_level`]'s comparisons: room for rounding
/// between a link's heap key, its share and the rates it freezes (of the order of 1e-16).
const ARRIVAL_MARGIN: f64 = 1.0 / (1u64 << 20) as f64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    /// Submitted, start time not reached.
    Pending,
    /// Holding its links.
    Active,
    /// Drained; waiting for its last byte to propagate.
    Drained,
}

#[derive(Clone, Copy, Debug)]
struct PathEntry {
    link: u32,
    /// How many times the flow's rate crosses the link: the legs over it (an integer) under
    /// one path per flow, the share of its paths over it when spread (`LoadBalance::Spread`).
    mult: f64,
    /// Index of this flow in `links.on(link)`, for O(1) swap-remove.
    pos: u32,
}

struct Flow {
    id: TransferId,
    src: NodeId,
    dst: NodeId,
    bytes: Bytes,
    start: SimTime,
    latency: SimTime,
    path: FlowPath,
    /// Bottleneck of the route alone: bandwidth, multiplicity, and `bandwidth / multiplicity`.
    solo_bw: Bandwidth,
    /// 0: no exact integer drain (a spread flow's fractional shares).
    solo_mult: u32,
    solo_rate: f64,
    remaining_bits: f64,
    rate_bps: f64,
    updated_at: SimTime,
    state: State,
    /// How the transfer was routed, to route it again when a link on its path changes.
    flow_hash: u64,
    route: RouteSpec,
    /// The path is counted in [`FlowNetwork::class_load`].
    class_load: bool,
    /// Traffic class ([`Network::submit_in_class`]): higher classes are filled first.
    priority: u8,
}

impl Flow {
    fn empty() -> Self {
        Flow {
            id: TransferId(0),
            src: NodeId(0),
            dst: NodeId(0),
            bytes: Bytes::ZERO,
            start: SimTime::ZERO,
            latency: SimTime::ZERO,
            path: FlowPath::new(),
            solo_bw: Bandwidth::ZERO,
            solo_mult: 1,
            solo_rate: 0.0,
            remaining_bits: 0.0,
            rate_bps: 0.0,
            updated_at: SimTime::ZERO,
            state: State::Free,
            flow_hash: 0,
            route: RouteSpec::Direct,
            class_load: false,
            priority: 0,
        }
    }
}

/// A shared link's active flows, `(slot, index in the flow's path)`: inline up to two (most
/// shared links hold two), so that adding and removing a flow touches the list's header and its
/// entries in one cache line instead of two (the 16k-GPU runs spent a tenth of their time on
/// those misses).
type LinkFlows = SmallVec<[(u32, u32); 2]>;

/// What the component searches and fillings read of a link that two or more flows hold,
/// together in one cache line: the flow list, the search's mark, the capacity and the kept
/// weight, and the topology's bandwidth and latency. A link that one flow or none holds is
/// described by its [`LinkHot`] entry alone, so that a lone flow's routing, arrival, rate and
/// departure never load this record (bench/README.md, issue 29, branch `flow29j`).
#[derive(Clone)]
#[repr(align(64))]
struct LinkRec {
    /// Active flows `(slot, index in the flow's path)` while two or more hold the link; empty
    /// otherwise ([`LinkHot::one`]).
    shared: LinkFlows,
    /// The [`RateScratch`] epoch that last visited the link.
    mark: Cell<u32>,
    /// Capacity, bit/s.
    cap: f64,
    /// The multiplicities of `shared`, summed as they come and go while two or more flows hold
    /// the link: exact where they are integers (one path per flow), so equal to a sum over the
    /// list in any order there.
    weight: f64,
    /// The topology's line rate and latency of the link.
    bandwidth: Bandwidth,
    latency: SimTime,
}

// One cache line a link.
const _: () = assert!(std::mem::size_of::<LinkRec>() == 64);

/// The part of a link that every flow crossing it touches, 16 bytes (a quarter of a cache line
/// instead of a whole [`LinkRec`]: 1.5 MiB for the 98,304 links of the 16k-GPU fabric; a
/// 32-byte entry that also held the search mark and the byte counter measured slower).
#[derive(Clone)]
#[repr(C, align(16))]
struct LinkHot {
    /// The one flow entry `(slot, index in the flow's path)` while exactly one flow holds the
    /// link.
    one: (u32, u32),
    /// How many flows hold the link.
    len: u32,
    /// The link's `(bandwidth, latency, capacity)` in [`LinkTable::classes`];
    /// [`NO_CLASS`]: read them from the record.
    class: u16,
}

const _: () = assert!(std::mem::size_of::<LinkHot>() == 16);

/// [`LinkHot::class`] of a link whose attributes are in its record only.
const NO_CLASS: u16 = u16::MAX;

/// Every link's [`LinkHot`] entry and [`LinkRec`] record. A link's flow list is the hot entry's
/// `one` while one flow holds it and the record's `shared` list from two on, the same list (in
/// the same order) as one vector with push and swap-remove would hold.
struct LinkTable {
    hot: Vec<LinkHot>,
    rec: Vec<LinkRec>,
    /// One bit per link: two or more flows hold it (12 KiB for 98,304 links, so that the
    /// searches' and fillings' "shared or a flow's own" test on every link of a flow they visit
    /// stays in the first-level cache).
    shared_bits: Vec<u64>,
    /// The distinct `(bandwidth, latency, capacity)` of the links (at most [`NO_CLASS`]).
    classes: Vec<(Bandwidth, SimTime, f64)>,
    /// Each class's index in `classes`, by `(bandwidth, latency)`.
    class_ids: std::collections::HashMap<(Bandwidth, SimTime), u16>,
}

impl std::ops::Index<usize> for LinkTable {
    type Output = LinkRec;
    #[inline]
    fn index(&self, l: usize) -> &LinkRec {
        &self.rec[l]
    }
}

impl LinkTable {
    fn new(topo: &Topology) -> Self {
        let mut t = LinkTable {
            hot: Vec::with_capacity(topo.links().len()),
            rec: Vec::new(),
            shared_bits: vec![0; topo.links().len().div_ceil(64)],
            classes: Vec::new(),
            class_ids: std::collections::HashMap::new(),
        };
        for l in topo.links() {
            let class = t.class_of(l.bandwidth, l.latency);
            t.hot.push(LinkHot {
                one: (0, 0),
                len: 0,
                class,
            });
        }
        t.rec = topo
            .links()
            .iter()
            .map(|l| LinkRec {
                shared: LinkFlows::new(),
                mark: Cell::new(0),
                cap: l.bandwidth.bps_f64(),
                weight: 0.0,
                bandwidth: l.bandwidth,
                latency: l.latency,
            })
            .collect();
        t
    }

    /// The class of `(bw, lat)`, added if new; [`NO_CLASS`] once the table is full (such a
    /// link's attributes stay in its record only).
    fn class_of(&mut self, bw: Bandwidth, lat: SimTime) -> u16 {
        if let Some(&c) = self.class_ids.get(&(bw, lat)) {
            return c;
        }
        if self.classes.len() >= usize::from(NO_CLASS) {
            return NO_CLASS;
        }
        let c = self.classes.len() as u16;
        self.classes.push((bw, lat, bw.bps_f64()));
        self.class_ids.insert((bw, lat), c);
        c
    }

    /// Number of links.
    #[inline]
    fn count(&self) -> usize {
        self.rec.len()
    }

    /// How many flows hold link `l`.
    #[inline]
    fn len(&self, l: usize) -> u32 {
        self.hot[l].len
    }

    /// Two or more flows hold link `l`.
    #[inline]
    fn shared(&self, l: usize) -> bool {
        (self.shared_bits[l >> 6] >> (l & 63)) & 1 != 0
    }

    /// Link `l`'s active flows, `(slot, index in the flow's path)`.
    #[inline]
    fn on(&self, l: usize) -> &[(u32, u32)] {
        let h = &self.hot[l];
        match h.len {
            0 => &[],
            1 => std::slice::from_ref(&h.one),
            _ => &self.rec[l].shared,
        }
    }

    /// Link `l`'s bandwidth and latency (the topology's), from its class where it has one.
    #[inline]
    fn attrs(&self, l: usize) -> (Bandwidth, SimTime) {
        match self.hot[l].class {
            NO_CLASS => (self.rec[l].bandwidth, self.rec[l].latency),
            c => {
                let (bw, lat, _) = self.classes[usize::from(c)];
                (bw, lat)
            }
        }
    }

    /// Link `l`'s capacity ([`LinkRec::cap`]), from its class where it has one.
    #[inline]
    fn cap_of(&self, l: usize) -> f64 {
        match self.hot[l].class {
            NO_CLASS => self.rec[l].cap,
            c => self.classes[usize::from(c)].2,
        }
    }

    /// Sets link `l`'s bandwidth (and capacity), with its class.
    fn set_bandwidth(&mut self, l: usize, bw: Bandwidth) {
        let r = &mut self.rec[l];
        r.cap = bw.bps_f64();
        r.bandwidth = bw;
        let lat = r.latency;
        self.hot[l].class = self.class_of(bw, lat);
    }

    /// Lists leg `i` of flow `slot`, carried `mult` times, on link `l`; `one_mult` is the
    /// multiplicity of the one flow that holds it now, if one does. Returns its index in the
    /// list.
    #[inline]
    fn add(&mut self, l: usize, slot: u32, i: u32, mult: f64, one_mult: f64) -> u32 {
        let h = &mut self.hot[l];
        h.len += 1;
        match h.len {
            1 => {
                h.one = (slot, i);
                0
            }
            2 => {
                let r = &mut self.rec[l];
                debug_assert!(r.shared.is_empty());
                r.shared.push(h.one);
                r.shared.push((slot, i));
                self.shared_bits[l >> 6] |= 1 << (l & 63);
                // The integer sum the running one would hold (kept weights are read only where
                // every multiplicity is an integer).
                r.weight = one_mult + mult;
                1
            }
            _ => {
                let r = &mut self.rec[l];
                r.weight += mult;
                r.shared.push((slot, i));
                (r.shared.len() - 1) as u32
            }
        }
    }

    /// Unlists the entry at `pos` of link `l` (carried `mult` times) by swap-remove; returns the
    /// entry moved into `pos`, whose back-pointer the caller updates.
    #[inline]
    fn remove(&mut self, l: usize, pos: u32, mult: f64) -> Option<(u32, u32)> {
        let h = &mut self.hot[l];
        h.len -= 1;
        if h.len == 0 {
            return None;
        }
        let r = &mut self.rec[l];
        r.weight -= mult;
        r.shared.swap_remove(pos as usize);
        let moved = r.shared.get(pos as usize).copied();
        if h.len == 1 {
            h.one = r.shared[0];
            r.shared.clear();
            r.weight = 0.0;
            self.shared_bits[l >> 6] &= !(1 << (l & 63));
        }
        moved
    }
}

/// A flow's links, inline up to six (a route across a three-tier fat-tree), for the same
/// reason: a departure updates the back-pointer of the flow moved in each of its links' lists,
/// and the component search and the filling read every collected flow's path (on the k=60
/// fat-tree, a spilled path's heap block was a cache miss of its own per flow).
type FlowPath = SmallVec<[PathEntry; 6]>;

/// `(time_ps, transfer id, slot)`: earliest first, ties by transfer id.
type TimedSlot = Reverse<(u64, u64, u32)>;
/// `(time_ps, transfer id, slot, version)`.
type DrainEvent = Reverse<(u64, u64, u32, u32)>;

/// Lanes a [`SlotQueue`] keeps a FIFO queue of its own for; the entries of further ones go to
/// its heap.
const SLOT_LANES: usize = 8;

/// One lane's entries `(time_ps, transfer id, slot)`, in time order.
type SlotLane = std::collections::VecDeque<(u64, u64, u32)>;

/// Flow slots queued for a time, `(time_ps, transfer id, slot)`, taken earliest first, ties by
/// transfer id, as one heap of them would give them: the arrivals (one lane) and the drained
/// flows waiting for their last byte to propagate (a lane per route latency). The engine
/// submits at the time it is at, and a drained flow is delivered at the network's time plus its
/// route's latency; neither time falls, so each lane's entries come in time order (a FIFO
/// queue, no heap sift per transfer) and only the lanes' heads are candidates. An entry earlier
/// than its lane's last, and a lane past [`SLOT_LANES`], go to a heap.
#[derive(Default)]
struct SlotQueue {
    /// `(lane, its queue)`.
    lanes: Vec<(u64, SlotLane)>,
    heap: BinaryHeap<TimedSlot>,
    /// The earliest time queued (`u64::MAX`: none).
    first: u64,
    len: usize,
}

impl SlotQueue {
    fn new() -> Self {
        SlotQueue {
            first: u64::MAX,
            ..SlotQueue::default()
        }
    }

    /// Queues flow `slot` (transfer `id`) at `at` in lane `lane` (for a delivery, the route's
    /// latency).
    #[inline]
    fn push(&mut self, at: u64, lane: u64, id: u64, slot: u32) {
        self.len += 1;
        self.first = self.first.min(at);
        match self.lanes.iter().position(|l| l.0 == lane) {
            Some(i) if self.lanes[i].1.back().is_none_or(|b| b.0 <= at) => self.lanes[i].1.push_back((at, id, slot)),
            None if self.lanes.len() < SLOT_LANES => {
                let mut q = SlotLane::new();
                q.push_back((at, id, slot));
                self.lanes.push((lane, q));
            }
            _ => self.heap.push(Reverse((at, id, slot))),
        }
    }

    /// The earliest time queued.
    #[inline]
    fn peek_time(&self) -> Option<u64> {
        (self.len > 0).then_some(self.first)
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Appends every entry at `t` (the earliest time queued) to `out` as `(transfer id, slot)`,
    /// by id.
    fn take_at(&mut self, t: u64, out: &mut Vec<(u64, u32)>) {
        debug_assert_eq!(self.peek_time(), Some(t));
        let from = out.len();
        let mut first = u64::MAX;
        for (_, q) in &mut self.lanes {
            while let Some(&(at, id, slot)) = q.front() {
                if at != t {
                    first = first.min(at);
                    break;
                }
                q.pop_front();
                out.push((id, slot));
            }
        }
        while let Some(&Reverse((at, id, slot))) = self.heap.peek() {
            if at != t {
                first = first.min(at);
                break;
            }
            self.heap.pop();
            out.push((id, slot));
        }
        self.len -= out.len() - from;
        self.first = first;
        out[from..].sort_unstable();
    }
}

/// Buffers of the max-min computation, indexed by link or flow slot; reused across events.
#[derive(Default)]
struct RateScratch {
    epoch: u32,
    flow_mark: Vec<u32>,
    dirty: Vec<u32>,
    bfs: Vec<u32>,
    comp_links: Vec<u32>,
    comp_flows: Vec<u32>,
    rem: Vec<f64>,
    /// Per link: the multiplicities of its unfrozen flows, summed, and how many those are (the
    /// sum of fractional shares need not come back to exactly 0).
    weight: Vec<f64>,
    open: Vec<u32>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// The filling's first keys, sorted ([`RateScratch::fill`]).
    initial: Vec<(u64, u32)>,
    /// Put the first keys into the heap too, one push each (the plain loop, for tests of the
    /// sorted merge).
    one_heap: bool,
    new_rate: Vec<f64>,
    /// The keys `(share bits, link)` of the collected flows' tightest links that no other flow
    /// holds, sorted: built by [`Self::fill`] only once its next key could reach them.
    private: Vec<(u64, u32)>,
    /// A lower bound of the collected flows' private keys, from the last collection: the least
    /// lone-flow rate ([`Flow::solo_rate`], the least `cap / mult` over a flow's route).
    private_floor: f64,
    /// The traffic classes of a component, highest first (strict-priority filling).
    classes: Vec<u8>,
    /// Every multiplicity is an integer (one path per flow, not spread): [`LinkRec::weight`] is
    /// the exact sum of a link's multiplicities.
    integer_mults: bool,
    /// Put every link into the filling heap, not just each flow's tightest private one (the
    /// plain progressive filling, for tests of the fast path).
    plain: bool,
    /// Per flow slot: when the last filling froze it (a global counter), so that a resumed
    /// filling replays the freezes below its level in the order a full one makes them.
    seq: Vec<u64>,
    next_seq: u64,
    /// `(freeze order, multiplicity, rate)` of one link's flows frozen below the resume level,
    /// sorted by `(rate, freeze order)`: on a link, freeze order never has a rate fall (a
    /// filling freezes in ascending share and refills every flow above its level), so this is
    /// freeze order, and it stays so after the local filling, which moves keys without
    /// renumbering.
    prefix: Vec<(u64, f64, f64)>,
    /// Per flow slot: its current rate (`Flow::rate_bps`), packed for the resumed search,
    /// which tests the rate of every flow on the links it visits.
    rate: Vec<f64>,
    /// Per flow slot: the link whose saturation froze it in the filling that set its rate. With
    /// the rate it makes the flow's *freeze key* `(rate bits, link)`: the order in which a
    /// filling without rounding dips freezes flows ([`Self::walk`]).
    bott: Vec<u32>,
    /// Per flow slot: the link [`Self::freeze`] froze it at, in the filling now running.
    bott_new: Vec<u32>,
    /// Per link: the level from which its walk over its flows' freeze keys is not safe
    /// ([`Self::walk`]), `NEG_INFINITY` where it is safe throughout; the unsafe links, and each
    /// link's index among them (`u32::MAX`: safe). The local filling runs only below the level
    /// at which the fillings of the components would resume, and only above every unsafe one.
    link_dip: Vec<f64>,
    unsafe_links: Vec<u32>,
    unsafe_pos: Vec<u32>,
    /// The local filling's ([`Self::local_fill`]) epoch; per flow: marked changed, and its new
    /// freeze key ([`UNFROZEN`] while not yet frozen); per link: marked changed, fired, the
    /// key it fired at, its pending candidate key.
    lepoch: u32,
    dev_mark: Vec<u32>,
    dev_key: Vec<(u64, u32)>,
    dev_flows: Vec<u32>,
    dev_links: Vec<u32>,
    ldev: Vec<u32>,
    lfired: Vec<u32>,
    lfired_bits: Vec<u64>,
    lcand: Vec<u64>,
    /// `(share bits, link, 0: the link saturates | 1: check flow, flow)`, earliest first.
    lheap: BinaryHeap<Reverse<(u64, u32, u8, u32)>>,
    walk_keys: Vec<(u64, u32)>,
    /// Links whose walk may have changed since they were last walked (walked again before the
    /// next local filling: [`FlowNetwork::walk_stale`]), and a mark per link: listed.
    stale: Vec<u32>,
    stale_mark: Vec<bool>,
    /// Every link's walk may be stale (none is marked): the next local filling walks every
    /// link first. So while no component is large, the default keeps no walks at all.
    stale_all: bool,
    /// The automatic trigger of the local filling ([`FlowNetwork::recompute`]): per link, the
    /// generation in which a filling of a component through it last collected
    /// [`LOCAL_MIN_FLOWS`] flows or more (0: never, or a smaller one since); the current
    /// generation (from 2; one per `gen_len` recomputations), the recomputations left in it,
    /// and the last generation any link was so. A link counts as large in the generation it was
    /// marked and the next.
    big: Vec<u32>,
    generation: u32,
    gen_left: u32,
    gen_len: u32,
    last_big: u32,
    /// The automatic trigger's cost rule ([`Self::weigh_local`]): the flows a large component
    /// filling collects (a running mean over the large ones), the backoff (triggered
    /// recomputations) after the last local filling that cost more than that, and the triggered
    /// recomputations left to fill by components before the next try.
    big_flows: usize,
    local_backoff: u32,
    local_skip: u32,
    /// Flows visited by the local filling's walks, against [`LOCAL_BUDGET`] and for the cost
    /// rule.
    local_work: usize,
    /// The bits of the level the fillings of the components would resume at: the local filling
    /// moves no key below it.
    local_floor: u64,
}

/// A flow of the local filling that lost its old freeze and is not frozen again yet.
const UNFROZEN: (u64, u32) = (u64::MAX, u32::MAX);
/// The local filling gives up past this many flow visits (a filling of the component is then
/// cheaper).
const LOCAL_BUDGET: usize = 1 << 16;
/// The automatic trigger's component size: a recomputation tries the local filling where a
/// dirty link's last component filling collected this many flows or more. On the 16k-GPU Llama
/// run no resumed filling collects more than 255 flows, and there the local filling's walks
/// cost more than the small fillings; late in the k=60 fat-tree run one collects ~4,000
/// (bench/README.md, issue 29).
const LOCAL_MIN_FLOWS: usize = 512;
/// Recomputations in one generation of the trigger: a link counts as large for one to two
/// generations after a large component filling through it (so that where fillings became
/// small, or the local filling took over and no component is filled, it is tried again
/// by a component filling's size).
const LOCAL_GENERATION: u32 = 1 << 16;
/// The longest backoff of the automatic trigger's cost rule ([`RateScratch::weigh_local`]), in
/// triggered recomputations: a run where the local filling costs more than the component
/// fillings tries it once per this many (one try costs ~40 component fillings there).
const LOCAL_MAX_BACKOFF: u32 = 1 << 10;

/// When [`FlowNetwork::recompute`] tries the local filling ([`RateScratch::local_fill`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LocalMode {
    /// Where a dirty link's last component filling collected at least the threshold (flows).
    Auto(usize),
    /// At every recomputation it may run at (`LLMSIM_FLOW_LOCAL=1`).
    Always,
    /// Never (`LLMSIM_FLOW_LOCAL=0`); link walks are not kept.
    Never,
}

impl RateScratch {
    fn next_epoch(&mut self, links: &LinkTable) -> u32 {
        if self.epoch == u32::MAX {
            links.rec.iter().for_each(|l| l.mark.set(0));
            self.flow_mark.fill(0);
            self.epoch = 0;
        }
        self.epoch += 1;
        self.epoch
    }

    /// Collects into `comp_flows` the component reachable from link `start`, and into
    /// `comp_links` its shared links (two or more flows). A link that only one flow holds
    /// joins nothing; of those, each flow keeps only its tightest (`private` below).
    fn collect_component(&mut self, start: u32, flows: &[Flow], links: &LinkTable) {
        let epoch = self.epoch;
        self.comp_links.clear();
        self.comp_flows.clear();
        self.private_floor = f64::INFINITY;
        links[start as usize].mark.set(epoch);
        self.bfs.push(start);
        while let Some(l) = self.bfs.pop() {
            let on = links.on(l as usize);
            if on.len() > 1 || self.plain {
                self.comp_links.push(l);
            }
            for &(f, _) in on {
                if self.flow_mark[f as usize] == epoch {
                    continue;
                }
                self.flow_mark[f as usize] = epoch;
                self.comp_flows.push(f);
                let flow = &flows[f as usize];
                self.private_floor = self.private_floor.min(flow.solo_rate);
                for e in &flow.path {
                    let el = e.link as usize;
                    if (links.shared(el) || self.plain) && links[el].mark.get() != epoch {
                        links[el].mark.set(epoch);
                        self.bfs.push(e.link);
                    }
                }
            }
        }
    }

    /// [`Self::collect_component`] for a filling resumed at level `r_min`: collects only the
    /// flows whose rate is `r_min` or more (those below keep their rates, see
    /// [`FlowNetwork::recompute`]), reached from link `start` over shared links through such
    /// flows, into `comp_flows`, and into `comp_links` the shared links they cross.
    fn collect_resumed(&mut self, start: u32, r_min: f64, flows: &[Flow], links: &LinkTable) {
        let epoch = self.epoch;
        self.comp_links.clear();
        self.comp_flows.clear();
        self.private_floor = f64::INFINITY;
        links[start as usize].mark.set(epoch);
        self.bfs.push(start);
        while let Some(l) = self.bfs.pop() {
            let on = links.on(l as usize);
            if on.len() > 1 {
                self.comp_links.push(l);
            }
            for &(f, _) in on {
                if self.flow_mark[f as usize] == epoch || self.rate[f as usize] < r_min {
                    continue;
                }
                self.flow_mark[f as usize] = epoch;
                self.comp_flows.push(f);
                let flow = &flows[f as usize];
                self.private_floor = self.private_floor.min(flow.solo_rate);
                for e in &flow.path {
                    let el = e.link as usize;
                    if links.shared(el) && links[el].mark.get() != epoch {
                        links[el].mark.set(epoch);
                        self.bfs.push(e.link);
                    }
                }
            }
        }
    }

    /// The level below which the flows `arrived` (now on their links, rate `INFINITY` in
    /// `rate`) change no rate, for a filling resumed there (with the departures' level
    /// `r_drained`, `INFINITY` if none); `None` where that cannot be shown on the floats.
    ///
    /// An arrival only adds weight to its links; every other link starts a full filling of the
    /// new state with the remaining capacity and weight it had. Walk an arrival's link `e`
    /// through its other flows in the order the last fillings froze them (`seq`, in which their
    /// rates do not fall): its share starts at `cap / weight` and, while the next flow's rate
    /// is below it, that flow freezes first and the share rises to `(rem - m r) / (w - m)`. Where
    /// the next rate is not below it, `e` saturates: its level `L_e`. Below `R = min L_e` a full
    /// filling of the new state pops the same links as the last one, in the same order (an
    /// arrival's link re-enters the heap at its risen share each time it is popped), and
    /// freezes the same flows at the same rates and in the same order. So every flow below `R`
    /// keeps its rate, as below a departure's rate.
    ///
    /// On the floats a share can fall by rounding, and a heap key can sit a rounding above its
    /// flow's rate. So the walk goes on only while the next rate is a relative
    /// [`ARRIVAL_MARGIN`] below the share and the share strictly rises, the level is `R` less
    /// that margin, and each arrival's link is replayed over exactly the flows below the level
    /// (as the full filling takes them off, in freeze order): each must be a margin below the
    /// share it freezes under and raise it, and the last share must end above the level by
    /// half the margin; otherwise `None` (the caller fills the components in full).
    fn arrival_level(&mut self, arrived: &[u32], r_drained: f64, flows: &[Flow], links: &LinkTable) -> Option<f64> {
        let integer = self.integer_mults;
        let weight = |li: usize| link_weight(integer, li, flows, links);
        let below = 1.0 - ARRIVAL_MARGIN;
        let mut first = f64::INFINITY;
        for &a in arrived {
            for e in &flows[a as usize].path {
                let li = e.link as usize;
                let on = links.on(li);
                let (mut rem, mut w) = (links.cap_of(li), weight(li));
                let mut share = rem / w;
                if on.len() > 1 {
                    self.prefix.clear();
                    for &(f, i) in on {
                        let r = self.rate[f as usize];
                        if r.is_finite() {
                            self.prefix.push((self.seq[f as usize], flows[f as usize].path[i as usize].mult, r));
                        }
                    }
                    self.prefix.sort_unstable_by_key(|p| (p.2.to_bits(), p.0));
                    for &(_, m, r) in &self.prefix {
                        let next = (rem - m * r).max(0.0) / (w - m);
                        if !(lt(r, share * below) && lt(share, next)) {
                            break;
                        }
                        (rem, w, share) = (rem - m * r, w - m, next);
                    }
                }
                first = first.min(share);
            }
        }
        let r_min = r_drained.min(first * below);
        for &a in arrived {
            for e in &flows[a as usize].path {
                let li = e.link as usize;
                let on = links.on(li);
                if on.len() < 2 {
                    continue;
                }
                self.prefix.clear();
                for &(f, i) in on {
                    let r = self.rate[f as usize];
                    if r < r_min {
                        self.prefix.push((self.seq[f as usize], flows[f as usize].path[i as usize].mult, r));
                    }
                }
                if self.prefix.is_empty() {
                    continue;
                }
                self.prefix.sort_unstable_by_key(|p| (p.2.to_bits(), p.0));
                let (mut rem, mut w) = (links.cap_of(li), weight(li));
                let mut share = rem / w;
                for &(_, m, r) in &self.prefix {
                    rem -= m * r;
                    w -= m;
                    let next = rem.max(0.0) / w;
                    if !(lt(r, share * below) && lt(share, next)) {
                        return None;
                    }
                    share = next;
                }
                if !lt(r_min, share * (1.0 - 0.5 * ARRIVAL_MARGIN)) {
                    return None;
                }
            }
        }
        Some(r_min)
    }

    /// Progressive filling over the flows [`Self::collect_resumed`] collected, from the state a
    /// full filling reaches once it has frozen every flow below `r_min`: each shared link's
    /// remaining capacity and unfrozen weight are its capacity and weight less those flows',
    /// taken off in the order the fillings that set their rates froze them.
    fn water_fill_resumed(&mut self, r_min: f64, flows: &[Flow], links: &LinkTable) {
        self.initial.clear();
        let mut level = 0.0f64;
        for &l in &self.comp_links {
            let li = l as usize;
            let on = links.on(li);
            let mut w = link_weight(self.integer_mults, li, flows, links);
            self.prefix.clear();
            for &(f, i) in on {
                let r = self.rate[f as usize];
                if r < r_min {
                    self.prefix.push((self.seq[f as usize], flows[f as usize].path[i as usize].mult, r));
                }
            }
            self.prefix.sort_unstable_by_key(|p| (p.2.to_bits(), p.0));
            let mut rem = links.cap_of(li);
            for &(_, m, r) in &self.prefix {
                rem -= m * r;
                w -= m;
                level = level.max(r);
            }
            self.rem[li] = rem;
            self.weight[li] = w;
            self.open[li] = (on.len() - self.prefix.len()) as u32;
            if self.open[li] > 0 {
                self.initial.push(((rem.max(0.0) / w).to_bits(), l));
            }
        }
        self.fill(flows, links, level);
    }

    /// Progressive filling over the collected component; leaves rates in `new_rate`.
    ///
    /// The heap holds one entry per unsaturated link, keyed by its share when pushed. Shares only
    /// rise as flows freeze, so a key is a lower bound: a popped link whose share has risen since
    /// is pushed back with its current share (lazy increase-key), and the heap never holds more
    /// entries than links.
    ///
    /// A link only one flow holds never changes share before that flow freezes, and only the
    /// first of a flow's such links to pop can freeze it; so the heap holds, per flow, just its
    /// tightest one, keyed as the others would be. The pops that freeze flows are the same, in
    /// the same order, as with every link in the heap: the rates are bit-identical.
    fn water_fill(&mut self, flows: &[Flow], links: &LinkTable) {
        self.initial.clear();
        for &l in &self.comp_links {
            let li = l as usize;
            let w = link_weight(self.integer_mults, li, flows, links);
            self.rem[li] = links.cap_of(li);
            self.weight[li] = w;
            self.open[li] = links.on(li).len() as u32;
            self.initial.push(((links.cap_of(li) / w).to_bits(), l));
        }
        self.fill(flows, links, 0.0);
    }

    /// The filling loop of [`Self::water_fill`] from the links in `initial`, the collected
    /// flows' private links, and `level`.
    ///
    /// Every key but the pushed-back ones is known before the first pop: those are sorted once
    /// and merged with a heap of the pushed-back ones, which pops the same entries in the same
    /// order as one heap of all of them (the smallest entry left, each time), at the cost of a
    /// sort instead of a heap pop per entry.
    ///
    /// The private links' keys join the merge only once its next key reaches
    /// [`Self::private_floor`] (below it none can be next), and only those of flows not frozen
    /// by then (a frozen flow's private entry freezes nothing); the loop ends once every
    /// collected flow is frozen (what would be left pops without effect). Where every link has
    /// one speed, as on the 16k-GPU Llama run, a shared link saturates below every private
    /// key, so the private keys are never built (bench/README.md, branch `flow29i`).
    fn fill(&mut self, flows: &[Flow], links: &LinkTable, level: f64) {
        for &f in &self.comp_flows {
            self.new_rate[f as usize] = -1.0;
        }
        self.heap.clear();
        if self.one_heap {
            self.heap.extend(self.initial.drain(..).map(Reverse));
        }
        self.initial.sort_unstable();
        self.private.clear();
        let mut privates_built = false;
        let floor = self.private_floor.to_bits();
        let mut next_initial = 0;
        let mut next_private = 0;
        let mut unfrozen = self.comp_flows.len();
        // `level` absorbs float noise: the share of a later bottleneck is never below it.
        let mut level = level;
        while unfrozen > 0 {
            let a = self.initial.get(next_initial).copied();
            let b = self.heap.peek().map(|&Reverse(b)| b);
            if !privates_built {
                let next = match (a, b) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (x, None) => x,
                    (None, y) => y,
                };
                if next.is_none_or(|k| k.0 >= floor) {
                    privates_built = true;
                    self.build_privates(flows, links);
                    continue;
                }
            }
            let p = self.private.get(next_private).copied();
            // The smallest of the three (the entries are distinct: a link is private or shared).
            let (key, l) = match (a, b, p) {
                (a, Some(b), p) if a.is_none_or(|a| b < a) && p.is_none_or(|p| b < p) => {
                    self.heap.pop();
                    b
                }
                (Some(a), _, p) if p.is_none_or(|p| a < p) => {
                    next_initial += 1;
                    a
                }
                (_, _, Some(p)) => {
                    next_private += 1;
                    p
                }
                _ => break,
            };
            let li = l as usize;
            if let [(f, _)] = links.on(li)[..] {
                // A flow's own link: its share is its key until the flow freezes.
                let fi = f as usize;
                if self.new_rate[fi] >= 0.0 {
                    continue;
                }
                let share = f64::from_bits(key).max(level);
                level = share;
                self.freeze(fi, share, l, flows, links);
                unfrozen -= 1;
                continue;
            }
            if self.open[li] == 0 {
                continue;
            }
            let current = self.rem[li].max(0.0) / self.weight[li];
            if current > f64::from_bits(key) {
                self.heap.push(Reverse((current.to_bits(), l)));
                continue;
            }
            let share = current.max(level);
            level = share;
            for &(f, _) in links.on(li) {
                let fi = f as usize;
                if self.new_rate[fi] >= 0.0 {
                    continue;
                }
                self.freeze(fi, share, l, flows, links);
                unfrozen -= 1;
            }
        }
    }

    /// The private keys of the collected flows not frozen yet: each flow's tightest link that no
    /// other flow holds, keyed as the plain filling keys a link, `(share, link id)`; sorted into
    /// `private` (into the heap under `one_heap`).
    fn build_privates(&mut self, flows: &[Flow], links: &LinkTable) {
        if self.plain {
            return;
        }
        for &f in &self.comp_flows {
            if self.new_rate[f as usize] >= 0.0 {
                continue;
            }
            let mut private = (f64::INFINITY, u32::MAX);
            for e in &flows[f as usize].path {
                let el = e.link as usize;
                if !links.shared(el) {
                    let key = (links.cap_of(el) / e.mult, e.link);
                    if key.0.to_bits() < private.0.to_bits() || (key.0.to_bits() == private.0.to_bits() && key.1 < private.1) {
                        private = key;
                    }
                }
            }
            if private.1 != u32::MAX {
                debug_assert!(private.0.to_bits() >= self.private_floor.to_bits());
                self.private.push((private.0.to_bits(), private.1));
            }
        }
        if self.one_heap {
            self.heap.extend(self.private.drain(..).map(Reverse));
        } else {
            self.private.sort_unstable();
        }
    }

    /// Strict-priority max-min over the collected component (flows of several traffic
    /// classes): the highest class is filled first on the full link capacities, each lower
    /// class then max-min on what the classes above left; leaves rates in `new_rate`.
    fn water_fill_prio(&mut self, flows: &[Flow], links: &LinkTable) {
        self.classes.clear();
        for &f in &self.comp_flows {
            let fl = &flows[f as usize];
            self.new_rate[f as usize] = -1.0;
            self.classes.push(fl.priority);
            for e in &fl.path {
                self.rem[e.link as usize] = links.cap_of(e.link as usize);
            }
        }
        self.classes.sort_unstable_by(|a, b| b.cmp(a));
        self.classes.dedup();
        for ci in 0..self.classes.len() {
            let class = self.classes[ci];
            let of_class = |f: u32| flows[f as usize].priority == class;
            for &f in self.comp_flows.iter().filter(|f| of_class(**f)) {
                for e in &flows[f as usize].path {
                    self.weight[e.link as usize] = 0.0;
                    self.open[e.link as usize] = 0;
                }
            }
            for &f in self.comp_flows.iter().filter(|f| of_class(**f)) {
                for e in &flows[f as usize].path {
                    self.weight[e.link as usize] += e.mult;
                    self.open[e.link as usize] += 1;
                }
            }
            self.heap.clear();
            for &f in self.comp_flows.iter().filter(|f| of_class(**f)) {
                for e in &flows[f as usize].path {
                    let li = e.link as usize;
                    self.heap
                        .push(Reverse(((self.rem[li].max(0.0) / self.weight[li]).to_bits(), e.link)));
                }
            }
            let mut level = 0.0f64;
            while let Some(Reverse((key, l))) = self.heap.pop() {
                let li = l as usize;
                if self.open[li] == 0 {
                    continue;
                }
                let current = self.rem[li].max(0.0) / self.weight[li];
                if current > f64::from_bits(key) {
                    self.heap.push(Reverse((current.to_bits(), l)));
                    continue;
                }
                let share = current.max(level);
                level = share;
                for &(f, _) in links.on(li) {
                    let fi = f as usize;
                    if self.new_rate[fi] >= 0.0 || flows[fi].priority != class {
                        continue;
                    }
                    self.new_rate[fi] = share;
                    for e in &flows[fi].path {
                        let el = e.link as usize;
                        self.rem[el] -= e.mult * share;
                        self.weight[el] -= e.mult;
                        self.open[el] -= 1;
                    }
                }
            }
        }
    }

    /// Flow `f`'s freeze key for the local filling: its new one where the filling changed it,
    /// else `(rate bits, link that froze it)`.
    #[inline]
    fn eff_key(&self, f: u32) -> (u64, u32) {
        let fi = f as usize;
        if self.dev_mark[fi] == self.lepoch {
            self.dev_key[fi]
        } else {
            (self.rate[fi].to_bits(), self.bott[fi])
        }
    }

    /// Link `l` alone in a filling without rounding dips, its flows freezing elsewhere at their
    /// keys ([`Self::eff_key`]): its share starts at `cap / flows`; while the next key in
    /// ascending order is below `(share, l)`, that flow is taken off (`rem -= rate`, one less
    /// flow) and the share is taken again. `Ok(Some(share))`: the link saturates at `(share,
    /// l)`; `Ok(None)`: every flow freezes elsewhere first.
    ///
    /// `Err(level)`: the walk is not safe up to `level`: a share that falls as a flow of rate
    /// `level` is taken off (a rounding dip: a filling's heap key could then sit above the
    /// share, which [`Self::fill`] resolves by its running level, a global quantity); with
    /// `last`, flows left at saturation whose key is not `(share, l)` (the keys are not this
    /// link's filling: a dip the filling resolved so), up to the highest of their rates; a
    /// multiplicity other than 1 (subtraction order would matter among equal rates):
    /// `INFINITY`. With `trace`, the highest such level over the whole walk; without, the
    /// first. A filling resumed above the level subtracts the flows up to it as its prefix and
    /// sees only the safe rest of the walk.
    ///
    /// With multiplicities 1, [`Self::fill`] (full, or resumed below every unsafe level)
    /// saturates the link that is the minimum of `(share, link)` each time (its heap keys are
    /// lower bounds met with equality when popped), and subtracts rates from a link's remaining
    /// capacity in ascending order (a filling freezes in ascending share; a resumed one replays
    /// the prefix in the same order): so a link's saturation depends only on its own flows'
    /// keys, and the filling's result is the one assignment of keys above its resume level in
    /// which every link's walk is consistent.
    fn walk(&mut self, l: u32, last: bool, trace: bool, flows: &[Flow], links: &LinkTable) -> Result<Option<f64>, f64> {
        let li = l as usize;
        let on = links.on(li);
        self.walk_keys.clear();
        for &(f, i) in on {
            if flows[f as usize].path[i as usize].mult != 1.0 {
                return Err(f64::INFINITY);
            }
            let k = self.eff_key(f);
            self.walk_keys.push(k);
        }
        self.local_work += on.len();
        self.walk_keys.sort_unstable();
        let n = self.walk_keys.len();
        let (mut rem, mut w) = (links.cap_of(li), n as f64);
        let mut share = rem / w;
        let mut dip = f64::NEG_INFINITY;
        let mut i = 0;
        while i < n {
            let k = self.walk_keys[i];
            if k >= (share.to_bits(), l) {
                break;
            }
            let rate = f64::from_bits(k.0);
            rem -= rate;
            w -= 1.0;
            i += 1;
            if i == n {
                break;
            }
            let mut next = rem.max(0.0) / w;
            if rate.to_bits() == share.to_bits() && next < share {
                // A flow frozen at this link's share by a link of lower id (a tie): the filling
                // pops this link at its key `share` right after, its running level at `share`,
                // so it saturates at `share` however its remaining capacity rounds.
                next = share;
            }
            // A fall, or NaN (fails safe).
            let rises = matches!(
                next.partial_cmp(&share),
                Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
            );
            if !rises || next.is_sign_negative() {
                if !trace {
                    return Err(rate);
                }
                dip = dip.max(rate);
            }
            share = next;
        }
        if i == n {
            return if dip > f64::NEG_INFINITY { Err(dip) } else { Ok(None) };
        }
        if last && self.walk_keys[i..].iter().any(|&k| k != (share.to_bits(), l)) {
            // Unsafe up to the highest rate it leaves (a filling resumed above it replays them).
            let top = self.walk_keys[i..].iter().map(|k| f64::from_bits(k.0)).fold(share, f64::max);
            return Err(dip.max(top));
        }
        if dip > f64::NEG_INFINITY { Err(dip) } else { Ok(Some(share)) }
    }

    /// Walks link `l` again in the local filling and queues its saturation; `false` where it
    /// would saturate before the filling's current point `at` or cannot be walked.
    fn local_queue(&mut self, l: u32, at: (u64, u32, u8), flows: &[Flow], links: &LinkTable) -> bool {
        let li = l as usize;
        match self.walk(l, false, false, flows, links) {
            Err(_) => false,
            Ok(None) => {
                self.lcand[li] = u64::MAX;
                true
            }
            Ok(Some(share)) => {
                let bits = share.to_bits();
                if (bits, l, 0) < at || bits < self.local_floor {
                    return false;
                }
                if self.lcand[li] != bits {
                    self.lcand[li] = bits;
                    self.lheap.push(Reverse((bits, l, 0, 0)));
                }
                true
            }
        }
    }

    /// Marks link `l` changed in the local filling (its flows frozen there are checked at their
    /// old keys) and queues it; `false` as [`Self::local_queue`], or where `l` has saturated
    /// already in this filling.
    fn local_touch(&mut self, l: u32, at: (u64, u32, u8), flows: &[Flow], links: &LinkTable) -> bool {
        let li = l as usize;
        let ep = self.lepoch;
        if self.ldev[li] == ep {
            return self.lfired[li] != ep && self.local_queue(l, at, flows, links);
        }
        self.ldev[li] = ep;
        self.lcand[li] = u64::MAX;
        self.dev_links.push(l);
        for &(g, _) in links.on(li) {
            let gi = g as usize;
            if self.dev_mark[gi] != ep && self.bott[gi] == l {
                let item = (self.rate[gi].to_bits(), l, 1);
                if item < at || item.0 < self.local_floor {
                    return false;
                }
                self.lheap.push(Reverse((item.0, l, 1, g)));
            }
        }
        self.local_queue(l, at, flows, links)
    }

    /// Marks flow `f` changed and not frozen, and every link of it changed.
    fn local_unfreeze(&mut self, f: u32, at: (u64, u32, u8), flows: &[Flow], links: &LinkTable) -> bool {
        let fi = f as usize;
        if self.dev_mark[fi] != self.lepoch {
            self.dev_mark[fi] = self.lepoch;
            self.dev_flows.push(f);
        }
        self.dev_key[fi] = UNFROZEN;
        for e in &flows[fi].path {
            if !self.local_touch(e.link, at, flows, links) {
                return false;
            }
        }
        true
    }

    /// The local filling: the rates a filling of the components would give after the arrivals
    /// `arrived` and the changes of the links in `dirty`, found by visiting only what moves.
    ///
    /// The caller runs it only where the fillings of the components would resume at `r_min` and
    /// every link is safe above `r_min` ([`Self::walk`]): such a filling's result above `r_min`
    /// is then the one in which every link's walk is consistent, and a link's saturation
    /// changes only if its flow set changed or one of its flows freezes at another key. The filling runs over keys in ascending order with only such links in its queue:
    /// the dirty links; a link saturating freezes its flows not yet frozen at its key, and a
    /// flow whose key so changes marks its links; a flow whose old freezing link changed is
    /// checked at its old key, and if that link has not saturated there, it is unfrozen and
    /// marks its links. The other links saturate as before and need no visit. No key below
    /// `r_min` may move. At the end every changed link is walked with the final keys: each must
    /// be consistent and safe throughout, which makes the keys the filling's. Leaves the changed
    /// flows in `dev_flows` and their keys in `dev_key`; `false` where it gives up (the caller
    /// fills the components; the lockstep property tests check the result against theirs after
    /// every event).
    fn local_fill(&mut self, r_min: f64, arrived: &[u32], flows: &[Flow], links: &LinkTable) -> bool {
        let ep = self.next_lepoch();
        self.local_floor = r_min.to_bits();
        self.dev_flows.clear();
        self.dev_links.clear();
        self.lheap.clear();
        self.local_work = 0;
        let start = (0u64, 0u32, 0u8);
        for &a in arrived {
            self.dev_mark[a as usize] = ep;
            self.dev_key[a as usize] = UNFROZEN;
            self.dev_flows.push(a);
        }
        for i in 0..self.dirty.len() {
            let d = self.dirty[i];
            if !links.on(d as usize).is_empty() && !self.local_touch(d, start, flows, links) {
                return false;
            }
        }
        while let Some(Reverse((bits, l, kind, f))) = self.lheap.pop() {
            if self.local_work > LOCAL_BUDGET {
                return false;
            }
            let at = (bits, l, kind);
            let li = l as usize;
            if kind == 0 {
                if self.lfired[li] == ep || self.lcand[li] != bits {
                    continue;
                }
                self.lfired[li] = ep;
                self.lfired_bits[li] = bits;
                let key = (bits, l);
                for &(g, _) in links.on(li) {
                    let gi = g as usize;
                    let eff = self.eff_key(g);
                    if eff < key || (eff == key && self.dev_mark[gi] != ep) {
                        continue;
                    }
                    if self.dev_mark[gi] != ep {
                        self.dev_mark[gi] = ep;
                        self.dev_flows.push(g);
                    }
                    self.dev_key[gi] = key;
                    for e in &flows[gi].path {
                        if e.link != l && !self.local_touch(e.link, at, flows, links) {
                            return false;
                        }
                    }
                }
            } else {
                let fi = f as usize;
                if self.dev_mark[fi] == ep || (self.lfired[li] == ep && self.lfired_bits[li] == bits) {
                    continue;
                }
                if !self.local_unfreeze(f, at, flows, links) {
                    return false;
                }
            }
        }
        for i in 0..self.dev_flows.len() {
            if self.dev_key[self.dev_flows[i] as usize] == UNFROZEN {
                return false;
            }
        }
        for i in 0..self.dev_links.len() {
            let l = self.dev_links[i];
            if self.walk(l, true, false, flows, links).is_err() {
                return false;
            }
        }
        true
    }

    /// A fresh epoch of the local filling's marks (none of the flows or links is marked in it).
    fn next_lepoch(&mut self) -> u32 {
        self.lepoch = self.lepoch.wrapping_add(1);
        if self.lepoch == 0 {
            self.dev_mark.fill(0);
            self.ldev.fill(0);
            self.lfired.fill(0);
            self.lepoch = 1;
        }
        self.lepoch
    }

    /// Lists link `l` as stale: its walk is taken again before the next local filling.
    #[inline]
    fn mark_stale(&mut self, l: u32) {
        if self.stale_all {
            return;
        }
        let m = &mut self.stale_mark[l as usize];
        if !*m {
            *m = true;
            self.stale.push(l);
        }
    }

    /// Counts a recomputation towards the trigger's generation; where no link counts as large
    /// any more, walks are no longer kept (until a component is large again).
    #[inline]
    fn tick_generation(&mut self) {
        self.gen_left -= 1;
        if self.gen_left == 0 {
            self.gen_left = self.gen_len;
            self.generation += 1;
            if self.last_big + 1 < self.generation {
                self.stale_all = true;
            }
        }
    }

    /// The cost rule's turn: `false` (and one fewer to skip) while a backoff runs.
    #[inline]
    fn local_due(&mut self) -> bool {
        if self.local_skip > 0 {
            self.local_skip -= 1;
            return false;
        }
        true
    }

    /// The automatic trigger's cost rule, after a try: `work` flows visited by the local
    /// filling's walks, `done` where it gave the rates. A try that visited more flows than a
    /// large component filling collects (`big_flows`), or gave up, doubles the backoff (1 to
    /// [`LOCAL_MAX_BACKOFF`] triggered recomputations filled by components before the next
    /// try); a cheaper local filling ends it. Counted work, not time, so the choice is
    /// deterministic; either path gives the same rates to the bit, so the rule changes only
    /// the counters. The two runs it tells apart (bench/README.md, issue 29): late in the k=60
    /// fat-tree a local filling walks ~90 flow entries where a large component filling collects
    /// ~2,700 flows; in the 256-GPU EP32 MoE run (all-to-alls across servers, dozens of flows
    /// on each NIC link, all at one level) a try walks ~42,000 (half of them give up) where a
    /// large filling collects ~1,100 flows: ~30x either side of 1. The stale walks before a try
    /// are not counted: they grow with the component fillings since the last try, so a backoff
    /// would feed itself (a first version that counted them made 243k local fillings instead
    /// of 664k on the k=60 run: 400 s instead of 20 s).
    fn weigh_local(&mut self, work: usize, done: bool) {
        let costly = work > self.big_flows;
        if done && !costly {
            self.local_backoff = 0;
        } else {
            self.local_backoff = (self.local_backoff * 2).clamp(1, LOCAL_MAX_BACKOFF);
            self.local_skip = self.local_backoff;
        }
    }

    /// Some dirty link counts as large ([`Self::big`]).
    #[inline]
    fn dirty_is_big(&self) -> bool {
        let g = self.generation;
        self.last_big + 1 >= g && self.dirty.iter().any(|&d| self.big[d as usize] + 1 >= g)
    }

    /// Walks link `l` with the flows' current keys and updates its unsafe level.
    fn retrace_link(&mut self, l: u32, flows: &[Flow], links: &LinkTable) {
        let li = l as usize;
        let dip = if links.on(li).is_empty() {
            f64::NEG_INFINITY
        } else {
            self.walk(l, true, true, flows, links).err().unwrap_or(f64::NEG_INFINITY)
        };
        self.set_link_dip(l, dip);
    }

    /// Sets link `l`'s unsafe level, keeping `unsafe_links`.
    fn set_link_dip(&mut self, l: u32, dip: f64) {
        let li = l as usize;
        self.link_dip[li] = dip;
        let pos = self.unsafe_pos[li];
        if dip > f64::NEG_INFINITY && pos == u32::MAX {
            self.unsafe_pos[li] = self.unsafe_links.len() as u32;
            self.unsafe_links.push(l);
        } else if dip == f64::NEG_INFINITY && pos != u32::MAX {
            self.unsafe_links.swap_remove(pos as usize);
            if let Some(&moved) = self.unsafe_links.get(pos as usize) {
                self.unsafe_pos[moved as usize] = pos;
            }
            self.unsafe_pos[li] = u32::MAX;
        }
    }

    /// The highest unsafe level of any link (`NEG_INFINITY`: none); `INFINITY` where too many
    /// links are unsafe to look.
    fn max_dip(&self) -> f64 {
        if self.unsafe_links.len() > 64 {
            return f64::INFINITY;
        }
        self.unsafe_links
            .iter()
            .map(|&l| self.link_dip[l as usize])
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// Fixes flow `fi` at `share` and takes it off its shared links.
    #[inline]
    fn freeze(&mut self, fi: usize, share: f64, link: u32, flows: &[Flow], links: &LinkTable) {
        self.new_rate[fi] = share;
        self.bott_new[fi] = link;
        self.seq[fi] = self.next_seq;
        self.next_seq += 1;
        for e in &flows[fi].path {
            let el = e.link as usize;
            if links.shared(el) {
                self.rem[el] -= e.mult * share;
                self.weight[el] -= e.mult;
                self.open[el] -= 1;
            }
        }
    }
}

/// Max-min fair flow-level network.
pub struct FlowNetwork {
    topo: Arc<Topology>,
    now: SimTime,
    flows: Vec<Flow>,
    free: Vec<u32>,
    /// Per link: its flows, search mark and capacity.
    links: LinkTable,
    /// Per link: bytes of the transfers delivered over it; empty when turned off
    /// ([`Network::set_link_bytes`]).
    link_bytes: Vec<Bytes>,
    /// Transfers submitted to start later than `now` (one lane).
    arrivals: SlotQueue,
    /// Transfers submitted to start at the network's time `now_at` (the common case: the engine
    /// submits at the time it is at), as `(transfer id, slot)`: kept out of `arrivals` and
    /// sorted by id when they start, which is the order the heap would give them.
    arrive_now: Vec<(u64, u32)>,
    arrive_now_at: u64,
    /// The arrivals of one step, in activation order.
    arrive_batch: Vec<(u64, u32)>,
    /// Use `arrive_now` (off: every arrival goes through the heap, for tests).
    arrive_lane: bool,
    drains: BinaryHeap<DrainEvent>,
    deliveries: SlotQueue,
    /// The deliveries of one timestamp, by transfer id.
    deliver_batch: Vec<(u64, u32)>,
    active: usize,
    in_flight: IdSet,
    stats: NetStats,
    scratch: RateScratch,
    route_scratch: RouteScratch,
    route: Vec<RouteLink>,
    checks: bool,
    violations: Vec<String>,
    /// Per slot: bumped on every rate change and at drain, never reset when a slot is reused,
    /// so a drain event is live iff its version is the slot's (kept apart from `Flow` so that
    /// the liveness scan of the drain heap touches 4 bytes per event).
    versions: Vec<u32>,
    /// Per slot: `(drain, pending)`: the predicted drain, and the time of the flow's live event
    /// in `drains` (`u64::MAX`: none). A rate change that moves the drain later keeps the
    /// event (one push and pop fewer for every flow slowed by an arrival); popped before the
    /// drain, it is put back at it ([`Self::tidy_drains`], [`Self::step`]).
    drain_times: Vec<(u64, u64)>,
    /// Drain predictions of one recomputation, added to `drains` in one batch (a heap rebuild
    /// when a large component was rerated, instead of one sift per flow).
    new_drains: Vec<DrainEvent>,
    /// Spread each flow evenly over its equal-cost paths (`spray`, `adaptive`).
    spread: bool,
    split_scratch: route::SplitScratch,
    split_route: Vec<(LinkId, f64)>,
    /// Link changes to come: `(time_ps, order, index in change_list)`.
    changes: BinaryHeap<Reverse<(u64, u64, u32)>>,
    change_list: Vec<(LinkId, LinkChange)>,
    /// The first flow a link change left without a route.
    fault_err: Option<NetError>,
    /// Flows submitted and not drained on each link, for choosing among route classes (UGAL on
    /// a dragonfly, [`route::expand_classes`]); empty when the topology offers one class.
    class_load: Vec<u32>,
    /// The traffic class of the transfer being submitted ([`Network::submit_in_class`]).
    next_priority: u8,
    /// A transfer of a class above 0 was submitted: rates are filled class by class.
    priorities: bool,
    /// The lowest rate of the flows drained at this timestamp (`INFINITY`: none), and whether
    /// anything else changed (an arrival, a link change), which needs a full filling.
    drained_min_rate: f64,
    /// A flow drained at this timestamp (its links are dirty besides the arrivals').
    drained_now: bool,
    full_refill: bool,
    /// Resume fillings after departures instead of filling whole components again.
    incremental: bool,
    /// Flows that started holding links at this timestamp, for the resumed filling after
    /// arrivals ([`RateScratch::arrival_level`]).
    arrived: Vec<u32>,
    /// Resume fillings after arrivals too (off: an arrival fills its components in full).
    incremental_arrivals: bool,
    /// When the local filling ([`RateScratch::local_fill`]) is tried. By default where a
    /// changed link's last component filling was large ([`LOCAL_MIN_FLOWS`]): on the 16k-GPU
    /// Llama run, whose component fillings are small, trying it everywhere costs 1.3x the CPU
    /// time; on the k=60 fat-tree it is what lets the run end (bench/README.md, issue 29).
    /// Link walks are kept lazily: stale links are walked before a local filling, and while no
    /// link counts as large none is kept (every link is walked at the next local filling).
    local_mode: LocalMode,
}

impl FlowNetwork {
    /// A flow network over `topo` with no transfers yet.
    pub fn new(topo: Arc<Topology>) -> Self {
        let n = topo.num_links();
        let links = LinkTable::new(&topo);
        let class_load = if topo.route_classes() > 1 { vec![0; n] } else { Vec::new() };
        let scratch = RateScratch {
            rem: vec![0.0; n],
            weight: vec![0.0; n],
            open: vec![0; n],
            link_dip: vec![f64::NEG_INFINITY; n],
            unsafe_pos: vec![u32::MAX; n],
            ldev: vec![0; n],
            lfired: vec![0; n],
            lfired_bits: vec![0; n],
            lcand: vec![u64::MAX; n],
            stale_mark: vec![false; n],
            stale_all: true,
            big: vec![0; n],
            generation: 2,
            gen_left: LOCAL_GENERATION,
            gen_len: LOCAL_GENERATION,
            integer_mults: true,
            ..RateScratch::default()
        };
        FlowNetwork {
            topo,
            now: SimTime::ZERO,
            flows: Vec::new(),
            free: Vec::new(),
            links,
            link_bytes: vec![Bytes::ZERO; n],
            arrivals: SlotQueue::new(),
            arrive_now: Vec::new(),
            arrive_now_at: 0,
            arrive_batch: Vec::new(),
            arrive_lane: true,
            drains: BinaryHeap::new(),
            deliveries: SlotQueue::new(),
            deliver_batch: Vec::new(),
            active: 0,
            in_flight: IdSet::default(),
            stats: NetStats::default(),
            scratch,
            route_scratch: RouteScratch::default(),
            route: Vec::new(),
            checks: false,
            violations: Vec::new(),
            new_drains: Vec::new(),
            versions: Vec::new(),
            drain_times: Vec::new(),
            spread: false,
            split_scratch: route::SplitScratch::default(),
            split_route: Vec::new(),
            changes: BinaryHeap::new(),
            change_list: Vec::new(),
            fault_err: None,
            class_load,
            next_priority: 0,
            priorities: false,
            drained_min_rate: f64::INFINITY,
            drained_now: false,
            full_refill: false,
            incremental: true,
            arrived: Vec::new(),
            // A timing knob (the rates do not change): `LLMSIM_FLOW_FULL_ARRIVALS=1` fills in
            // full after arrivals, as before the resumed filling, for paired runs of one binary.
            incremental_arrivals: std::env::var_os("LLMSIM_FLOW_FULL_ARRIVALS").is_none(),
            // Also timing knobs: `LLMSIM_FLOW_LOCAL=1` tries the local filling at every
            // recomputation, `LLMSIM_FLOW_LOCAL=0` (or the older `LLMSIM_FLOW_NO_LOCAL=1`) never.
            local_mode: match std::env::var_os("LLMSIM_FLOW_LOCAL") {
                _ if std::env::var_os("LLMSIM_FLOW_NO_LOCAL").is_some() => LocalMode::Never,
                Some(v) if v == "1" => LocalMode::Always,
                Some(v) if v == "0" => LocalMode::Never,
                _ => LocalMode::Auto(LOCAL_MIN_FLOWS),
            },
        }
    }

    /// How flows use equal-cost paths. `Spray` and `Adaptive` spread each flow's bytes evenly
    /// over all of them ([`route::expand_split`]): the fluid limit of per-packet spraying, and of
    /// adaptive routing on a symmetric fabric. `Ecmp` and `Flowlet` keep one path per flow, by
    /// its hash (a flowlet's path changes only between bursts, which a fluid flow does not
    /// have). Set it before submitting.
    pub fn set_load_balance(&mut self, lb: LoadBalance) {
        self.spread = matches!(lb, LoadBalance::Spray | LoadBalance::Adaptive);
        // Kept weights only where every multiplicity is an integer (summing the lists is always
        // exact, so a later switch back to one path merely keeps the slower path).
        if self.spread {
            self.scratch.integer_mults = false;
        }
    }

    /// Like [`Network::submit`], but along explicit `path` (links from `t.src` to `t.dst`)
    /// instead of `t.route`: for routing rules the topology does not have.
    ///
    /// # Errors
    /// As `submit`; `NetError::Route` if `path` does not lead from `t.src` to `t.dst`.
    pub fn submit_path(&mut self, t: Transfer, path: &[LinkId]) -> Result<(), NetError> {
        self.check_submit(&t)?;
        let sum =
            route::explicit(&self.topo, t.src, t.dst, path, &mut self.route).map_err(|source| NetError::Route { id: t.id, source })?;
        self.enqueue(t, sum);
        Ok(())
    }

    /// Like [`Network::submit`], but along a route expanded beforehand ([`route::RouteShape`],
    /// computed once for experiments over topologies of one structure): the same flow as
    /// `submit` gives when `links` and `sum` are what [`route::expand`] gives for `t`.
    ///
    /// # Errors
    /// As `submit`.
    pub fn submit_routed(&mut self, t: Transfer, links: &[RouteLink], sum: RouteSummary) -> Result<(), NetError> {
        self.check_submit(&t)?;
        self.route.clear();
        self.route.extend_from_slice(links);
        self.enqueue(t, sum);
        Ok(())
    }

    /// Turns on a check after every rate recomputation: no link carries more than its capacity,
    /// and every active flow has a bottleneck (a saturated link on which no flow is faster) —
    /// the max-min certificate. Failures are recorded in [`Self::violations`]. For tests; it
    /// costs O(active flows) per event.
    pub fn set_rate_checks(&mut self, on: bool) {
        self.checks = on;
    }

    /// Turns off the filling fast path that keeps only each flow's tightest private link in
    /// the heap (the rates must not change: for tests).
    #[doc(hidden)]
    pub fn set_plain_filling(&mut self, on: bool) {
        self.scratch.plain = on;
    }

    /// The reference paths of the compact per-link state, for tests (the rates must not
    /// change): every filling key goes through one heap instead of a sorted merge, and a link's
    /// weight is summed over its flow list instead of read from [`LinkRec::weight`].
    #[doc(hidden)]
    pub fn set_reference_filling(&mut self, on: bool) {
        self.scratch.one_heap = on;
        self.scratch.integer_mults = !on && !self.spread;
    }

    /// Turns off resumed fillings after departures ([`FlowNetwork::recompute`]'s incremental
    /// path): every recomputation fills whole components again (the rates must not change: for
    /// tests and timing comparisons).
    #[doc(hidden)]
    pub fn set_incremental(&mut self, on: bool) {
        self.incremental = on;
    }

    /// Turns off resumed fillings after arrivals ([`RateScratch::arrival_level`]): an arrival
    /// fills its components in full (the rates must not change: for tests and timing
    /// comparisons).
    #[doc(hidden)]
    pub fn set_incremental_arrivals(&mut self, on: bool) {
        self.incremental_arrivals = on;
    }

    /// Turns off the local filling ([`RateScratch::local_fill`]), as `LLMSIM_FLOW_LOCAL=0`
    /// does: recomputations fill the components (resumed or in full) as before; `on` gives the
    /// default back (the rates must not change: for tests and timing comparisons).
    #[doc(hidden)]
    pub fn set_local_filling(&mut self, on: bool) {
        self.local_mode = if on { LocalMode::Auto(LOCAL_MIN_FLOWS) } else { LocalMode::Never };
    }

    /// Tries the local filling at every recomputation it may run at, as `LLMSIM_FLOW_LOCAL=1`
    /// does (the rates must not change: for tests and timing comparisons).
    #[doc(hidden)]
    pub fn set_local_from_start(&mut self) {
        self.local_mode = LocalMode::Always;
    }

    /// Tries the local filling where a dirty link's last component filling collected
    /// `min_flows` flows or more, counting a link as large for one to two generations of
    /// `generation` recomputations (the default's trigger at other sizes: for tests of it).
    #[doc(hidden)]
    pub fn set_local_trigger(&mut self, min_flows: usize, generation: u32) {
        self.local_mode = LocalMode::Auto(min_flows);
        self.scratch.gen_len = generation.max(1);
        self.scratch.gen_left = self.scratch.gen_len;
    }

    /// Turns off the lane that keeps transfers submitted to start at the network's time out of
    /// the arrival heap: every arrival goes through the heap (the completions must not change:
    /// for tests).
    #[doc(hidden)]
    pub fn set_arrival_lane(&mut self, on: bool) {
        self.arrive_lane = on;
    }

    /// What the rate checks found wrong (at most 16 messages).
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Flows holding links now.
    pub fn active_flows(&self) -> usize {
        self.active
    }

    /// `(transfer, rate in bit/s)` of every flow holding links now, in slot order.
    pub fn active_rates(&self) -> impl Iterator<Item = (TransferId, f64)> + '_ {
        self.flows.iter().filter(|f| f.state == State::Active).map(|f| (f.id, f.rate_bps))
    }

    /// Checks every link's allocation against its capacity and every active flow's bottleneck.
    ///
    /// # Errors
    /// A message naming the first link or flow that breaks max-min fairness.
    pub fn check_rates(&self) -> Result<(), String> {
        let n = self.links.count();
        let mut load = vec![0.0f64; n];
        let mut fastest = vec![0.0f64; n];
        for (l, rec) in self.links.rec.iter().enumerate() {
            let len = self.links.len(l) as usize;
            if rec.shared.len() != if len >= 2 { len } else { 0 } || self.links.shared(l) != (len >= 2) {
                return Err(format!(
                    "link {l} counts {len} flows but its record lists {} (shared: {})",
                    rec.shared.len(),
                    self.links.shared(l)
                ));
            }
            if let [(f, i)] = self.links.on(l)
                && self.flows[*f as usize].path[*i as usize].link != l as u32
            {
                return Err(format!("link {l}'s one flow does not hold it"));
            }
            if !self.spread {
                let sum: f64 = rec.shared.iter().map(|&(f, i)| self.flows[f as usize].path[i as usize].mult).sum();
                if len >= 2 && rec.weight != sum {
                    return Err(format!("link {l} keeps weight {} but its flows sum to {sum}", rec.weight));
                }
            }
            let topo_link = self.topo.link(LinkId(l as u32));
            if (rec.bandwidth, rec.latency) != (topo_link.bandwidth, topo_link.latency)
                || self.links.attrs(l) != (rec.bandwidth, rec.latency)
                || rec.cap != rec.bandwidth.bps_f64()
                || self.links.cap_of(l).to_bits() != rec.cap.to_bits()
            {
                return Err(format!("link {l}'s record disagrees with the topology"));
            }
            for &(f, i) in self.links.on(l) {
                let flow = &self.flows[f as usize];
                if flow.state != State::Active {
                    return Err(format!("link {l} lists flow {} which is not active", flow.id));
                }
                load[l] += flow.path[i as usize].mult * flow.rate_bps;
                fastest[l] = fastest[l].max(flow.rate_bps);
            }
            if load[l] > self.links[l].cap * (1.0 + CHECK_TOL) {
                return Err(format!(
                    "link {l} carries {} bit/s over its capacity {} bit/s",
                    load[l], self.links[l].cap
                ));
            }
        }
        if self.priorities {
            return self.check_priority_rates();
        }
        for f in self.flows.iter().filter(|f| f.state == State::Active) {
            if f.rate_bps <= 0.0 {
                return Err(format!("active flow {} has rate {}", f.id, f.rate_bps));
            }
            let has_bottleneck = f.path.iter().any(|e| {
                let l = e.link as usize;
                load[l] >= self.links[l].cap * (1.0 - CHECK_TOL) && f.rate_bps >= fastest[l] * (1.0 - CHECK_TOL)
            });
            if !has_bottleneck {
                return Err(format!("flow {} at {} bit/s has no bottleneck link: not max-min", f.id, f.rate_bps));
            }
        }
        Ok(())
    }

    /// [`Self::check_rates`]' bottleneck test under traffic classes: every active flow has a
    /// link that the flows of its class and above fill, on which no flow of its class is faster
    /// (a flow of a lower class may be starved: rate 0).
    fn check_priority_rates(&self) -> Result<(), String> {
        for f in self.flows.iter().filter(|f| f.state == State::Active) {
            let has_bottleneck = f.path.iter().any(|e| {
                let l = e.link as usize;
                let (mut load, mut fastest) = (0.0f64, 0.0f64);
                for &(g, i) in self.links.on(l) {
                    let g = &self.flows[g as usize];
                    if g.priority >= f.priority {
                        load += g.path[i as usize].mult * g.rate_bps;
                    }
                    if g.priority == f.priority {
                        fastest = fastest.max(g.rate_bps);
                    }
                }
                load >= self.links[l].cap * (1.0 - CHECK_TOL) && f.rate_bps >= fastest * (1.0 - CHECK_TOL)
            });
            if !has_bottleneck {
                return Err(format!(
                    "flow {} (class {}) at {} bit/s has no bottleneck link: not strict-priority max-min",
                    f.id, f.priority, f.rate_bps
                ));
            }
        }
        Ok(())
    }

    fn check_submit(&self, t: &Transfer) -> Result<(), NetError> {
        NetError::check_new(t, self.now, self.in_flight.contains(&t.id.0))
    }

    fn alloc_slot(&mut self) -> u32 {
        if let Some(s) = self.free.pop() {
            return s;
        }
        self.flows.push(Flow::empty());
        self.scratch.flow_mark.push(0);
        self.scratch.new_rate.push(0.0);
        self.scratch.seq.push(0);
        self.scratch.rate.push(0.0);
        self.scratch.bott.push(u32::MAX);
        self.scratch.bott_new.push(u32::MAX);
        self.scratch.dev_mark.push(0);
        self.scratch.dev_key.push(UNFROZEN);
        self.versions.push(0);
        self.drain_times.push((u64::MAX, u64::MAX));
        u32::try_from(self.flows.len() - 1).expect("more than 2^32 flows in flight")
    }

    /// Sets `f`'s path to `route` (one path, multiplicities) and its lone-flow bottleneck.
    fn fill_path(f: &mut Flow, route: &[RouteLink], sum: RouteSummary) {
        f.path.clear();
        f.path.extend(route.iter().map(|rl| PathEntry {
            link: rl.link.0,
            mult: f64::from(rl.mult),
            pos: 0,
        }));
        let (bw, mult) = sum.bottleneck.unwrap_or((Bandwidth::ZERO, 1));
        f.solo_bw = bw;
        f.solo_mult = mult;
        f.solo_rate = bw.bps_f64() / mult as f64;
    }

    /// Sets `f`'s path to `split` (link, share of the bytes) and its lone-flow bottleneck.
    fn fill_split(f: &mut Flow, split: &[(LinkId, f64)], links: &LinkTable) {
        f.path.clear();
        f.path.extend(split.iter().map(|&(l, w)| PathEntry {
            link: l.0,
            mult: w,
            pos: 0,
        }));
        let solo = f
            .path
            .iter()
            .map(|e| links.cap_of(e.link as usize) / e.mult)
            .fold(f64::INFINITY, f64::min);
        f.solo_bw = Bandwidth::ZERO;
        f.solo_mult = 0;
        f.solo_rate = if solo.is_finite() { solo } else { 0.0 };
    }

    /// Applies the link changes due at `now` and routes the flows they touch again.
    fn apply_changes(&mut self) {
        while let Some(&Reverse((at, _, i))) = self.changes.peek() {
            if at != self.now.0 {
                break;
            }
            self.changes.pop();
            let (link, change) = self.change_list[i as usize];
            let topo = Arc::make_mut(&mut self.topo);
            // Checked when scheduled: the link exists and a bandwidth is positive.
            let _ = match change {
                LinkChange::Down => topo.set_link_down(link, true),
                LinkChange::Up => topo.set_link_down(link, false),
                LinkChange::Bandwidth(bw) => topo.set_link_bandwidth(link, bw),
                LinkChange::Loss(_) => unreachable!("refused when scheduled"),
            };
            if let LinkChange::Bandwidth(bw) = change {
                self.links.set_bandwidth(link.idx(), bw);
            }
            if change == LinkChange::Up {
                continue;
            }
            self.full_refill = true;
            // Flows holding the link, and flows not started whose path crosses it.
            let mut touched: Vec<u32> = self.links.on(link.idx()).iter().map(|&(f, _)| f).collect();
            touched.extend((0..self.flows.len() as u32).filter(|&f| {
                self.flows[f as usize].state == State::Pending && self.flows[f as usize].path.iter().any(|e| e.link == link.0)
            }));
            for f in touched {
                self.reroute(f);
            }
            self.scratch.dirty.push(link.0);
            self.full_refill = true;
        }
    }

    /// Routes flow `slot` again on the topology as it is now, keeping the bytes it has left.
    fn reroute(&mut self, slot: u32) {
        self.release_class_load(slot);
        let now = self.now;
        let si = slot as usize;
        let active = self.flows[si].state == State::Active;
        if active {
            let f = &mut self.flows[si];
            if f.rate_bps > 0.0 {
                let dt = (now.0 - f.updated_at.0) as f64;
                f.remaining_bits = (f.remaining_bits - f.rate_bps * dt / PS_PER_S).max(0.0);
            }
            f.rate_bps = 0.0;
            f.updated_at = now;
            self.scratch.rate[si] = 0.0;
            for i in 0..self.flows[si].path.len() {
                let e = self.flows[si].path[i];
                if let Some((moved, mi)) = self.links.remove(e.link as usize, e.pos, e.mult) {
                    self.flows[moved as usize].path[mi as usize].pos = e.pos;
                }
                self.scratch.dirty.push(e.link);
            }
            self.versions[si] = self.versions[si].wrapping_add(1);
            self.drain_times[si] = (u64::MAX, u64::MAX);
        }
        let f = &self.flows[si];
        let t = Transfer {
            id: f.id,
            src: f.src,
            dst: f.dst,
            bytes: f.bytes,
            start: f.start,
            flow_hash: f.flow_hash,
            route: f.route.clone(),
        };
        let routed = if self.spread {
            route::expand_split(&self.topo, &t, &mut self.split_scratch, &mut self.split_route).map(|lat| {
                let f = &mut self.flows[si];
                Self::fill_split(f, &self.split_route, &self.links);
                f.latency = lat;
            })
        } else {
            let links = &self.links;
            route::expand_with(&self.topo, |l| link_attrs(links, l), &t, &mut self.route_scratch, &mut self.route).map(|sum| {
                let f = &mut self.flows[si];
                Self::fill_path(f, &self.route, sum);
                f.latency = sum.latency;
            })
        };
        if let Err(e) = routed {
            // The flow keeps no link and never finishes; the run reports why.
            self.flows[si].path.clear();
            self.fault_err.get_or_insert(NetError::Fault(format!(
                "transfer {} ({} -> {}) lost its route at {now}: {e}",
                t.id, t.src, t.dst
            )));
            if active {
                self.active -= 1;
                self.flows[si].state = State::Drained;
            }
            return;
        }
        // Not the exact lone-flow drain: the flow has moved since its first byte.
        self.flows[si].solo_mult = 0;
        if active {
            self.hold_links(slot);
        }
    }

    /// Queues `t` spread over the links of `self.split_route` (link, share of its bytes).
    fn enqueue_split(&mut self, t: Transfer, latency: SimTime) {
        let slot = self.enqueue_slot(t, latency);
        Self::fill_split(&mut self.flows[slot as usize], &self.split_route, &self.links);
    }

    /// Queues `t` on the one path of `self.route`.
    fn enqueue(&mut self, t: Transfer, sum: RouteSummary) {
        let slot = self.enqueue_slot(t, sum.latency);
        Self::fill_path(&mut self.flows[slot as usize], &self.route, sum);
    }

    /// A pending flow slot for `t` (its path is the caller's to fill), queued for arrival.
    fn enqueue_slot(&mut self, t: Transfer, latency: SimTime) -> u32 {
        let slot = self.alloc_slot();
        let f = &mut self.flows[slot as usize];
        f.flow_hash = t.flow_hash;
        f.route = t.route;
        f.id = t.id;
        f.src = t.src;
        f.dst = t.dst;
        f.bytes = t.bytes;
        f.start = t.start;
        f.latency = latency;
        f.remaining_bits = t.bytes.0 as f64 * 8.0;
        f.rate_bps = 0.0;
        f.updated_at = t.start;
        f.state = State::Pending;
        f.class_load = false;
        f.priority = self.next_priority;
        if self.arrive_lane && t.start == self.now && (self.arrive_now.is_empty() || self.arrive_now_at == t.start.0) {
            self.arrive_now_at = t.start.0;
            self.arrive_now.push((t.id.0, slot));
        } else {
            self.arrivals.push(t.start.0, 0, t.id.0, slot);
        }
        self.in_flight.insert(t.id.0);
        self.stats.submitted += 1;
        slot
    }

    /// Takes flow `slot`'s path out of `class_load` (once).
    fn release_class_load(&mut self, slot: u32) {
        let f = &mut self.flows[slot as usize];
        if f.class_load {
            f.class_load = false;
            for e in &f.path {
                self.class_load[e.link as usize] -= 1;
            }
        }
    }

    fn activate(&mut self, slot: u32) {
        let now = self.now;
        if self.flows[slot as usize].bytes.0 == 0 {
            self.release_class_load(slot);
        }
        let f = &mut self.flows[slot as usize];
        if f.bytes.0 == 0 || f.path.is_empty() {
            f.state = State::Drained;
            f.remaining_bits = 0.0;
            let at = now.saturating_add(f.latency);
            self.deliveries.push(at.0, f.latency.0, f.id.0, slot);
            return;
        }
        f.state = State::Active;
        f.updated_at = now;
        f.rate_bps = 0.0;
        // Above every level, so that a resumed filling collects and fills it; set to its rate
        // at the end of the recomputation.
        self.scratch.rate[slot as usize] = f64::INFINITY;
        self.arrived.push(slot);
        self.hold_links(slot);
        self.active += 1;
    }

    /// Lists flow `slot` on every link of its path and marks them dirty.
    #[inline]
    fn hold_links(&mut self, slot: u32) {
        let si = slot as usize;
        for i in 0..self.flows[si].path.len() {
            let e = self.flows[si].path[i];
            let li = e.link as usize;
            let one_mult = match self.links.on(li) {
                [(g, j)] => self.flows[*g as usize].path[*j as usize].mult,
                _ => 0.0,
            };
            self.flows[si].path[i].pos = self.links.add(li, slot, i as u32, e.mult, one_mult);
            self.scratch.dirty.push(e.link);
        }
    }

    fn drain(&mut self, slot: u32) {
        self.release_class_load(slot);
        let now = self.now;
        let si = slot as usize;
        self.drained_min_rate = self.drained_min_rate.min(self.flows[si].rate_bps);
        self.drained_now = true;
        for i in 0..self.flows[si].path.len() {
            let e = self.flows[si].path[i];
            if let Some((moved, mi)) = self.links.remove(e.link as usize, e.pos, e.mult) {
                self.flows[moved as usize].path[mi as usize].pos = e.pos;
            }
            self.scratch.dirty.push(e.link);
        }
        let f = &mut self.flows[si];
        f.state = State::Drained;
        f.remaining_bits = 0.0;
        f.rate_bps = 0.0;
        f.updated_at = now;
        self.scratch.rate[si] = 0.0;
        self.versions[si] = self.versions[si].wrapping_add(1);
        self.drain_times[si] = (u64::MAX, u64::MAX);
        self.active -= 1;
        let at = now.saturating_add(f.latency);
        self.deliveries.push(at.0, f.latency.0, f.id.0, slot);
    }

    /// Gives flow `slot` rate `rate` from now on and predicts its drain.
    fn set_rate(&mut self, slot: u32, rate: f64) {
        let now = self.now;
        let f = &mut self.flows[slot as usize];
        if f.rate_bps == rate {
            self.stats.rates_unchanged += 1;
            return;
        }
        if f.rate_bps > 0.0 {
            let dt = (now.0 - f.updated_at.0) as f64;
            f.remaining_bits = (f.remaining_bits - f.rate_bps * dt / PS_PER_S).max(0.0);
        }
        f.rate_bps = rate;
        f.updated_at = now;
        self.scratch.rate[slot as usize] = rate;
        let drain = if now == f.start && rate == f.solo_rate && f.solo_mult > 0 {
            // Alone at full rate from the first byte: exact, as the analytical backend.
            f.start.0.saturating_add(route::serialization_ps(f.bytes, f.solo_bw, f.solo_mult))
        } else {
            now.0.saturating_add(ceil_ps(f.remaining_bits * PS_PER_S / rate))
        };
        let times = &mut self.drain_times[slot as usize];
        times.0 = drain;
        if times.1 <= drain {
            // The live event comes first; it is moved to `drain` when it pops.
            return;
        }
        times.1 = drain;
        let version = self.versions[slot as usize].wrapping_add(1);
        self.versions[slot as usize] = version;
        self.new_drains.push(Reverse((drain, f.id.0, slot, version)));
    }

    /// Recomputes the rates of every component a dirty link belongs to.
    ///
    /// When flows departed at this timestamp (and no link changed), the filling
    /// resumes where it reaches the lowest rate `r` of the departed flows: a departed flow's
    /// links saturate at its rate or above (else it would have frozen lower), and taking it
    /// away only delays them, so a full filling of the new state freezes exactly the flows below
    /// `r`, at the same rates and in the same order, before any departed link matters. Those
    /// keep their rates; only flows at `r` or above, reached from the departed links over
    /// shared links, are filled again ([`RateScratch::water_fill_resumed`]). Arrivals resume
    /// the same way, at the lowest level at which one of their links would saturate
    /// ([`RateScratch::arrival_level`]); with departures too, at the lower of the two levels.
    /// Under traffic classes, after a link change, and where `arrival_level` cannot show its
    /// level on the floats, the components are filled in full.
    fn recompute(&mut self) {
        let mut r_min = std::mem::replace(&mut self.drained_min_rate, f64::INFINITY);
        let mut full = std::mem::replace(&mut self.full_refill, false);
        let drained = std::mem::replace(&mut self.drained_now, false);
        if self.scratch.dirty.is_empty() {
            debug_assert!(self.arrived.is_empty());
            return;
        }
        let mut arrived = std::mem::take(&mut self.arrived);
        if !arrived.is_empty() && !full {
            if !(self.incremental && self.incremental_arrivals) || self.priorities || self.scratch.plain {
                full = true;
            } else if !self.arrivals_share_a_link(&arrived, drained) {
                // Every dirty link is empty or one flow's alone, as are that flow's other links:
                // each takes the lone-flow path, which reads no level (and `arrival_level`
                // would find one on these links: no prefix to replay).
            } else if let Some(r) = self.scratch.arrival_level(&arrived, r_min, &self.flows, &self.links) {
                r_min = r;
            } else {
                self.stats.arrival_full_fallbacks += 1;
                full = true;
            }
        }
        let resume = self.incremental && !full && !self.scratch.plain && r_min.is_finite() && r_min > 0.0;
        // Freeze keys are kept for the local filling except under traffic classes (filled class
        // by class, never locally). It gives what the resumed filling would only where every
        // link is safe above the level that one resumes at: stale walks are taken first.
        let keep_walks = !self.priorities;
        let trigger = match self.local_mode {
            LocalMode::Never => false,
            LocalMode::Always => true,
            LocalMode::Auto(_) => {
                self.scratch.tick_generation();
                self.scratch.dirty_is_big() && self.scratch.local_due()
            }
        };
        let local = keep_walks && trigger && resume && self.shares_a_link() && {
            self.walk_stale();
            self.scratch.max_dip() < r_min
        };
        let done = local && self.scratch.local_fill(r_min, &arrived, &self.flows, &self.links);
        if local && matches!(self.local_mode, LocalMode::Auto(_)) {
            self.scratch.weigh_local(self.scratch.local_work, done);
        }
        if done {
            self.stats.rate_recomputations += 1;
            self.stats.rate_fills_local += 1;
            let changed = std::mem::take(&mut self.scratch.dev_flows);
            self.stats.flows_rerated += changed.len() as u64;
            for &f in &changed {
                let (bits, link) = self.scratch.dev_key[f as usize];
                self.scratch.bott[f as usize] = link;
                self.set_rate(f, f64::from_bits(bits));
            }
            self.scratch.dev_flows = changed;
            for &a in &arrived {
                self.scratch.rate[a as usize] = self.flows[a as usize].rate_bps;
            }
            // Every link it marked was walked with the final keys, safe throughout.
            for i in 0..self.scratch.dev_links.len() {
                let l = self.scratch.dev_links[i];
                self.scratch.set_link_dip(l, f64::NEG_INFINITY);
            }
            self.scratch.dirty.clear();
        } else {
            if local {
                self.stats.local_fill_fallbacks += 1;
            }
            self.fill_components(r_min, resume, keep_walks, &arrived);
        }
        arrived.clear();
        self.arrived = arrived;
        if self.checks
            && self.violations.len() < 16
            && let Err(e) = self.check_rates()
        {
            self.violations.push(format!("at {}: {e}", self.now));
        }
    }

    /// Walks every stale link again ([`RateScratch::mark_stale`]), so that every link's unsafe
    /// level is that of its walk with the current keys.
    fn walk_stale(&mut self) {
        let all = std::mem::replace(&mut self.scratch.stale_all, false);
        if self.scratch.stale.is_empty() && !all {
            return;
        }
        // A fresh epoch: no flow has a local filling's key.
        self.scratch.next_lepoch();
        let mut stale = std::mem::take(&mut self.scratch.stale);
        for &l in &stale {
            self.scratch.stale_mark[l as usize] = false;
            if !all {
                self.scratch.retrace_link(l, &self.flows, &self.links);
            }
        }
        stale.clear();
        self.scratch.stale = stale;
        if all {
            for l in 0..self.links.count() as u32 {
                self.scratch.retrace_link(l, &self.flows, &self.links);
            }
        }
    }

    /// Some dirty link belongs to a component of more than one flow (else the lone-flow fast
    /// path of [`Self::fill_components`] is cheaper than the local filling, and where every
    /// dirty link is empty there is nothing to do).
    fn shares_a_link(&self) -> bool {
        self.scratch.dirty.iter().any(|&d| match self.links.on(d as usize)[..] {
            [] => false,
            [(f, _)] => self.flows[f as usize].path.iter().any(|e| self.links.shared(e.link as usize)),
            _ => true,
        })
    }

    /// [`Self::shares_a_link`] at a timestamp whose dirty links are those of the flows
    /// `arrived` and, with `drained`, of flows that drained: without drains (nor link changes,
    /// which fill in full), a dirty link is shared or one of an arrival's own, so it is enough to
    /// look at the arrivals' paths once each instead of at every dirty link's flow.
    fn arrivals_share_a_link(&self, arrived: &[u32], drained: bool) -> bool {
        if drained {
            return self.shares_a_link();
        }
        arrived
            .iter()
            .any(|&a| self.flows[a as usize].path.iter().any(|e| self.links.shared(e.link as usize)))
    }

    /// [`Self::recompute`] by fillings of the components the dirty links belong to (resumed at
    /// `r_min` with `resume`, else full); with `keep_walks`, records the freeze keys and marks
    /// stale the links whose flows' keys changed ([`RateScratch::mark_stale`]), and notes per
    /// link whether its component was large (the automatic trigger of the local filling).
    fn fill_components(&mut self, r_min: f64, resume: bool, keep_walks: bool, arrived: &[u32]) {
        let epoch = self.scratch.next_epoch(&self.links);
        let mut dirty = std::mem::take(&mut self.scratch.dirty);
        let walks = keep_walks && self.local_mode != LocalMode::Never;
        if walks {
            // Their flows came or went, or their capacity changed.
            for &d in &dirty {
                self.scratch.mark_stale(d);
            }
        }
        for &d in &dirty {
            let di = d as usize;
            // A link one flow or none holds is read from its hot entry alone: its record is
            // loaded only where the flow shares a link (a lone flow's links all hold it alone,
            // so the flow's mark stands for theirs: no search marks a link of a lone flow).
            if self.links.len(di) == 0 {
                continue;
            }
            if let [(f, _)] = self.links.on(di)[..] {
                // A link of one flow whose component was already rerated.
                if self.scratch.flow_mark[f as usize] == epoch {
                    continue;
                }
                let flow = &self.flows[f as usize];
                if !flow.path.iter().any(|e| self.links.shared(e.link as usize)) {
                    self.stats.rate_recomputations += 1;
                    // Its key: its tightest link, as the filling's heap orders private links.
                    let mut tight = (f64::INFINITY, u32::MAX);
                    for e in &flow.path {
                        let key = (self.links.cap_of(e.link as usize) / e.mult, e.link);
                        if (key.0.to_bits(), key.1) < (tight.0.to_bits(), tight.1) {
                            tight = key;
                        }
                    }
                    self.scratch.flow_mark[f as usize] = epoch;
                    let rate = flow.solo_rate;
                    self.stats.flows_rerated += 1;
                    if keep_walks {
                        self.scratch.bott_new[f as usize] = tight.1;
                        self.note_key(f, rate, walks);
                    }
                    self.set_rate(f, rate);
                    continue;
                }
            }
            if self.links[di].mark.get() == epoch {
                continue;
            }
            if self.priorities {
                // Strict priority between traffic classes: the resumed filling's argument is for
                // one class; fill the component class by class.
                self.stats.rate_recomputations += 1;
                self.stats.rate_fills_full += 1;
                self.scratch.collect_component(d, &self.flows, &self.links);
                self.stats.flows_rerated_full += self.scratch.comp_flows.len() as u64;
                self.scratch.water_fill_prio(&self.flows, &self.links);
            } else if resume {
                self.scratch.collect_resumed(d, r_min, &self.flows, &self.links);
                // Every flow this link reaches keeps its rate.
                if self.scratch.comp_flows.is_empty() {
                    continue;
                }
                self.stats.rate_recomputations += 1;
                self.stats.rate_fills_resumed += 1;
                self.scratch.water_fill_resumed(r_min, &self.flows, &self.links);
            } else {
                self.stats.rate_recomputations += 1;
                self.stats.rate_fills_full += 1;
                self.scratch.collect_component(d, &self.flows, &self.links);
                self.stats.flows_rerated_full += self.scratch.comp_flows.len() as u64;
                self.scratch.water_fill(&self.flows, &self.links);
            }
            self.stats.flows_rerated += self.scratch.comp_flows.len() as u64;
            if let LocalMode::Auto(min_flows) = self.local_mode {
                let sc = &mut self.scratch;
                if sc.comp_flows.len() >= min_flows {
                    let n = sc.comp_flows.len();
                    sc.big_flows = if sc.big_flows == 0 { n } else { (3 * sc.big_flows + n) / 4 };
                    for &l in &sc.comp_links {
                        sc.big[l as usize] = sc.generation;
                    }
                    sc.last_big = sc.generation;
                } else if sc.big[di] != 0 {
                    sc.big[di] = 0;
                }
            }
            let comp = std::mem::take(&mut self.scratch.comp_flows);
            for &f in &comp {
                let rate = self.scratch.new_rate[f as usize];
                if keep_walks {
                    self.note_key(f, rate, walks);
                }
                self.set_rate(f, rate);
            }
            self.scratch.comp_flows = comp;
        }
        for &a in arrived {
            self.scratch.rate[a as usize] = self.flows[a as usize].rate_bps;
        }
        dirty.clear();
        self.scratch.dirty = dirty;
    }

    /// Records flow `f`'s new freeze key (`rate`, and the link in `bott_new`) before its rate is
    /// set; where it changed and `walks`, its links are marked stale.
    #[inline]
    fn note_key(&mut self, f: u32, rate: f64, walks: bool) {
        let fi = f as usize;
        let link = self.scratch.bott_new[fi];
        if (rate.to_bits(), link) != (self.scratch.rate[fi].to_bits(), self.scratch.bott[fi]) {
            self.scratch.bott[fi] = link;
            if walks {
                for e in &self.flows[fi].path {
                    self.scratch.mark_stale(e.link);
                }
            }
        }
    }
    fn drain_is_live(&self, e: &DrainEvent) -> bool {
        let (_, _, slot, ver) = e.0;
        self.versions[slot as usize] == ver
    }

    /// Keeps the top of the drain heap live, and the heap within a constant of the live count.
    fn tidy_drains(&mut self) {
        if self.drains.len() > 2 * self.active + 1024 {
            let versions = &self.versions;
            self.drains.retain(|e| versions[e.0.2 as usize] == e.0.3);
        }
        while let Some(&top) = self.drains.peek() {
            if !self.drain_is_live(&top) {
                self.drains.pop();
            } else if !self.put_back_early(top) {
                break;
            }
        }
    }

    /// Where live drain event `e` (at the top of `drains`) comes before its flow's drain (the
    /// rate fell since it was pushed), moves it there and returns `true`.
    #[inline]
    fn put_back_early(&mut self, e: DrainEvent) -> bool {
        let Reverse((at, id, slot, version)) = e;
        let times = &mut self.drain_times[slot as usize];
        if at == times.0 {
            return false;
        }
        debug_assert!(at < times.0);
        times.1 = times.0;
        let mut top = self.drains.peek_mut().expect("the event is the top");
        *top = Reverse((times.0, id, slot, version));
        true
    }

    /// Arrivals and drains at `t`, then one recomputation.
    fn step(&mut self, t: SimTime) {
        self.now = t;
        if !self.changes.is_empty() {
            self.apply_changes();
        }
        // In (time, id) order, as one heap of every arrival would give them.
        let mut batch = std::mem::take(&mut self.arrive_batch);
        if self.arrivals.peek_time() == Some(t.0) {
            self.arrivals.take_at(t.0, &mut batch);
        }
        if !self.arrive_now.is_empty() && self.arrive_now_at == t.0 {
            batch.append(&mut self.arrive_now);
            batch.sort_unstable();
        }
        for &(_, slot) in &batch {
            self.activate(slot);
        }
        batch.clear();
        self.arrive_batch = batch;
        while let Some(&top) = self.drains.peek() {
            if top.0.0 != t.0 {
                break;
            }
            if !self.drain_is_live(&top) {
                self.drains.pop();
            } else if !self.put_back_early(top) {
                self.drains.pop();
                self.drain(top.0.2);
            }
        }
        self.recompute();
        self.tidy_drains();
        self.drains.extend(self.new_drains.drain(..));
    }

    fn deliver(&mut self, t: SimTime, done: &mut Vec<Completion>) {
        self.now = t;
        let mut batch = std::mem::take(&mut self.deliver_batch);
        self.deliveries.take_at(t.0, &mut batch);
        for &(_, slot) in &batch {
            let f = &mut self.flows[slot as usize];
            if !self.link_bytes.is_empty() {
                for e in &f.path {
                    self.link_bytes[e.link as usize].0 += if e.mult.fract() == 0.0 {
                        f.bytes.0 * e.mult as u64
                    } else {
                        (f.bytes.0 as f64 * e.mult).round() as u64
                    };
                }
            }
            done.push(Completion {
                id: f.id,
                src: f.src,
                dst: f.dst,
                bytes: f.bytes,
                start: f.start,
                finish: t,
            });
            f.state = State::Free;
            self.in_flight.remove(&f.id.0);
            self.stats.completed += 1;
            self.stats.bytes_delivered += f.bytes.0;
            self.free.push(slot);
        }
        batch.clear();
        self.deliver_batch = batch;
    }

    #[inline]
    fn next_rate_event(&self) -> Option<u64> {
        let mut t = self.arrivals.peek_time();
        if !self.arrive_now.is_empty() {
            t = min_opt(t, Some(self.arrive_now_at));
        }
        t = min_opt(t, self.drains.peek().map(|e| e.0.0));
        min_opt(t, self.changes.peek().map(|e| e.0.0))
    }
}

/// The earlier of two optional times.
#[inline]
fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Link `l`'s bandwidth and latency (the topology's values), from its class.
#[inline]
fn link_attrs(links: &LinkTable, l: LinkId) -> (Bandwidth, SimTime) {
    links.attrs(l.idx())
}

/// The summed multiplicities of link `li`'s flows, in list order: as kept in
/// [`LinkRec::weight`] where two or more flows hold it and every multiplicity is an integer
/// (`integer`); a lone flow's multiplicity where one does.
#[inline]
fn link_weight(integer: bool, li: usize, flows: &[Flow], links: &LinkTable) -> f64 {
    match links.len(li) {
        0 => 0.0,
        1 => {
            let (f, i) = links.on(li)[0];
            flows[f as usize].path[i as usize].mult
        }
        _ if integer => links[li].weight,
        _ => links.on(li).iter().map(|&(f, i)| flows[f as usize].path[i as usize].mult).sum(),
    }
}

/// `a < b`, false where either is NaN (so that a negated test fails safe).
#[inline]
fn lt(a: f64, b: f64) -> bool {
    a < b
}

/// `x` picoseconds rounded up, except that a value within float noise of an integer is that
/// integer (so that two flows halving a link finish at exactly twice the lone time).
#[inline]
fn ceil_ps(x: f64) -> u64 {
    if !x.is_finite() {
        return u64::MAX;
    }
    let r = x.round();
    let v = if (x - r).abs() <= x * 1e-13 + 1e-6 { r } else { x.ceil() };
    if v <= 0.0 {
        0
    } else if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    }
}

impl Network for FlowNetwork {
    fn topology(&self) -> &Topology {
        &self.topo
    }

    fn now(&self) -> SimTime {
        self.now
    }

    fn submit_in_class(&mut self, t: Transfer, class: u8) -> Result<(), NetError> {
        self.next_priority = class;
        self.priorities |= class > 0;
        let r = self.submit(t);
        self.next_priority = 0;
        r
    }

    fn submit(&mut self, t: Transfer) -> Result<(), NetError> {
        self.check_submit(&t)?;
        if self.spread {
            let latency = route::expand_split(&self.topo, &t, &mut self.split_scratch, &mut self.split_route)
                .map_err(|source| NetError::Route { id: t.id, source })?;
            self.enqueue_split(t, latency);
            return Ok(());
        }
        if !self.class_load.is_empty() {
            let sum = route::expand_classes(&self.topo, &t, &self.class_load, &mut self.route_scratch, &mut self.route)
                .map_err(|source| NetError::Route { id: t.id, source })?;
            let slot = self.enqueue_slot(t, sum.latency);
            let f = &mut self.flows[slot as usize];
            Self::fill_path(f, &self.route, sum);
            f.class_load = true;
            for e in &f.path {
                self.class_load[e.link as usize] += 1;
            }
            return Ok(());
        }
        let links = &self.links;
        let sum = route::expand_with(&self.topo, |l| link_attrs(links, l), &t, &mut self.route_scratch, &mut self.route)
            .map_err(|source| NetError::Route { id: t.id, source })?;
        self.enqueue(t, sum);
        Ok(())
    }

    fn next_event_time(&self) -> Option<SimTime> {
        let r = self.next_rate_event();
        let d = self.deliveries.peek_time();
        match (r, d) {
            (Some(a), Some(b)) => Some(SimTime(a.min(b))),
            (x, None) | (None, x) => x.map(SimTime),
        }
    }

    fn advance_to(&mut self, t: SimTime, done: &mut Vec<Completion>) {
        loop {
            let r = self.next_rate_event().filter(|x| *x <= t.0);
            let d = self.deliveries.peek_time().filter(|x| *x <= t.0);
            // Rate events first on a tie: they may add deliveries at the same time, and a
            // timestamp's completions go out together, by id.
            match (r, d) {
                (Some(r), Some(d)) if r <= d => self.step(SimTime(r)),
                (Some(r), None) => self.step(SimTime(r)),
                (_, Some(d)) => self.deliver(SimTime(d), done),
                (None, None) => break,
            }
        }
        self.now = self.now.max(t);
    }

    fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Down: the flows on the link (and those not started whose path crosses it) are routed
    /// again by the rule around the links now down, keeping the bytes they have left; their bytes
    /// are counted on their last path. Bandwidth: the link's capacity changes and its flows are
    /// routed again (to the same paths). Up: later routes may use the link.
    fn schedule_link_change(&mut self, at: SimTime, link: LinkId, change: LinkChange) -> Result<(), NetError> {
        if at < self.now {
            return Err(NetError::Fault(format!(
                "a link change at {at} is before the network's time {}",
                self.now
            )));
        }
        if link.idx() >= self.links.count() {
            return Err(NetError::Fault(format!(
                "no link {} (the topology has {})",
                link.0,
                self.links.count()
            )));
        }
        if let LinkChange::Loss(_) = change {
            return Err(NetError::Fault(
                "the flow backend moves no packets, so a link cannot lose them; use backend: packet for a lossy link".into(),
            ));
        }
        if let LinkChange::Bandwidth(bw) = change
            && bw.is_zero()
        {
            return Err(NetError::Fault(
                "a degraded link needs a positive bandwidth; take it down instead".into(),
            ));
        }
        let i = self.change_list.len() as u32;
        self.change_list.push((link, change));
        self.changes.push(Reverse((at.0, u64::from(i), i)));
        Ok(())
    }

    fn fault_error(&self) -> Option<NetError> {
        self.fault_err.clone()
    }

    fn stats(&self) -> NetStats {
        self.stats
    }

    fn link_bytes(&self) -> &[Bytes] {
        &self.link_bytes
    }

    /// Off: no counters (an empty `link_bytes`); on again: counting restarts from zero.
    fn set_link_bytes(&mut self, on: bool) {
        let links = self.links.count();
        crate::set_link_counters(&mut self.link_bytes, on, links);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_topo::generators::flat;
    use llmsim_topo::{LinkParams, ScaleUp};

    fn net(hosts: u32) -> FlowNetwork {
        let nic = LinkParams::new(Bandwidth::from_gbps(100), SimTime::from_ns(500));
        let mut n = FlowNetwork::new(Arc::new(flat(hosts, nic, ScaleUp::none(), 1).unwrap()));
        n.set_rate_checks(true);
        n
    }

    #[test]
    fn slot_queues_give_what_one_heap_gives() {
        proptest::proptest!(|(ops in proptest::collection::vec((0u8..4, 0u64..6, 0u64..12, 0u64..40), 0..400))| {
            let mut q = SlotQueue::new();
            let mut heap: BinaryHeap<TimedSlot> = BinaryHeap::new();
            let (mut now, mut id) = (0u64, 0u64);
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for (op, dt, lat, stray) in ops {
                if op < 3 {
                    // At the time plus a latency (12 of them: some past the lanes), or now and
                    // then at a time out of its latency's order.
                    now += dt;
                    let at = if op == 2 && stray < 8 { now + stray } else { now + lat * 5 };
                    id = (id * 7 + 3) % 101;
                    let slot = (id % 13) as u32;
                    q.push(at, lat * 5, id, slot);
                    heap.push(Reverse((at, id, slot)));
                } else if let Some(t) = q.peek_time() {
                    proptest::prop_assert_eq!(Some(t), heap.peek().map(|e| e.0.0));
                    got.clear();
                    q.take_at(t, &mut got);
                    want.clear();
                    while heap.peek().is_some_and(|e| e.0.0 == t) {
                        let Reverse((_, i, s)) = heap.pop().unwrap();
                        want.push((i, s));
                    }
                    proptest::prop_assert_eq!(&got, &want);
                    now = now.max(t);
                }
            }
            proptest::prop_assert_eq!(q.peek_time(), heap.peek().map(|e| e.0.0));
            proptest::prop_assert_eq!(q.is_empty(), heap.is_empty());
        });
    }

    #[test]
    fn ceil_ps_rounds_up_but_snaps_noise() {
        assert_eq!(ceil_ps(10.0), 10);
        assert_eq!(ceil_ps(10.2), 11);
        assert_eq!(ceil_ps(1_000_000.000_000_000_1), 1_000_000);
        assert_eq!(ceil_ps(0.0), 0);
    }

    /// Strict priority: a class-1 flow sharing a link with a class-0 flow runs at the full
    /// 100 Gb/s (1 MB in 80 us + 2 x 500 ns), and the class-0 flow gets what is left: nothing
    /// for those 80 us, then the link alone for its 1 MB (160 us + 1 us). In one class they
    /// share it: both end at 161 us.
    #[test]
    fn a_higher_class_goes_first() {
        let mk = |id| Transfer::new(TransferId(id), NodeId(id as u32), NodeId(3), Bytes(1_000_000), SimTime::ZERO);
        let mut n = net(4);
        n.submit_in_class(mk(1), 0).unwrap();
        n.submit_in_class(mk(2), 1).unwrap();
        let mut done = Vec::new();
        while let Some(t) = n.next_event_time() {
            n.advance_to(t, &mut done);
        }
        let at = |id| done.iter().find(|c| c.id == TransferId(id)).unwrap().finish;
        assert_eq!(at(2), SimTime::from_us(81), "class 1 alone at line rate");
        assert_eq!(at(1), SimTime::from_us(161), "class 0 after it");
        assert!(n.violations().is_empty(), "{:?}", n.violations());
        let mut n = net(4);
        let done = crate::run_all(&mut n, [mk(1), mk(2)]).unwrap();
        assert!(done.iter().all(|c| c.finish == SimTime::from_us(161)), "{done:?}");
    }

    /// Below a higher class that its own bottleneck holds to half a link, a lower class gets
    /// the other half: flow 1 (class 1) crosses the shared link into host 3 and a second link
    /// shared with flow 3 (class 1); flow 2 (class 0) gets what they leave on the first.
    #[test]
    fn a_lower_class_takes_what_the_higher_leaves() {
        let mut n = net(5);
        let t = |id, src, dst| Transfer::new(TransferId(id), NodeId(src), NodeId(dst), Bytes(1_000_000), SimTime::ZERO);
        // Flows 1 and 3 both leave host 0: 50 Gb/s each. Flow 2 (class 0) shares host 3's
        // downlink with flow 1 and gets the other 50 Gb/s.
        n.submit_in_class(t(1, 0, 3), 1).unwrap();
        n.submit_in_class(t(3, 0, 4), 1).unwrap();
        n.submit_in_class(t(2, 1, 3), 0).unwrap();
        n.advance_to(SimTime::from_us(1), &mut Vec::new());
        let rates: std::collections::HashMap<u64, f64> = n.active_rates().map(|(id, r)| (id.0, r)).collect();
        assert_eq!(rates[&1], 50e9);
        assert_eq!(rates[&3], 50e9);
        assert_eq!(rates[&2], 50e9);
        assert!(n.violations().is_empty(), "{:?}", n.violations());
    }

    /// Transfers submitted to start at the network's time (the arrival lane), in any order,
    /// join their links' flow lists by transfer id, as they did through the arrival heap: the
    /// order the rates' sums and freezes follow.
    #[test]
    fn simultaneous_arrivals_start_in_id_order() {
        let mk = |id: u64| Transfer::new(TransferId(id), NodeId(0), NodeId(1), Bytes(1_000_000), SimTime::ZERO);
        let mut n = net(4);
        for id in [5, 9, 1, 3] {
            n.submit(mk(id)).unwrap();
        }
        assert_eq!((n.arrive_now.len(), n.arrivals.len()), (4, 0), "all in the lane");
        n.advance_to(SimTime::ZERO, &mut Vec::new());
        let lists: Vec<Vec<u64>> = (0..n.links.count())
            .map(|l| n.links.on(l))
            .filter(|on| !on.is_empty())
            .map(|on| on.iter().map(|&(f, _)| n.flows[f as usize].id.0).collect())
            .collect();
        assert!(!lists.is_empty());
        for l in lists {
            assert_eq!(l, vec![1, 3, 5, 9]);
        }
        assert!(n.violations().is_empty(), "{:?}", n.violations());
    }

    #[test]
    fn lone_flow_is_exact() {
        let mut n = net(4);
        // 1 MB at 100 Gb/s = 80 us, plus 2 x 500 ns.
        let t = Transfer::new(TransferId(1), NodeId(0), NodeId(1), Bytes(1_000_000), SimTime::ZERO);
        let done = crate::run_all(&mut n, [t]).unwrap();
        assert_eq!(done[0].finish, SimTime::from_us(81));
        assert_eq!(n.stats().rate_recomputations, 1);
        assert!(n.violations().is_empty());
    }

    #[test]
    fn drained_slots_are_reused_and_stale_events_skipped() {
        let mut n = net(4);
        let mut ts = Vec::new();
        for i in 0..50u64 {
            let t = Transfer::new(
                TransferId(i),
                NodeId(0),
                NodeId(1 + (i % 3) as u32),
                Bytes(1000 + i),
                SimTime::from_ns(i * 10),
            );
            ts.push(t);
        }
        let done = crate::run_all(&mut n, ts).unwrap();
        assert_eq!(done.len(), 50);
        assert!(n.flows.len() <= 50);
        assert!(n.drains.is_empty() && n.arrivals.is_empty() && n.arrive_now.is_empty() && n.deliveries.is_empty());
        assert!((0..n.links.count()).all(|l| n.links.on(l).is_empty()));
        assert!(n.violations().is_empty(), "{:?}", n.violations());
    }
}
