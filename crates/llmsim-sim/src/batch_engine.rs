//! The batch engine for flow-level sweeps (issue 36): the points of a sweep that share
//! structure run over structure built once per group, and each point simulates one
//! data-parallel replica instead of all of them, with results equal to a single run's.
//!
//! Where the time of one flow-level run goes (perf, GPT-3 13B on 128 H100s, TP2 DP64, 2026-11-26):
//! ~85% in the system engine's per-unit node events (`try_start`, `complete`, the event heap,
//! the scale-up alpha-beta time of TP collectives), ~5% in the flow network, the rest in set-up.
//! The 64 data-parallel replicas run identical programs and meet only in their data-parallel
//! collectives, so ~63/64 of that event work is repeated work. This engine removes it:
//!
//! - **Shared per group** (points with equal model, training, parallel plan, cluster shape and
//!   topology family; they differ in link bandwidths and latencies, NCCL settings, GPU type,
//!   compute settings): the workload DAG (one per group), the topology with its routing rules (one
//!   per distinct link parameters), and the segment times and per-op table (one per GPU type
//!   and compute setting). See [`crate::batch::Shared`].
//! - **Per point**: only what the varied parameters change: its network (link capacities and
//!   latencies as columns of its flow network), its collective plans (NCCL choice), and the
//!   dynamic state of its engine.
//! - **Replica folding.** A point simulates replica 0's units; every data-parallel collective
//!   still puts every replica's transfers on the flow network (its host sets span all
//!   replicas), so link sharing is unchanged. This is exact when nothing tells replicas apart:
//!   no pipeline sends (pp = 1), no context- or expert-parallel groups inside a replica (cp = ep
//!   = 1), TP inside one server (its collectives take the scale-up time, off the network), one
//!   program for every unit (a generated Megatron workload), and no per-unit output (trace,
//!   flows). By induction over events every replica then has replica 0's timeline: the same
//!   programs, the same segment times, and collectives that start and finish at the same times
//!   for all their members. The report is rebuilt as the single run's: every replica's account
//!   is replica 0's, and the counters that count per unit are scaled by the replica count.
//! - Points that cannot fold (the [`blockers`]) run on the thread pool as before.
//!
//! Equality with single runs is not assumed from the argument above but checked: the property
//! test `tests/batch_engine.rs` compares the whole report (every field but the wall time) of
//! random points against [`crate::simulate`], and `llmsim-sweep`'s tests compare whole sweeps.

use std::time::Instant;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use llmsim_core::{Bytes, LinkId, SimTime};
use llmsim_net::flow::FlowNetwork;
use llmsim_net::route::RouteShape;
use llmsim_net::{Completion, NetError, NetStats, Network, PacketDetails, RouteSpec, Transfer};
use llmsim_topo::Topology;
use llmsim_workload::dag::{DagNodeKind, Group, Workload};
use llmsim_workload::megatron;

use crate::ops::{OpRow, op_rows, time_segments};
use crate::setup::{cluster_setup, compute_model, resolve, tp_overlap_timer, transformer_info};
use crate::{Backend, Layout, Outcome, RunOptions, Scenario, Shared, SimError, engine, estimate, report};

/// Why a point cannot run on the batch engine: the field and what about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The scenario field that blocks, as in `network.backend`.
    pub field: &'static str,
    /// What about the field blocks the batch engine.
    pub message: String,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn blocker(field: &'static str, message: impl Into<String>) -> Blocker {
    Blocker {
        field,
        message: message.into(),
    }
}

