//! A link failing during the run (`faults:` with `at:` after 0, issue 32 §2).
//!
//! At the failure:
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
//! Not with Wormhole fast-forward (a failure breaks a steady state it would have frozen) nor
//! ns-3 routing tables.

use llmsim_core::{LinkId, SimTime};

use super::PacketEngine;
use crate::packet::PacketError;
use crate::packet::config::PacketRouting;
use crate::packet::events::{EV_FAULT, ev};
use crate::packet::lb::LoadBalance;
use crate::packet::tables::Kind;

/// How long a sender whose flow a failure touched waits without progress before it resends from
/// its first unacknowledged byte.
pub const FAULT_ACK_TIMEOUT: SimTime = SimTime::from_us(500);

/// What the engine keeps about failures.
#[derive(Default)]
pub(crate) struct FaultState {
    /// Links to fail, by event operand.
    links: Vec<u32>,
    /// Flows under watch: `(flow, snd_una at the last check)`, by event operand.
    watch: Vec<(u32, u64)>,
    /// The first flow a failure left with no route.
    pub(crate) error: Option<String>,
}

impl PacketEngine {
    /// Fails `link` at `at` (see the module doc).
    ///
    /// # Errors
    /// `PacketError::Config` with Wormhole fast-forward, ns-3 routing tables, TCP, an unknown
    /// link, or a time in the past.
    pub fn schedule_link_down(&mut self, at: SimTime, link: u32) -> Result<(), PacketError> {
        if self.cfg.wormhole.fast_forward {
            return Err(PacketError::Config(
                "a link failing during the run interrupts Wormhole's steady state, which is not modelled yet; turn fast_forward off or fail the link at 0".into(),
            ));
        }
        if self.cfg.routing != PacketRouting::Topology {
            return Err(PacketError::Config(
                "link failures during the run need the topology's routing rule".into(),
            ));
        }
        if self.tcp_on || self.uet_on {
            return Err(PacketError::Config(
                "link failures during the run are modelled under RoCE only; use transport: roce".into(),
            ));
        }
        if link as usize >= self.topo.num_links() {
            return Err(PacketError::Config(format!("no link {link}")));
        }
        if at.as_ps() < self.now {
            return Err(PacketError::Config(format!("a link failure at {at} is in the engine's past")));
        }
        let fs = self.faults.get_or_insert_with(Box::default);
        fs.links.push(link);
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
        let link = self.faults.as_ref().map_or(0, |f| f.links[a as usize]);
        let li = link as usize;
        if self.link_err.is_empty() {
            self.link_err = vec![0.0; self.topo.num_links()];
        }
        self.link_err[li] = f64::INFINITY;
        let _ = std::sync::Arc::make_mut(&mut self.topo).set_link_down(LinkId(link), true);
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
            let una = self.flows[f as usize].snd_una;
            let fs = self.faults.as_mut().expect("set when scheduled");
            fs.watch.push((f, una));
            let w = (fs.watch.len() - 1) as u32;
            self.schedule(self.now + FAULT_ACK_TIMEOUT.as_ps(), ev(EV_FAULT, w, 1));
        }
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
    fn new_paths(&mut self, f: u32) -> Result<(), PacketError> {
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
        let (f, last) = self.faults.as_ref().map_or((0, 0), |fs| fs.watch[w as usize]);
        let fl = &mut self.flows[f as usize];
        if fl.done {
            return;
        }
        if fl.snd_una == last && fl.snd_nxt > fl.snd_una {
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
