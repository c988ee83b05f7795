//! Links changing during the run (`faults:` with `at:` after 0, and lossy links, issue 32 §2).
//!
//! At a failure (`LinkChange::Down`):
//! - every packet still to cross the link is lost: the link's loss rate becomes 1, so packets in
//!   flight on it, and those queued for it, are dropped at its far end (counted as link drops);
//! - the routing rule routes around it from then on ([`Topology::set_link_down`]); every flow not
//!   done whose data or ACK path crosses it gets new paths for the packets it makes next (the
//!   packets already made keep theirs);
//! - RoCE recovers what was lost by go-back-N: the next packet to arrive out of order draws a
//!   NACK. When nothing arrives after the loss (the flow's last packets were lost), the sender's
//!   ACK timeout resends from the first unacknowledged byte: `FAULT_ACK_TIMEOUT` without progress,
//!   checked for the flows the failure touched until they finish. (The engine has no RoCE ACK
//!   timeout otherwise; a NIC's is 4.096 us x 2^timeout.)
//!
//! Other changes:
//! - `Up`: the link carries packets again and later routes may use it; flows moved off it stay
//!   on their new paths (as on the flow backend).
//! - `Bandwidth`: the link serializes at the new rate from its next packet on (a packet on the
//!   wire keeps its time); a switch port's ECN thresholds become those of the new rate.
//! - `Loss(p)`: each packet crossing the link is dropped with probability `p` (the engine's
//!   per-link error model, `ERROR_RATE_PER_LINK`'s). From then on every flow that starts is
//!   watched by the same ACK timeout, since a lost last packet draws no NACK.
//!
//! With Wormhole fast-forward, a change interrupts steady state: every frozen partition
//! resumes first, and memoization stops for the rest of the run (`PacketEngine::ww_interrupt`).

use llmsim_core::{LinkId, SimTime};

use super::PacketEngine;
use crate::LinkChange;
use crate::packet::PacketError;
use crate::packet::config::PacketRouting;
use crate::packet::events::{EV_FAULT, ev};
use crate::packet::lb::LoadBalance;
use crate::packet::tables::{Kind, RateInfo};

/// How long a sender whose flow a failure touched waits without progress before it resends from
/// its first unacknowledged byte.
pub const FAULT_ACK_TIMEOUT: SimTime = SimTime::from_us(500);

/// What the engine keeps about failures.
#[derive(Default)]
pub(crate) struct FaultState {
    /// Link changes, by event operand.
    links: Vec<(u32, LinkChange)>,
    /// A lossy link exists: every flow that starts is watched (a lost tail draws no NACK).
    watch_new: bool,
    /// Flows under watch: `(flow, snd_una at the last check, until)`, by event operand. A
    /// failure's watch ends once the flow has acknowledged everything it had sent when the link
    /// failed (`until`: what the failure could have lost is recovered); a lossy link's never.
    watch: Vec<(u32, u64, u64)>,
    /// The first flow a failure left with no route.
    pub(crate) error: Option<String>,
}

impl PacketEngine {
    /// Fails `link` at `at` (see the module doc).
    ///
    /// # Errors
    /// As [`PacketEngine::schedule_link_change`].
    pub fn schedule_link_down(&mut self, at: SimTime, link: u32) -> Result<(), PacketError> {
        self.schedule_link_change(at, link, LinkChange::Down)
    }

    /// Changes `link` at `at` (see the module doc).
    ///
    /// # Errors
    /// `PacketError::Config` with a link going down
    /// under TCP or UET, an unknown link, a zero bandwidth, a loss rate outside [0, 1), or a
    /// time in the past.
    pub fn schedule_link_change(&mut self, at: SimTime, link: u32, change: LinkChange) -> Result<(), PacketError> {
        if change == LinkChange::Down && (self.tcp_on || self.uet_on) {
            return Err(PacketError::Config(
                "link failures during the run are modelled under RoCE only; use transport: roce".into(),
            ));
        }
        if link as usize >= self.topo.num_links() {
            return Err(PacketError::Config(format!("no link {link}")));
        }
        match change {
            LinkChange::Bandwidth(bw) if bw.is_zero() => {
                return Err(PacketError::Config(
                    "a degraded link needs a positive bandwidth; take it down instead".into(),
                ));
            }
            LinkChange::Loss(p) if !(p.is_finite() && (0.0..1.0).contains(&p)) => {
                return Err(PacketError::Config(format!("{p} is not a loss rate in [0, 1)")));
            }
            _ => {}
        }
        if at.as_ps() < self.now {
            return Err(PacketError::Config(format!("a link change at {at} is in the engine's past")));
        }
        let fs = self.faults.get_or_insert_with(Box::default);
        fs.links.push((link, change));
        let i = (fs.links.len() - 1) as u32;
        self.schedule(at.as_ps(), ev(EV_FAULT, i, 0));
        Ok(())
    }