/// What keeps `s` off the batch engine (empty: it can run there). A scenario that does not
/// resolve (a plan that does not divide, a model that does not fit) has no blocker: the batch
/// engine reports the same error as a single run, from the same checks.
pub fn blockers(s: &Scenario, opts: &RunOptions) -> Vec<Blocker> {
    let mut b = Vec::new();
    if s.workload.is_some() {
        b.push(blocker("workload", "imported traces give every rank its own program"));
    }
    if s.dlrm.is_some() {
        b.push(blocker("dlrm", "DLRM workloads run on the thread pool"));
    }
    if !matches!(s.network.backend, Backend::Flow | Backend::Analytical) {
        b.push(blocker(
            "network.backend",
            format!("{:?}: the batch engine runs flow-level (and analytical) points", s.network.backend).to_lowercase(),
        ));
    }
    if s.network.traffic_classes.is_some() {
        b.push(blocker("network.traffic_classes", "traffic classes run on the thread pool"));
    }
    if !s.jobs.is_empty() {
        b.push(blocker("jobs", "several jobs on one fabric run on the thread pool"));
    }
    if !s.faults.is_empty() {
        b.push(blocker("faults", "failed links and stragglers make replicas differ"));
    }
    if s.output.trace {
        b.push(blocker("output.trace", "a trace records every rank's timeline"));
    }
    if s.output.flows {
        b.push(blocker("output.flows", "a flow table records every transfer"));
    }
    if opts.ideal_comm {
        b.push(blocker("ideal_comm", "runs with ideal communication go to the thread pool"));
    }
    if !b.is_empty() || s.model.is_none() {
        return b;
    }
    let Ok(r) = resolve(s) else { return b };
    let p = &r.parallel;
    if p.pp > 1 {
        b.push(blocker(
            "parallel.pp",
            format!("pp={}: pipeline sends take each replica's own paths, so replicas differ", p.pp),
        ));
    }
    if p.cp > 1 {
        b.push(blocker(
            "parallel.cp",
            format!("cp={}: context-parallel traffic stays inside a replica", p.cp),
        ));
    }
    if p.ep > 1 {
        b.push(blocker(
            "parallel.ep",
            format!("ep={}: expert-parallel groups split the replicas", p.ep),
        ));
    }
    let gpn = u64::from(s.cluster.gpus_per_node.max(1));
    if p.tp > gpn || !gpn.is_multiple_of(p.tp.max(1)) {
        b.push(blocker(
            "parallel.tp",
            format!(
                "tp={} does not fit evenly in a server (gpus_per_node={gpn}): TP collectives would cross the network",
                p.tp
            ),
        ));
    }
    b
}

/// The structure a group of batched points shares: model, training, parallel plan, cluster
/// shape, topology family and seed. Points with equal keys differ only in what the batch
/// engine keeps per point (link parameters, NCCL settings, GPU type, compute settings).
pub fn group_key(s: &Scenario) -> String {
    let family = serde_json::to_value(&s.cluster.topology)
        .ok()
        .and_then(|v| v.get("kind").cloned())
        .unwrap_or_default();
    serde_json::to_string(&(
        &s.model,
        &s.training,
        &s.parallel,
        s.cluster.gpus,
        s.cluster.nodes,
        s.cluster.gpus_per_node,
        family,
        s.network.backend,
        s.seed,
    ))
    .unwrap_or_default()
}

