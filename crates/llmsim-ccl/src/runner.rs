//! Executes a [`CollectivePlan`] on any [`Network`]: releases each step when its dependencies
//! finish (plus the step's overhead), and records when every step started and finished. The
//! dependency release is [`PlanCursor`], which the system simulator's engine uses too.

use llmsim_core::csr::Reversed;
use llmsim_core::{EventQueue, SimTime, TransferId};
use llmsim_net::{Completion, Network};

use crate::CclError;
use crate::plan::{CollectivePlan, StepStart};

/// When each plan node ran.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRun {
    /// The start time given to [`execute`].
    pub start: SimTime,
    /// When the last node finished; `start` for an empty plan.
    pub finish: SimTime,
    /// When each node started, by node index.
    pub node_start: Vec<SimTime>,
    /// When each node finished, by node index.
    pub node_finish: Vec<SimTime>,
}

impl PlanRun {
    /// Time from start to finish.
    pub fn duration(&self) -> SimTime {
        self.finish - self.start
    }
}

/// Who waits on each node of a plan (its reverse edges), and whether on its data: built once
/// per plan and shared by every run of it.
#[derive(Clone, Debug)]
pub struct PlanEdges {
    rev: Reversed,
    dependent_is_data: Vec<bool>,
}

impl PlanEdges {
    /// The reverse edges of `plan`.
    pub fn of(plan: &CollectivePlan) -> PlanEdges {
        let (rev, dependent_is_data) = plan.dependents();
        PlanEdges { rev, dependent_is_data }
    }
}

/// One run's dependency release over a plan: the dependencies each node still waits on and the
/// earliest start the finished ones allow. The one cursor both plan executors use
/// ([`execute`] here and the system simulator's engine).
#[derive(Clone, Debug)]
pub struct PlanCursor {
    indeg: Vec<u32>,
    ready: Vec<SimTime>,
    remaining: u32,
}

impl PlanCursor {
    /// A run of `plan` starting at `t`: a node without dependencies may start after its
    /// overhead; the others wait for theirs ([`PlanCursor::finish`]).
    pub fn start(plan: &CollectivePlan, t: SimTime) -> PlanCursor {
        let n = plan.len() as u32;
        let mut indeg = Vec::with_capacity(n as usize);
        let mut ready = Vec::with_capacity(n as usize);
        for i in 0..n {
            let deps = plan.deps(i).len() as u32;
            indeg.push(deps);
            ready.push(if deps == 0 { t + plan.node(i).overhead } else { t });
        }
        PlanCursor {
            indeg,
            ready,
            remaining: n,
        }
    }

    /// The nodes that start at once: those without dependencies, in order.
    pub fn roots(plan: &CollectivePlan) -> impl Iterator<Item = u32> + '_ {
        (0..plan.len() as u32).filter(|&i| plan.deps(i).is_empty())
    }

    /// When node `i` may start, given the dependencies finished so far.
    pub fn ready_at(&self, i: u32) -> SimTime {
        self.ready[i as usize]
    }

    /// Nodes not finished yet.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Node `i` finished at `t`: releases its dependents (a data dependent also waits for its
    /// own overhead) and appends those with nothing left to wait on to `released`, in edge order.
    pub fn finish(&mut self, plan: &CollectivePlan, edges: &PlanEdges, i: u32, t: SimTime, released: &mut Vec<u32>) {
        self.remaining -= 1;
        let range = edges.rev.range(i);
        for (&d, &is_data) in edges.rev.node[range.clone()].iter().zip(&edges.dependent_is_data[range]) {
            let du = d as usize;
            let at = if is_data { t + plan.node(d).overhead } else { t };
            self.ready[du] = self.ready[du].max(at);
            self.indeg[du] -= 1;
            if self.indeg[du] == 0 {
                released.push(d);
            }
        }
    }
}

/// Runs `plan` on `net` from time `start` until every node has finished. Transfer ids are
/// `id_base + node index`, so several plans can share one network with disjoint bases.
///
/// # Errors
/// A network submission error (a transfer that cannot be routed).
pub fn execute(plan: &CollectivePlan, net: &mut dyn Network, start: SimTime, id_base: u64) -> Result<PlanRun, CclError> {
    let n = plan.len();
    let edges = PlanEdges::of(plan);
    let t_begin = start.max(net.now());
    let mut cursor = PlanCursor::start(plan, t_begin);
    let mut node_start = vec![SimTime::MAX; n];
    let mut node_finish = vec![SimTime::MAX; n];
    let mut local: EventQueue<u32> = EventQueue::new();

    // Starts node i when the cursor allows.
    let launch = |i: u32,
                  cursor: &PlanCursor,
                  node_start: &mut [SimTime],
                  local: &mut EventQueue<u32>,
                  net: &mut dyn Network|
     -> Result<(), CclError> {
        let node = plan.node(i);
        let t0 = cursor.ready_at(i);
        node_start[i as usize] = t0;
        match node.step.start(TransferId(id_base + i as u64), t0) {
            StepStart::Network(tr) => net.submit(tr)?,
            StepStart::EndsAt(t) => local.push(t, i),
        }
        Ok(())
    };

    for i in PlanCursor::roots(plan) {
        launch(i, &cursor, &mut node_start, &mut local, net)?;
    }
    let mut done: Vec<Completion> = Vec::new();
    let mut finished: Vec<(u32, SimTime)> = Vec::new();
    let mut released: Vec<u32> = Vec::new();
    while cursor.remaining() > 0 {
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
            released.clear();
            cursor.finish(plan, &edges, i, t, &mut released);
            for &d in &released {
                launch(d, &cursor, &mut node_start, &mut local, net)?;
            }
        }
    }
    let finish = node_finish.iter().copied().filter(|t| *t != SimTime::MAX).max().unwrap_or(start);
    debug_assert_eq!(cursor.remaining(), 0, "every plan node finishes");
    Ok(PlanRun {
        start,
        finish,
        node_start,
        node_finish,
    })
}
