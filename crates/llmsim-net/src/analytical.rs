//! The analytical backend: alpha-beta per path, no contention.
//!
//! `finish = start + latency + bytes / bottleneck`, where the latency and the bottleneck come
//! from [`route::expand`]: for `Via` both legs' latencies are summed and
//! the bottleneck is taken over both legs; for `Chain` the latency is the largest leg's and the
//! bottleneck is the smallest `bandwidth / multiplicity` over all legs. Serialization is rounded
//! up to the picosecond with integer arithmetic.

use std::sync::Arc;

use llmsim_core::{Bytes, EventQueue, LinkId, SimTime};
use llmsim_topo::Topology;

use crate::route::{self, IdSet, RouteLink, RouteScratch};
use crate::{Completion, NetError, NetStats, Network, Transfer};

struct Pending {
    done: Completion,
    /// Range in `links_pool`, for the per-link byte counters at completion.
    links_from: u32,
    links_len: u32,
}

/// Alpha-beta network: every transfer sees an idle fabric.
pub struct AnalyticalNetwork {
    topo: Arc<Topology>,
    now: SimTime,
    queue: EventQueue<Pending>,
    in_flight: IdSet,
    stats: NetStats,
    link_bytes: Vec<Bytes>,
    /// Links of pending transfers; cleared whenever nothing is pending, so it stays bounded by
    /// the largest backlog.
    links_pool: Vec<RouteLink>,
    scratch: RouteScratch,
    route: Vec<RouteLink>,
    batch: Vec<Completion>,
}

impl AnalyticalNetwork {
    /// An analytical network over `topo` with no transfers yet.
    pub fn new(topo: Arc<Topology>) -> Self {
        let n = topo.num_links();
        AnalyticalNetwork {
            topo,
            now: SimTime::ZERO,
            queue: EventQueue::new(),
            in_flight: IdSet::default(),
            stats: NetStats::default(),
            link_bytes: vec![Bytes::ZERO; n],
            links_pool: Vec::new(),
            scratch: RouteScratch::default(),
            route: Vec::new(),
            batch: Vec::new(),
        }
    }

    /// The time `t` takes alone on the fabric, from its start to its last byte's arrival.
    ///
    /// # Errors
    /// `NetError::Route` if it cannot be routed.
    pub fn duration(&mut self, t: &Transfer) -> Result<SimTime, NetError> {
        let sum =
            route::expand(&self.topo, t, &mut self.scratch, &mut self.route).map_err(|source| NetError::Route { id: t.id, source })?;
        Ok(duration_of(t.bytes, sum))
    }

    /// Like [`Network::submit`], but along explicit `path` (links from `t.src` to `t.dst`)
    /// instead of `t.route`: for routing rules the topology does not have.
    ///
    /// # Errors
    /// As `submit`; `NetError::Route` if `path` does not lead from `t.src` to `t.dst`.
    pub fn submit_path(&mut self, t: Transfer, path: &[LinkId]) -> Result<(), NetError> {
        self.check(&t)?;
        let sum =
            route::explicit(&self.topo, t.src, t.dst, path, &mut self.route).map_err(|source| NetError::Route { id: t.id, source })?;
        self.enqueue(t, sum);
        Ok(())
    }

    fn check(&self, t: &Transfer) -> Result<(), NetError> {
        NetError::check_new(t, self.now, self.in_flight.contains(&t.id.0))
    }

    fn enqueue(&mut self, t: Transfer, sum: route::RouteSummary) {
        let finish = t.start.saturating_add(duration_of(t.bytes, sum));
        let links_from = u32::try_from(self.links_pool.len()).expect("link pool overflow");
        self.links_pool.extend_from_slice(&self.route);
        self.in_flight.insert(t.id.0);
        self.stats.submitted += 1;
        let done = t.completed_at(finish);
        self.queue.push(
            finish,
            Pending {
                done,
                links_from,
                links_len: self.route.len() as u32,
            },
        );
    }
}

fn duration_of(bytes: Bytes, sum: route::RouteSummary) -> SimTime {
    let ser = match sum.bottleneck {
        Some((bw, mult)) => route::serialization_ps(bytes, bw, mult),
        None => 0,
    };
    sum.latency.saturating_add(SimTime(ser))
}

impl Network for AnalyticalNetwork {
    fn topology(&self) -> &Topology {
        &self.topo
    }

    fn now(&self) -> SimTime {
        self.now
    }

    fn submit(&mut self, t: Transfer) -> Result<(), NetError> {
        self.check(&t)?;
        let sum =
            route::expand(&self.topo, &t, &mut self.scratch, &mut self.route).map_err(|source| NetError::Route { id: t.id, source })?;
        self.enqueue(t, sum);
        Ok(())
    }

    fn next_event_time(&self) -> Option<SimTime> {
        self.queue.peek_time()
    }

    fn advance_to(&mut self, t: SimTime, done: &mut Vec<Completion>) {
        while let Some(time) = self.queue.peek_time().filter(|x| *x <= t) {
            // Ties in submission order from the queue; the contract wants them by id.
            self.batch.clear();
            while let Some((_, p)) = self.queue.pop_until(time) {
                if !self.link_bytes.is_empty() {
                    for rl in &self.links_pool[p.links_from as usize..(p.links_from + p.links_len) as usize] {
                        self.link_bytes[rl.link.idx()].0 += p.done.bytes.0 * rl.mult as u64;
                    }
                }
                self.batch.push(p.done);
            }
            self.batch.sort_unstable_by_key(|c| c.id);
            for c in &self.batch {
                self.in_flight.remove(&c.id.0);
                self.stats.completed += 1;
                self.stats.bytes_delivered += c.bytes.0;
            }
            done.extend_from_slice(&self.batch);
            self.now = self.now.max(time);
        }
        if self.queue.is_empty() {
            self.links_pool.clear();
        }
        self.now = self.now.max(t);
    }

    fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn stats(&self) -> NetStats {
        self.stats
    }

    fn link_bytes(&self) -> &[Bytes] {
        &self.link_bytes
    }

    /// Off: no counters (an empty `link_bytes`); on again: counting restarts from zero.
    fn set_link_bytes(&mut self, on: bool) {
        let links = self.topo.num_links();
        crate::set_link_counters(&mut self.link_bytes, on, links);
    }
}