/// Runs one point of a batch: the same checks and errors as [`crate::simulate_shared`], over the
/// batch's shared structure, simulating one data-parallel replica. The caller checks
/// [`blockers`] first; a point with blockers gets an internal error.
///
/// # Errors
/// As [`crate::simulate`].
pub fn simulate_batched(s: &Scenario, opts: &RunOptions, shared: &Shared) -> Result<Outcome, SimError> {
    if let Some(b) = blockers(s, opts).first() {
        return Err(SimError::Internal(format!("not a batch-engine point: {b}")));
    }
    let wall = Instant::now();
    let r = resolve(s)?;
    let wl = shared.workload(&(&r.model, &r.training, &r.parallel), || {
        megatron::generate(&r.model, &r.training, &r.parallel).map_err(SimError::from)
    })?;
    let layout = Layout::of(&r.parallel);
    let info = transformer_info(&r, &wl);
    let ub = tp_overlap_timer(s, &r.parallel, r.gpu, opts.ideal_comm)?;
    let gpu = info.gpu;
    // The segment times and op table of this GPU and compute setting, once per group.
    let timed = shared.timed(
        &(
            &r.model,
            &r.training,
            &r.parallel,
            *gpu,
            &s.compute,
            &s.base_dir,
            s.cluster.nvlink_bandwidth,
            s.cluster.gpus_per_node,
        ),
        || {
            let cm = compute_model(s, gpu, r.parallel.world_size())?;
            let (seg_time, ops) = time_segments(&wl, &cm, &r.training, ub.as_ref())?;
            let host = crate::host::for_run(s.compute.host.as_ref(), &wl, &ops, &r.parallel)?;
            Ok((seg_time, op_rows(&wl, &ops), host))
        },
    );
    // In `run_workload`'s order: the compute model's errors, the slowdown check, the memory
    // estimate, the topology and protocol; the segment timing's own errors last.
    if timed.is_err() {
        compute_model(s, gpu, r.parallel.world_size())?;
    }
    if !(s.compute.overlap_slowdown >= 1.0 && s.compute.overlap_slowdown.is_finite()) {
        return Err(SimError::Scenario {
            field: "compute.overlap_slowdown".into(),
            message: format!("{} must be a finite factor >= 1.0", s.compute.overlap_slowdown),
        });
    }
    let analytical = s.network.backend == Backend::Analytical;
    // A single run folds only on the analytical backend: its estimate (and memory refusal)
    // counts every replica on flow.
    let single_fold = analytical && !opts.no_fold && layout.dp > 1;
    let est = estimate::estimate(
        &wl,
        layout,
        if single_fold { 1 } else { layout.dp },
        u64::from(info.gpus),
        s.network.backend,
    );
    if !opts.ignore_memory_estimate
        && let Some(available) = estimate::available_memory()
        && est.memory_bytes > available
    {
        return Err(SimError::TooLarge { estimate: est, available });
    }
    // With `no_fold` an analytical single run simulates every replica; so does this one.
    let fold = layout.dp > 1 && !(analytical && opts.no_fold);
    let active_dp = if fold { 1 } else { layout.dp };
    let (topo, su, plan) = cluster_setup(s, gpu, info.gpus, shared)?;
    let su = crate::setup::with_flex(su, &s.parallel, gpu);
    let timed = timed?;
    let (seg_time, ops_rows): (&[SimTime], &[OpRow]) = (&timed.0, &timed.1);
    let symmetry = if single_fold {
        format!(
            "data-parallel replicas folded: replica 0 of {} simulated (exact: the analytical backend has no contention; collectives still span every replica's hosts)",
            layout.dp
        )
    } else if s.network.backend == Backend::Flow && fold && !opts.no_fold && s.network.fold != crate::FoldMode::Off {
        // As the single run folds a flow-level point without pipeline traffic.
        crate::fold::FoldReport::new("exact", layout.dp, &engine::FoldStats::default()).line(layout.dp)
    } else if s.network.backend == Backend::Flow {
        crate::run::FLOW_PLAIN.to_string()
    } else {
        String::new()
    };
    let net: Box<dyn Network> = match s.network.backend {
        // The route cache holds one path per transfer: not for flows spread over their paths.
        Backend::Flow
            if !matches!(
                s.network.load_balance(),
                llmsim_net::packet::LoadBalance::Spray | llmsim_net::packet::LoadBalance::Adaptive
            ) =>
        {
            let routes = shared.routes(&route_key(s, info.gpus, s.cluster.gpus_per_node), &topo);
            match routes {
                Some(cache) => Box::new(Routed {
                    inner: FlowNetwork::new(topo.clone()),
                    cache,
                }),
                None => s.network.build(topo.clone(), s.seed)?,
            }
        }
        _ => s.network.build(topo.clone(), s.seed)?,
    };
    let eopts = engine::EngineOptions {
        plan,
        scale_up: su,
        ideal_comm: opts.ideal_comm,
        overlap_slowdown: s.compute.overlap_slowdown,
        trace_units: Vec::new(),
        record_flows: false,
        active_dp,
        mirror_p2p: false,
        stop_on_divergence: false,
        compute_slowdown: Vec::new(),
        host: timed.2.clone(),
        hosts: None,
        traffic_classes: None,
        live: None,
        p2p_eager_bytes: s.p2p_eager_bytes(),
    };
    let mut run = engine::SystemEngine::new(topo.clone(), net, &wl, layout, seg_time, eopts).run(&mut |_, _| {})?;
    if fold && !single_fold {
        unfold(&mut run, &wl, layout);
    }
    let mut report = report::build(
        s,
        &info,
        &wl,
        &run,
        ops_rows,
        layout,
        &topo,
        wall.elapsed().as_secs_f64(),
        &symmetry,
    );
    if s.network.backend == Backend::Flow && fold && !opts.no_fold && s.network.fold != crate::FoldMode::Off {
        report.fold = Some(crate::fold::FoldReport::new("exact", layout.dp, &engine::FoldStats::default()));
    }
    Ok(Outcome {
        report,
        engine: run,
        workload: wl,
        ops: ops_rows.to_vec(),
        layout,
        topo,
        estimate: est,
    })
}