    /// The first flow a failure left with no route, if any.
    pub fn fault_error(&self) -> Option<&str> {
        self.faults.as_ref().and_then(|f| f.error.as_deref())
    }

    /// `EV_FAULT`: `b == 0`: link `links[a]` fails now; else flow watch `a` checks progress.
    pub(super) fn on_fault(&mut self, a: u32, b: u32) {
        if b != 0 {
            return self.fault_check(a);
        }
        let (link, change) = self.faults.as_ref().map_or((0, LinkChange::Up), |f| f.links[a as usize]);
        if self.ww.is_some() {
            self.ww_interrupt();
        }
        let li = link as usize;
        if self.link_err.is_empty() {
            self.link_err = vec![0.0; self.topo.num_links()];
        }
        match change {
            LinkChange::Down => {}
            LinkChange::Up => {
                let base = self.topo.link_error_rate(LinkId(link));
                self.link_err[li] = 1.0 - (1.0 - base) * (1.0 - self.cfg.error_rate_per_link);
                let _ = std::sync::Arc::make_mut(&mut self.topo).set_link_down(LinkId(link), false);
                self.rebuild_ns3_routes();
                return;
            }
            LinkChange::Bandwidth(bw) => return self.set_port_rate(link, bw.bps()),
            LinkChange::Loss(p) => {
                self.link_err[li] = p;
                let _ = std::sync::Arc::make_mut(&mut self.topo).set_link_error_rate(LinkId(link), p);
                if let Some(fs) = self.faults.as_mut() {
                    fs.watch_new = true;
                }
                // Flows already running may lose their tail too.
                for f in 0..self.flows.len() as u32 {
                    if self.flows[f as usize].started && !self.flows[f as usize].done && self.crosses(f, link) {
                        self.watch(f, u64::MAX);
                    }
                }
                return;
            }
        }
        self.link_err[li] = f64::INFINITY;
        let _ = std::sync::Arc::make_mut(&mut self.topo).set_link_down(LinkId(link), true);
        self.rebuild_ns3_routes();
        for f in 0..self.flows.len() as u32 {
            if self.flows[f as usize].done || !self.crosses(f, link) {
                continue;
            }
            if let Err(e) = self.new_paths(f) {
                let fl = &mut self.flows[f as usize];
                // It never finishes: no completion, its timers stop; the run reports why.
                fl.done = true;
                for g in &mut fl.timer_gen {
                    *g = g.wrapping_add(1);
                }
                let msg = format!("flow {} -> {} lost its route when link {link} failed: {e}", fl.src, fl.dst);
                if let Some(fs) = self.faults.as_mut() {
                    fs.error.get_or_insert(msg);
                }
                continue;
            }
            let sent = self.flows[f as usize].max_sent.max(self.flows[f as usize].snd_nxt);
            self.watch(f, sent);
        }
    }

    /// With ns-3's routing tables, computes them again on the topology as it is now (HPCC's
    /// `TakeDownLink`: `CalculateRoutes` over the links that are up).
    fn rebuild_ns3_routes(&mut self) {
        if self.cfg.routing == PacketRouting::Ns3 {
            let link_dst: Vec<u32> = (0..self.ports.len()).map(|l| self.ports[l].dst).collect();
            self.routes = Some(crate::packet::route::Ns3Routes::build(&self.topo, &self.ns3_ids, &link_dst));
        }
    }

    /// Puts flow `f` under the ACK-timeout watch until it has acknowledged `until` bytes.
    fn watch(&mut self, f: u32, until: u64) {
        let una = self.flows[f as usize].snd_una;
        let Some(fs) = self.faults.as_mut() else { return };
        fs.watch.push((f, una, until));
        let w = (fs.watch.len() - 1) as u32;
        self.schedule(self.now + FAULT_ACK_TIMEOUT.as_ps(), ev(EV_FAULT, w, 1));
    }

    /// A flow starting: watched when a lossy link exists (see the module doc).
    #[inline]
    pub(super) fn fault_on_start(&mut self, f: u32) {
        if self.faults.as_ref().is_some_and(|fs| fs.watch_new) {
            self.watch(f, u64::MAX);
        }
    }

