//! The batch (multi-experiment) runner: Multiverse's single-process multi-experiment (SPME)
//! strategy on CPU. Experiments run on a pool of threads in one process and share what they
//! would otherwise each build: topologies (with their routing rules) and workload programs.
//! Each result is handed to the caller as soon as its experiment finishes.
//!
//! The pool is `jobs` scoped threads pulling the next experiment index from one atomic counter:
//! experiments start in the order given (callers put those that share data next to each other)
//! and a long experiment never holds back the others.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use llmsim_topo::Topology;
use llmsim_workload::dag::Workload;

use crate::{Outcome, RunOptions, Scenario, SimError, simulate_shared};

/// Most entries each cache keeps (oldest evicted first): a 1,024-GPU GPT-3 175B workload is
/// ~100 MB, so the cache must not grow with the sweep.
const CACHE_ENTRIES: usize = 8;

/// A small insertion-ordered cache keyed by a value's `Debug` text (stable within a process).
struct Cache<T> {
    map: HashMap<String, Arc<T>>,
    order: VecDeque<String>,
    hits: u64,
    misses: u64,
}

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache {
            map: HashMap::new(),
            order: VecDeque::new(),
            hits: 0,
            misses: 0,
        }
    }
}

/// Immutable data shared by the experiments of a batch.
#[derive(Default)]
pub struct Shared {
    topologies: Mutex<Cache<Topology>>,
    workloads: Mutex<Cache<Workload>>,
    /// Segment times and op tables per (workload, GPU, compute settings): the batch engine's.
    timed: Mutex<Cache<crate::batch_engine::Timed>>,
    /// Routes per topology structure: the batch engine's.
    routes: Mutex<Cache<crate::batch_engine::RouteCache>>,
}

/// How often the shared caches were hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// Topologies taken from the cache.
    pub topology_hits: u64,
    /// Topologies built (cache misses).
    pub topology_builds: u64,
    /// Workloads taken from the cache.
    pub workload_hits: u64,
    /// Workloads generated (cache misses).
    pub workload_builds: u64,
    /// Batch engine: transfers routed from the route cache, and routes found.
    pub route_hits: u64,
    /// Batch engine: routes found because the route cache did not hold them.
    pub route_misses: u64,
}

fn get_or_build<T>(cache: &Mutex<Cache<T>>, key: &dyn Debug, build: impl FnOnce() -> Result<T, SimError>) -> Result<Arc<T>, SimError> {
    let key = format!("{key:?}");
    {
        let mut c = cache.lock().expect("cache lock");
        if let Some(v) = c.map.get(&key).cloned() {
            c.hits += 1;
            return Ok(v);
        }
        c.misses += 1;
    }
    // Built outside the lock: two threads may build the same value once each; both are equal.
    let v = Arc::new(build()?);
    let mut c = cache.lock().expect("cache lock");
    if !c.map.contains_key(&key) {
        if c.order.len() >= CACHE_ENTRIES
            && let Some(old) = c.order.pop_front()
        {
            c.map.remove(&old);
        }
        c.order.push_back(key.clone());
        c.map.insert(key, v.clone());
    }
    Ok(v)
}

impl Shared {
    /// The topology for `key` (the spec, GPU count, scale-up domain and seed), built once.
    ///
    /// # Errors
    /// What `build` returns.
    pub fn topology(&self, key: &dyn Debug, build: impl FnOnce() -> Result<Topology, SimError>) -> Result<Arc<Topology>, SimError> {
        get_or_build(&self.topologies, key, build)
    }

    /// The workload for `key` (model, training and parallel settings), generated once.
    ///
    /// # Errors
    /// What `build` returns.
    pub fn workload(&self, key: &dyn Debug, build: impl FnOnce() -> Result<Workload, SimError>) -> Result<Arc<Workload>, SimError> {
        get_or_build(&self.workloads, key, build)
    }

    /// The segment times and per-op table for `key` (workload, GPU and compute settings),
    /// computed once.
    ///
    /// # Errors
    /// What `build` returns.
    pub(crate) fn timed(
        &self,
        key: &dyn Debug,
        build: impl FnOnce() -> Result<crate::batch_engine::Timed, SimError>,
    ) -> Result<Arc<crate::batch_engine::Timed>, SimError> {
        get_or_build(&self.timed, key, build)
    }

    /// The route cache of the topology structure `key` (see the batch engine), made on first
    /// use from `topo`; `None` when a cached one does not fit `topo`.
    pub(crate) fn routes(&self, key: &dyn Debug, topo: &Topology) -> Option<Arc<crate::batch_engine::RouteCache>> {
        let c = get_or_build(&self.routes, key, || Ok(crate::batch_engine::RouteCache::new(topo))).ok()?;
        c.fits(topo).then_some(c)
    }