/// Turns the run of replica 0 into the run of every replica: each replica's units get replica
/// 0's accounts, and the counters kept per unit (nodes executed; collectives of groups inside
/// one replica, which every replica issues) are scaled by the replica count. Collectives over
/// groups that span the replicas start once for all of them, folded or not.
pub(crate) fn unfold(run: &mut engine::EngineRun, wl: &Workload, layout: Layout) {
    let dp = u64::from(layout.dp);
    run.nodes_executed *= dp;
    // Collectives of groups within one replica, in replica 0's programs.
    let mut per_replica = 0u64;
    let mut per_kind: Vec<(&'static str, u64)> = Vec::new();
    for u in (0..layout.units()).filter(|u| layout.coords(*u).1 == 0) {
        let prog = &wl.stages[layout.stage(u) as usize];
        for n in &prog.nodes {
            if let DagNodeKind::CommColl { group, .. } = n.kind {
                let within = match group {
                    Group::Tp => true,
                    g => layout
                        .group_units(u, g)
                        .is_some_and(|(_, us)| us.iter().all(|x| layout.coords(*x).1 == 0)),
                };
                if within {
                    per_replica += 1;
                    match per_kind.iter_mut().find(|(k, _)| *k == group.name()) {
                        Some((_, n)) => *n += 1,
                        None => per_kind.push((group.name(), 1)),
                    }
                }
            }
        }
    }
    run.collectives += per_replica * (dp - 1);
    // The per-kind counts too; a kind's extra collectives cross the network as replica 0's did
    // (all or none: the groups within a replica are TP groups inside one server).
    for (kind, n) in per_kind {
        if let Some(c) = run.collectives_by_group.iter_mut().find(|c| c.group == kind) {
            let extra = n * (dp - 1);
            let on_network = (extra * c.on_network).checked_div(c.collectives).unwrap_or(0);
            c.collectives += extra;
            c.on_network += on_network;
        }
    }
    // Every replica's account is replica 0's (the first iteration's too, with several).
    let unfold = |folded: Vec<(u32, engine::UnitAccount)>| {
        let mut units = Vec::with_capacity(layout.units() as usize);
        for u in 0..layout.units() {
            let (c, _, p) = layout.coords(u);
            let rep = layout.unit(c, 0, p);
            if let Some((_, a)) = folded.iter().find(|(x, _)| *x == rep) {
                units.push((u, a.clone()));
            }
        }
        units
    };
    run.units = unfold(std::mem::take(&mut run.units));
    if !run.first_units.is_empty() {
        run.first_units = unfold(std::mem::take(&mut run.first_units));
    }
}

/// How a sweep's points split between the batch engine and the thread pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partition {
    /// Per point: `Some(group)` (an index into the groups) or `None` (thread pool).
    pub group: Vec<Option<usize>>,
    /// Number of groups.
    pub groups: usize,
    /// Per point: why it cannot batch (empty for batched points).
    pub blockers: Vec<Vec<Blocker>>,
}

impl Partition {
    /// Points on the batch engine.
    pub fn batched(&self) -> usize {
        self.group.iter().filter(|g| g.is_some()).count()
    }

    /// Points on the thread pool.
    pub fn fallback(&self) -> usize {
        self.group.len() - self.batched()
    }
}

/// Splits scenarios into batch-engine groups and thread-pool points.
pub fn partition(scenarios: &[Scenario], opts: &RunOptions) -> Partition {
    let mut keys: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut part = Partition::default();
    for s in scenarios {
        let b = blockers(s, opts);
        if b.is_empty() {
            let n = keys.len();
            let g = *keys.entry(group_key(s)).or_insert(n);
            part.group.push(Some(g));
        } else {
            part.group.push(None);
        }
        part.blockers.push(b);
    }
    part.groups = keys.len();
    part
}

