//! Workloads shared by the `flow_rates` bench and the `flow_scale` example.
#![allow(dead_code)]

use std::sync::Arc;

use llmsim_core::{Bandwidth, Bytes, NodeId, SimRng, SimTime, TransferId};
use llmsim_net::{Completion, FlowNetwork, Network, Transfer};
use llmsim_topo::generators::flat;
use llmsim_topo::{LinkParams, ScaleUp, Topology};

/// `hosts` GPUs, 8 per DGX H100 server (NVLink 450 GB/s), 400 Gb/s NICs on one switch.
pub fn dgx_flat(hosts: u32) -> Arc<Topology> {
    let nic = LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500));
    Arc::new(flat(hosts, nic, ScaleUp::dgx_h100(), 7).expect("valid flat topology"))
}

/// `hosts` single-GPU hosts, 400 Gb/s NICs on one switch.
pub fn plain_flat(hosts: u32) -> Arc<Topology> {
    let nic = LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500));
    Arc::new(flat(hosts, nic, ScaleUp::none(), 7).expect("valid flat topology"))
}

pub struct RunFigures {
    pub transfers: u64,
    pub sim_time: SimTime,
}

/// Ring all-reduce of `bytes` over hosts `0..n` as one NCCL ring channel runs it: 2(n-1) steps
/// of `bytes / n`; rank r sends step k once it has received step k-1 from rank r-1 and its own
/// send of step k-1 has completed.
pub fn ring_allreduce(net: &mut dyn Network, n: u32, bytes: u64) -> RunFigures {
    let steps = 2 * (n as u64 - 1);
    let chunk = bytes / n as u64;
    let send = |net: &mut dyn Network, step: u64, r: u32, at: SimTime| {
        let t = Transfer::new(
            TransferId(step * n as u64 + r as u64),
            NodeId(r),
            NodeId((r + 1) % n),
            Bytes(chunk),
            at,
        );
        net.submit(t).expect("valid ring transfer");
    };
    // Per rank: sends completed, steps received, a send in flight.
    let mut sent = vec![0u64; n as usize];
    let mut received = vec![0u64; n as usize];
    let mut busy = vec![true; n as usize];
    for r in 0..n {
        send(net, 0, r, SimTime::ZERO);
    }
    let mut done: Vec<Completion> = Vec::with_capacity(n as usize);
    let mut count = 0u64;
    let mut end = SimTime::ZERO;
    while let Some(t) = net.next_event_time() {
        done.clear();
        net.advance_to(t, &mut done);
        for c in &done {
            count += 1;
            end = c.finish;
            sent[c.src.idx()] += 1;
            busy[c.src.idx()] = false;
            received[c.dst.idx()] += 1;
            for r in [c.src.idx(), c.dst.idx()] {
                let k = sent[r];
                if !busy[r] && k < steps && received[r] >= k {
                    busy[r] = true;
                    send(net, k, r as u32, c.finish);
                }
            }
        }
    }
    RunFigures {
        transfers: count,
        sim_time: end,
    }
}

/// `waves` rounds of a random permutation of `bytes` transfers over `hosts` hosts, one round every
/// 10 us: every flow alone on its links (components of one flow).
pub fn disjoint_waves(net: &mut dyn Network, hosts: u32, waves: u32, bytes: u64, seed: u64) -> RunFigures {
    let mut rng = SimRng::seed(seed);
    let mut perm: Vec<u32> = (0..hosts).collect();
    let mut done = Vec::with_capacity(hosts as usize);
    let mut id = 0u64;
    for w in 0..waves {
        rng.shuffle(&mut perm);
        let at = SimTime::from_us(10 * w as u64);
        for (src, &dst) in perm.iter().enumerate() {
            let mut t = Transfer::new(TransferId(id), NodeId(src as u32), NodeId(dst), Bytes(bytes), at);
            t.flow_hash = id;
            net.submit(t).expect("valid transfer");
            id += 1;
        }
        while let Some(t) = net.next_event_time().filter(|t| *t < at + SimTime::from_us(10)) {
            done.clear();
            net.advance_to(t, &mut done);
        }
    }
    while let Some(t) = net.next_event_time() {
        net.advance_to(t, &mut done);
    }
    RunFigures {
        transfers: id,
        sim_time: net.now(),
    }
}

/// A flow network on `hosts` single-GPU hosts holding `flows` long transfers between random
/// pairs, all started at time zero and rated.
pub fn loaded(hosts: u32, flows: u32, seed: u64) -> FlowNetwork {
    let mut net = FlowNetwork::new(plain_flat(hosts));
    let mut rng = SimRng::seed(seed);
    for i in 0..flows as u64 {
        let (s, d) = random_pair(&mut rng, hosts);
        net.submit(Transfer::new(TransferId(i), s, d, Bytes::gib(1024), SimTime::ZERO))
            .expect("valid transfer");
    }
    let mut done = Vec::new();
    net.advance_to(SimTime::ZERO, &mut done);
    net
}

/// One short transfer into the loaded network, run to completion: two recomputations (its
/// arrival and its departure) of the component it joins.
pub fn perturb(net: &mut FlowNetwork, id: u64, rng: &mut SimRng, done: &mut Vec<Completion>) {
    let hosts = net.topology().num_hosts();
    let (s, d) = random_pair(rng, hosts);
    let now = net.now();
    net.submit(Transfer::new(TransferId(id), s, d, Bytes(4096), now))
        .expect("valid transfer");
    // The long flows need seconds; the short one completes first.
    while done.is_empty() {
        let Some(t) = net.next_event_time() else { break };
        net.advance_to(t, done);
    }
    done.clear();
}

fn random_pair(rng: &mut SimRng, hosts: u32) -> (NodeId, NodeId) {
    let s = rng.below(hosts as u64) as u32;
    let d = (s + 1 + rng.below(hosts as u64 - 1) as u32) % hosts;
    (NodeId(s), NodeId(d))
}