    /// How often each cache was hit so far.
    pub fn stats(&self) -> SharedStats {
        let t = self.topologies.lock().expect("cache lock");
        let w = self.workloads.lock().expect("cache lock");
        let r = self.routes.lock().expect("cache lock");
        let hits = r.map.values().map(|c| c.hits.load(Ordering::Relaxed)).sum();
        let misses = r.map.values().map(|c| c.misses.load(Ordering::Relaxed)).sum();
        SharedStats {
            route_hits: hits,
            route_misses: misses,
            topology_hits: t.hits,
            topology_builds: t.misses,
            workload_hits: w.hits,
            workload_builds: w.misses,
        }
    }
}

/// Runs every scenario on `jobs` threads (0: one per core) and calls `on_done(index, result)` on
/// the calling thread as each finishes, in completion order. `map` turns an outcome into what
/// the caller keeps (run on the worker thread, so the large outcome is dropped there).
pub fn run_batch<R: Send>(
    scenarios: &[Scenario],
    jobs: usize,
    opts: &RunOptions,
    shared: &Shared,
    map: impl Fn(usize, Result<Outcome, SimError>) -> R + Sync,
    on_done: impl FnMut(usize, R),
) {
    run_pool(
        scenarios,
        jobs,
        |_, s| simulate_shared(s, opts, &mut |_, _| {}, shared),
        map,
        on_done,
    );
}

/// The pool under [`run_batch`]: runs `sim(index, scenario)` for every scenario on `jobs`
/// threads (0: one per core); the batch engine runs its points through it too.
pub fn run_pool<R: Send>(
    scenarios: &[Scenario],
    jobs: usize,
    sim: impl Fn(usize, &Scenario) -> Result<Outcome, SimError> + Sync,
    map: impl Fn(usize, Result<Outcome, SimError>) -> R + Sync,
    mut on_done: impl FnMut(usize, R),
) {
    let jobs = if jobs == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        jobs
    }
    .min(scenarios.len())
    .max(1);
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, R)>();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, map, sim) = (&next, &map, &sim);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(s) = scenarios.get(i) else { break };
                    // A panic is a simulator bug, but one experiment's bug must not end a
                    // sweep of thousands: it becomes that experiment's error.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim(i, s))).unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<&str>()
                            .map(|m| (*m).to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err(SimError::Internal(format!("the simulation panicked (a bug; please report): {msg}")))
                    });
                    if tx.send((i, map(i, r))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            on_done(i, r);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn scenario(tp: u32) -> Scenario {
        let y = format!(
            "model: {{ preset: gpt3-13b, num_hidden_layers: 4 }}\ntraining: {{ global_batch_size: 16 }}\nparallel: {{ tp: {tp} }}\ncluster: {{ gpus: 16 }}\noutput: {{ trace: false, flows: false }}\n"
        );
        Scenario::from_yaml(&y, &[], Path::new(".")).unwrap()
    }

    #[test]
    fn batch_equals_one_by_one_and_shares_data() {
        let scs: Vec<Scenario> = [1, 2, 2, 4, 2, 8].into_iter().map(scenario).collect();
        let shared = Shared::default();
        let mut got = vec![None; scs.len()];
        run_batch(
            &scs,
            2,
            &RunOptions::default(),
            &shared,
            |_, r| r.map(|o| o.report.iteration_time_s).map_err(|e| e.to_string()),
            |i, r| got[i] = Some(r),
        );
        for (i, s) in scs.iter().enumerate() {
            let alone = crate::simulate(s, &RunOptions::default(), &mut |_, _| {}).unwrap();
            assert_eq!(got[i].clone().unwrap().unwrap(), alone.report.iteration_time_s, "point {i}");
        }
        let st = shared.stats();
        // One topology for all six (same cluster); four distinct workloads (tp 1, 2, 4, 8).
        assert_eq!(st.topology_builds + st.topology_hits, 6);
        assert!(st.topology_builds <= 2, "{st:?}");
        assert!(st.workload_builds >= 4 && st.workload_builds <= 6, "{st:?}");
    }

    #[test]
    fn errors_are_results_not_panics() {
        let scs = vec![scenario(3), scenario(2)];
        let mut got = Vec::new();
        run_batch(
            &scs,
            1,
            &RunOptions::default(),
            &Shared::default(),
            |_, r| r.map(|_| ()).map_err(|e| e.to_string()),
            |i, r| got.push((i, r)),
        );
        assert_eq!(got.len(), 2);
        assert!(got[0].1.as_ref().unwrap_err().contains("tp"), "{:?}", got[0]);
        assert!(got[1].1.is_ok());
    }
}