/// The structure of a scenario's topology: its spec without link bandwidths and latencies, the
/// GPU count, the server size and the seed. Topologies with equal keys route alike.
fn route_key(s: &Scenario, gpus: u32, gpus_per_node: u32) -> String {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|k, _| !matches!(k.as_str(), "bandwidth" | "latency" | "plane_bandwidth"));
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(&s.cluster.topology).unwrap_or_default();
    strip(&mut v);
    format!("{v} {gpus} {gpus_per_node} {}", s.seed)
}

/// Routes of one topology structure, shared by the experiments over it: each transfer's links
/// are found once ([`RouteShape`]); its latency and bottleneck are recomputed per experiment
/// from that experiment's link parameters.
pub(crate) struct RouteCache {
    links: usize,
    nodes: usize,
    map: RwLock<HashMap<RouteKey, Arc<RouteShape>>>,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
}

type RouteKey = (u32, u32, u64, RouteSpec);

/// Most routes a cache holds; past it, routes are computed per transfer (as a single run does).
const ROUTES_MAX: usize = 1 << 20;

impl RouteCache {
    pub(crate) fn new(topo: &Topology) -> Self {
        RouteCache {
            links: topo.num_links(),
            nodes: topo.num_nodes(),
            map: RwLock::new(HashMap::new()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Whether `topo` has the structure this cache was built on (a guard: the key says so).
    pub(crate) fn fits(&self, topo: &Topology) -> bool {
        self.links == topo.num_links() && self.nodes == topo.num_nodes()
    }
}

/// A flow network that takes its routes from a [`RouteCache`]: the same flows as the plain
/// network (the shape's links and summary are [`llmsim_net::route::expand`]'s, checked by
/// `route.rs`'s tests and by the batch engine's property test).
struct Routed {
    inner: FlowNetwork,
    cache: Arc<RouteCache>,
}

impl Network for Routed {
    fn topology(&self) -> &Topology {
        self.inner.topology()
    }

    fn now(&self) -> SimTime {
        self.inner.now()
    }

    fn submit(&mut self, t: Transfer) -> Result<(), NetError> {
        let key = (t.src.0, t.dst.0, t.flow_hash, t.route.clone());
        let hit = self.cache.map.read().expect("route cache lock").get(&key).cloned();
        let shape = match hit {
            Some(sh) => {
                self.cache.hits.fetch_add(1, Ordering::Relaxed);
                sh
            }
            None => match RouteShape::of(self.inner.topology(), &t) {
                Ok(sh) => {
                    self.cache.misses.fetch_add(1, Ordering::Relaxed);
                    let sh = Arc::new(sh);
                    let mut m = self.cache.map.write().expect("route cache lock");
                    if m.len() < ROUTES_MAX {
                        m.insert(key, sh.clone());
                    }
                    sh
                }
                // The plain path gives the single run's error.
                Err(_) => return self.inner.submit(t),
            },
        };
        let sum = shape.summary(self.inner.topology());
        self.inner.submit_routed(t, &shape.links, sum)
    }

    fn next_event_time(&self) -> Option<SimTime> {
        self.inner.next_event_time()
    }

    fn advance_to(&mut self, t: SimTime, done: &mut Vec<Completion>) {
        self.inner.advance_to(t, done);
    }

    fn advance_until_completion(&mut self, limit: SimTime, done: &mut Vec<Completion>) {
        self.inner.advance_until_completion(limit, done);
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    fn finish(&mut self) -> Result<(), NetError> {
        self.inner.finish()
    }

    fn stats(&self) -> NetStats {
        self.inner.stats()
    }

    fn packet_details(&self) -> Option<PacketDetails> {
        self.inner.packet_details()
    }

    fn link_bytes(&self) -> &[Bytes] {
        self.inner.link_bytes()
    }

    fn set_link_bytes(&mut self, on: bool) {
        self.inner.set_link_bytes(on);
    }

    fn link_utilization(&self, link: LinkId) -> f64 {
        self.inner.link_utilization(link)
    }
}

/// Shared per group: used by [`simulate_batched`] through [`Shared::timed`].
pub(crate) type Timed = (Vec<SimTime>, Vec<OpRow>, Option<Arc<engine::HostDispatch>>);
