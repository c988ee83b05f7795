//! Executes a [`CollectivePlan`] on any [`Network`]: releases each step when its dependencies
//! finish (plus the step's overhead), and records when every step started and finished.

use llmsim_core::{EventQueue, SimTime, TransferId};
use llmsim_net::{Completion, Network, Transfer};

use crate::CclError;
use crate::plan::{CollectivePlan, Step};

/// When each plan node ran.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRun {
    pub start: SimTime,
    pub finish: SimTime,
    pub node_start: Vec<SimTime>,
    pub node_finish: Vec<SimTime>,
}

impl PlanRun {
    pub fn duration(&self) -> SimTime {
        self.finish - self.start
    }
}

/// Runs `plan` on `net` from time `start` until every node has finished. Transfer ids are
/// `id_base + node index`, so several plans can share one network with disjoint bases.
///
/// # Errors
/// A network submission error (a transfer that cannot be routed).
pub fn execute(plan: &CollectivePlan, net: &mut dyn Network, start: SimTime, id_base: u64) -> Result<PlanRun, CclError> {
    let n = plan.len();
    let mut indeg: Vec<u32> = (0..n as u32).map(|i| plan.deps(i).len() as u32).collect();
    let (rev, dependent_is_data) = plan.dependents();
    let t_begin = start.max(net.now());
    // ready[i]: earliest start allowed by the dependencies finished so far (order deps as they
    // are, data deps plus the node's overhead). A node without dependencies starts after its
    // overhead.
    let mut ready: Vec<SimTime> = (0..n as u32)
        .map(|i| {
            if plan.deps(i).is_empty() {
                t_begin + plan.node(i).overhead
            } else {
                t_begin
            }
        })
        .collect();
    let mut node_start = vec![SimTime::MAX; n];
    let mut node_finish = vec![SimTime::MAX; n];
    let mut local: EventQueue<u32> = EventQueue::new();
    let mut remaining = n;

    // Starts node i at ready[i] + overhead.
    let launch = |i: u32,
                  ready: &[SimTime],
                  node_start: &mut [SimTime],
                  local: &mut EventQueue<u32>,
                  net: &mut dyn Network|
     -> Result<(), CclError> {
        let node = plan.node(i);
        let t0 = ready[i as usize];
        node_start[i as usize] = t0;
        match &node.step {
            Step::Transfer {
                src,
                dst,
                bytes,
                route,
                flow_hash,
            } if bytes.0 > 0 => {
                net.submit(Transfer {
                    id: TransferId(id_base + i as u64),
                    src: *src,
                    dst: *dst,
                    bytes: *bytes,
                    start: t0,
                    flow_hash: *flow_hash,
                    route: route.clone(),
                })?;
            }
            Step::Transfer { .. } => local.push(t0, i),
            Step::Local { duration, .. } => local.push(t0 + *duration, i),
        }
        Ok(())
    };

    for i in 0..n as u32 {
        if indeg[i as usize] == 0 {
            launch(i, &ready, &mut node_start, &mut local, net)?;
        }
    }
    let mut done: Vec<Completion> = Vec::new();
    let mut finished: Vec<(u32, SimTime)> = Vec::new();
    while remaining > 0 {
        let tn = net.next_event_time();
        let tl = local.peek_time();
        finished.clear();
        match (tn, tl) {
            (None, None) => break,
            (_, Some(l)) if tn.is_none_or(|x| l <= x) => {
                while let Some((t, i)) = local.pop_until(l) {
                    finished.push((i, t));
                }
            }
            (Some(x), _) => {
                done.clear();
                net.advance_to(x, &mut done);
                for c in &done {
                    if c.id.0 >= id_base && c.id.0 < id_base + n as u64 {
                        finished.push(((c.id.0 - id_base) as u32, c.finish));
                    }
                }
            }
            (None, Some(_)) => unreachable!("covered by the guard above"),
        }
        for &(i, t) in &finished {
            node_finish[i as usize] = t;
            remaining -= 1;
            let range = rev.range(i);
            for (&d, &is_data) in rev.node[range.clone()].iter().zip(&dependent_is_data[range]) {
                let du = d as usize;
                let at = if is_data { t + plan.node(d).overhead } else { t };
                ready[du] = ready[du].max(at);
                indeg[du] -= 1;
                if indeg[du] == 0 {
                    launch(d, &ready, &mut node_start, &mut local, net)?;
                }
            }
        }
    }
    let finish = node_finish.iter().copied().filter(|t| *t != SimTime::MAX).max().unwrap_or(start);
    debug_assert_eq!(remaining, 0, "every plan node finishes");
    Ok(PlanRun {
        start,
        finish,
        node_start,
        node_finish,
    })
}