    /// Link `link` serializes at `bps` from its next packet on; a switch port takes the ECN
    /// thresholds of that rate.
    fn set_port_rate(&mut self, link: u32, bps: u64) {
        let li = link as usize;
        let _ = std::sync::Arc::make_mut(&mut self.topo).set_link_bandwidth(LinkId(link), llmsim_core::Bandwidth::from_bps(bps));
        self.link_rate[li] = bps;
        let from_switch = !self.topo.is_host(llmsim_core::NodeId(self.ports[li].src));
        let ecn = if from_switch && self.cfg.ecn {
            super::build::switch_ecn(&self.cfg, bps)
        } else {
            None
        };
        let (kmin, kmax, pmax) = ecn.map_or((u64::MAX, u64::MAX, 0.0), |e| (e.kmin_bytes, e.kmax_bytes, e.pmax));
        let mut want = RateInfo {
            bps,
            tx_cache: [(u32::MAX, 0); 2],
            kmin,
            kmax,
            pmax,
            int_rate: crate::packet::cc::int::int_rate_index(bps),
        };
        self.finish_rate(&mut want);
        let same = |ri: &RateInfo| (ri.bps, ri.kmin, ri.kmax) == (want.bps, want.kmin, want.kmax);
        let r = match (0..self.rates.len()).find(|&r| same(&self.rates[r])) {
            Some(r) => r,
            None => {
                self.rates.push(want);
                self.rates.len() - 1
            }
        };
        self.ports[li].rate = u16::try_from(r).unwrap_or(u16::MAX);
    }

    /// Whether flow `f`'s data or ACK path crosses `link`.
    fn crosses(&self, f: u32, link: u32) -> bool {
        let fl = &self.flows[f as usize];
        if self.paths[fl.path_data as usize..fl.path_ack as usize].contains(&link) {
            return true;
        }
        // The ACK path runs from the receiver until it reaches the sender.
        let mut i = fl.path_ack as usize;
        while let Some(&l) = self.paths.get(i) {
            if l == link {
                return true;
            }
            if self.ports[l as usize].dst == fl.src {
                break;
            }
            i += 1;
        }
        false
    }

    /// Gives flow `f` new data and ACK paths on the topology as it is now (as `add_flow` does).
    /// Wormhole counts a running flow's ACK stream on each link of its ACK path: the count
    /// leaves the old path here and, if a new one is found, moves onto it (a flow left with no
    /// route never finishes and stays uncounted).
    fn new_paths(&mut self, f: u32) -> Result<(), PacketError> {
        let counted = self.flows[f as usize].started && self.ww.is_some();
        if counted {
            self.ww_count_acks(f, false);
        }
        let fl = &self.flows[f as usize];
        let (s, d, ports) = (fl.src, fl.dst, (fl.dport, fl.sport, fl.hash));
        let first = self.paths.len();
        let mut p = std::mem::take(&mut self.paths);
        let mut npaths = 1u8;
        let r = self.route_path_kind(s, d, ports, Kind::Data, &mut p).and_then(|()| {
            if self.cfg.load_balance != LoadBalance::Ecmp {
                npaths = self.equal_cost_paths(s, d, ports, first, &mut p)?;
            }
            let at = p.len();
            self.route_path_kind(d, s, ports, Kind::Ack, &mut p).map(|()| at)
        });
        self.paths = p;
        match r {
            Ok(at) => {
                let fl = &mut self.flows[f as usize];
                fl.path_data = first as u32;
                fl.path_ack = at as u32;
                fl.npaths = npaths;
                fl.path_idx = 0;
                if counted {
                    self.ww_count_acks(f, true);
                }
                Ok(())
            }
            Err(e) => {
                self.paths.truncate(first);
                Err(e)
            }
        }
    }

    /// Watch `w`: if its flow made no progress since the last check, go back to its first
    /// unacknowledged byte; check again later until it is done.
    fn fault_check(&mut self, w: u32) {
        let (f, last, until) = self.faults.as_ref().map_or((0, 0, 0), |fs| fs.watch[w as usize]);
        if self.flows[f as usize].done || self.flows[f as usize].snd_una >= until {
            return;
        }
        // A frozen flow moves at its resume: no progress now is no sign of a lost tail.
        let frozen = self.ww.as_ref().is_some_and(|w| w.flow_frozen(f));
        let fl = &mut self.flows[f as usize];
        if !frozen && fl.snd_una == last && fl.snd_nxt > fl.snd_una {
            fl.snd_nxt = fl.snd_una;
            self.stats.fault_timeouts += 1;
            let h = fl.src;
            self.host_send(h);
        }
        let una = self.flows[f as usize].snd_una;
        if let Some(fs) = self.faults.as_mut() {
            fs.watch[w as usize].1 = una;
        }
        self.schedule(self.now + FAULT_ACK_TIMEOUT.as_ps(), ev(EV_FAULT, w, 1));
    }
}
