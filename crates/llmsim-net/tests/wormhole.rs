//! Wormhole fast-forwarding: off is the exact engine byte for byte (on an ns-3 reference run),
//! the fast-forwarded rate stays within Theorem 2's bound of the exact run's rate over the same
//! interval, no flow beats the physical bound, every flow finishes.

mod common;

use llmsim_core::SimTime;
use llmsim_net::packet::ns3::{Ns3Experiment, fct_text};
use llmsim_net::packet::{CcMode, FlowSpec, PacketConfig, PacketEngine, PacketRouting, WormholeConfig, steady_estimate};

use common::{fat_tree_k4, ns3_cfg, ns3_topo, packet_flow};

const REF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/reference/ns3/runs/");

fn engine(cc: CcMode, ww: Option<WormholeConfig>, flows: &[FlowSpec]) -> PacketEngine {
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let mut e = PacketEngine::new(t, Some(ids), ns3_cfg(cc)).expect("engine");
    if let Some(w) = ww {
        e.set_wormhole(w).expect("knobs");
    }
    for f in flows {
        e.add_flow(*f).expect("flow");
    }
    e
}

fn flow(src: u32, dst: u32, size: u64, start_us: u64, tag: u64) -> FlowSpec {
    packet_flow(src, dst, size, SimTime::from_us(start_us), tag)
}

fn ff(theta: f64, window: usize) -> WormholeConfig {
    WormholeConfig::fast_forwarding(theta, window, window, SimTime::from_us(20), false)
}

/// The folder of reference run `name`, or `None` (and a note) where the reference files are
/// not beside the checkout.
fn reference_run(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::path::PathBuf::from(REF).join(name);
    if dir.join("config.txt").exists() {
        Some(dir)
    } else {
        common::missing_reference(&format!("reference run {}", dir.display()));
        None
    }
}

#[test]
fn off_is_byte_identical_to_the_plain_engine_on_a_reference_run() {
    let Some(dir) = reference_run("ft16_incast_hp") else { return };
    let fct = |knobs: Option<WormholeConfig>| {
        let mut x = Ns3Experiment::load_with(&dir.join("config.txt"), 1, Some(218)).expect("loads");
        if let Some(k) = knobs {
            x.engine.set_wormhole(k).expect("knobs");
        }
        x.run();
        let mut order = Vec::new();
        x.engine.drain_completed(&mut order);
        (fct_text(&x.engine, &order).unwrap(), x.engine.stats())
    };
    let (plain, st_plain) = fct(None);
    let off = WormholeConfig {
        fast_forward: false,
        theta: 0.2,
        window: 3,
        uncontended_window: 2,
        fair_window: 2,
        sample_interval: SimTime::from_us(5),
        memo: false,
    };
    let (knobs_off, st_off) = fct(Some(off));
    assert_eq!(plain, knobs_off, "fast-forward off changes nothing");
    assert_eq!(st_plain, st_off, "not even an event count");
    let reference = std::fs::read_to_string(dir.join("fct.txt")).expect("reference fct.txt");
    assert_eq!(knobs_off, reference, "and stays byte-identical to ns-3");
}

#[test]
fn steady_estimate_is_eq6_and_eq7() {
    let (ok, mean) = steady_estimate(&[100.0, 102.0, 98.0, 100.0], 0.05);
    assert!(ok);
    assert_eq!(mean, 100.0);
    // (102 - 98) / 100 = 4%: not steady under θ = 4%.
    assert!(!steady_estimate(&[100.0, 102.0, 98.0, 100.0], 0.04).0);
    assert!(!steady_estimate(&[0.0, 0.0], 0.5).0, "a stalled flow is not steady");
}

/// Long flows sharing bottlenecks: an incast of `n` senders into host 0 plus a disjoint pair
/// of flows in another pod (a second partition).
fn scenario(n: u32, size: u64, stagger_us: u64) -> Vec<FlowSpec> {
    let mut v: Vec<FlowSpec> = (1..=n)
        .map(|s| flow(4 + s, 0, size, u64::from(s - 1) * stagger_us, u64::from(s)))
        .collect();
    v.push(flow(12, 14, size, 0, 100));
    v.push(flow(13, 15, size / 2, 0, 101));
    v
}

/// Per-flow (start, finish) in ps.
fn fcts(e: &PacketEngine) -> Vec<(u64, u64)> {
    (0..e.num_flows() as u32)
        .map(|f| {
            let r = e.flow_result(f).unwrap();
            (r.start.as_ps(), r.finish.as_ps())
        })
        .collect()
}

/// `flows` fast-forwarded under `cc` with `knobs`, run to the end and checked safe.
fn ff_run(cc: CcMode, knobs: WormholeConfig, flows: &[FlowSpec], what: &str) -> PacketEngine {
    let mut e = engine(cc, Some(knobs), flows);
    e.run();
    assert_safe(&e, flows, what);
    e
}

/// Flow `f`'s skips in `e`'s Wormhole log.
fn skips(e: &PacketEngine, f: usize) -> Vec<llmsim_net::packet::SkipRecord> {
    e.wormhole_log().iter().filter(|r| r.flow as usize == f).copied().collect()
}

/// When flow `f` was first skipped.
fn first_skip(e: &PacketEngine, f: usize) -> SimTime {
    skips(e, f).iter().map(|r| r.start).min().expect("the flow was skipped")
}

/// Relative error of FCT `y` against `x` ((start, finish) pairs).
fn fct_err(x: (u64, u64), y: (u64, u64)) -> f64 {
    ((y.1 - y.0) as f64 - (x.1 - x.0) as f64).abs() / (x.1 - x.0) as f64
}

/// Theorem 2 on the engine, over random steady scenarios (incast + a disjoint pair, DCQCN or
/// HPCC, random θ, sizes, stagger): for every fast-forwarded interval whose exact-run rate
/// samples satisfy the theorem's premise (each within θ·R̂ of R̂), the exact run's average rate
/// R̄ over that interval is within θ / (1 - θ) of the R̂ used. Also: the fast-forwarded run stays
/// safe (no flow faster than its payload at line rate) and complete (every flow finishes, every
/// byte is delivered once). Intervals where the premise fails (the CC drifted after the
/// window looked steady) are counted and printed, not hidden.
#[test]
fn fast_forward_rate_error_is_within_theorem_2() {
    let mut rng = llmsim_core::SimRng::seed(2026);
    let (mut checked, mut premise_failed) = (0, 0);
    for case in 0..6 {
        let n = 2 + rng.below(2) as u32;
        let size = 2_000_000 + rng.below(2_000_000);
        let stagger = rng.below(40);
        let theta = (2 + rng.below(8)) as f64 / 100.0;
        let cc = if case % 2 == 0 { CcMode::Hpcc } else { CcMode::Dcqcn };
        // The last three cases test uncontended partitions (the disjoint pair, when ECMP puts its
        // two flows on different uplinks) on their last 3 samples instead of 6.
        let knobs = WormholeConfig {
            uncontended_window: if case >= 3 { 3 } else { 6 },
            ..ff(theta, 6)
        };
        let flows = scenario(n, size, stagger);
        let mut fast = engine(cc, Some(knobs), &flows);
        fast.run();
        for f in 0..fast.num_flows() as u32 {
            assert_eq!(fast.flow_done(f), Some(true), "case {case}: flow {f} unfinished");
        }
        let total: u64 = flows.iter().map(|f| f.size).sum();
        assert_eq!(fast.stats().payload_delivered, total, "case {case}: bytes delivered once");
        for (f, (s, e)) in fcts(&fast).into_iter().enumerate() {
            let bound = flows[f].size * 8 * 10; // ps at 100 Gbit/s (10 ps per bit)
            assert!(e - s >= bound, "case {case} flow {f}: fct {} ps < physical bound {bound} ps", e - s);
        }
        let iv = knobs.sample_interval.as_ps();
        // Only the first freeze: the exact run is the fast one up to it, not after.
        let first = fast.wormhole_log().iter().map(|r| r.start).min();
        for r in fast
            .wormhole_log()
            .iter()
            .filter(|r| Some(r.start) == first && r.end.as_ps() - r.start.as_ps() >= iv)
        {
            let mut exact = engine(cc, None, &flows);
            let (t0, t1) = (r.start.as_ps(), r.end.as_ps());
            exact.run_until(SimTime::from_ps(t0));
            let a0 = exact.flow_bytes_acked(r.flow).unwrap();
            let mut premise = true;
            let (mut t, mut prev) = (t0, a0);
            while t + iv <= t1 {
                exact.run_until(SimTime::from_ps(t + iv));
                let a = exact.flow_bytes_acked(r.flow).unwrap();
                let rate = (a - prev) as f64 * 8.0 / (iv as f64 * 1e-12);
                premise &= (rate - r.rate_bps).abs() < theta * r.rate_bps;
                (t, prev) = (t + iv, a);
            }
            exact.run_until(SimTime::from_ps(t1));
            let exact_rate = (exact.flow_bytes_acked(r.flow).unwrap() - a0) as f64 * 8.0 / ((t1 - t0) as f64 * 1e-12);
            let err = (r.rate_bps - exact_rate).abs() / exact_rate;
            if !premise {
                premise_failed += 1;
                println!(
                    "case {case} {cc:?} θ={theta}: flow {} premise failed (R̂ {:.3e}, exact {exact_rate:.3e})",
                    r.flow, r.rate_bps
                );
                continue;
            }
            checked += 1;
            assert!(
                err < theta / (1.0 - theta),
                "case {case} {cc:?}: flow {}: R̂ {:.4e} vs exact {exact_rate:.4e}: error {err:.4} >= θ/(1-θ) = {:.4}",
                r.flow,
                r.rate_bps,
                theta / (1.0 - theta)
            );
        }
    }
    println!("Theorem 2 checked on {checked} intervals; premise failed on {premise_failed}");
    assert!(checked > 0, "no interval met the premise: the test would check nothing");
}

#[test]
fn steady_long_flows_are_fast_forwarded_and_stay_close_to_exact() {
    let flows = scenario(3, 20_000_000, 0);
    for cc in [CcMode::Dcqcn, CcMode::Hpcc] {
        let mut exact = engine(cc, None, &flows);
        exact.run();
        let theta = 0.05;
        let knobs = WormholeConfig {
            fast_forward: true,
            ..WormholeConfig::default()
        };
        assert_eq!(knobs.theta, theta);
        let mut fast = engine(cc, Some(knobs), &flows);
        fast.run();
        let w = fast.wormhole_stats().expect("on");
        assert!(w.freezes > 0, "{cc:?}: something was skipped");
        assert!(fast.stats().events < exact.stats().events, "{cc:?}: fewer events");
        let mut sum = 0.0;
        for (f, ((s0, e0), (s1, e1))) in fcts(&exact).into_iter().zip(fcts(&fast)).enumerate() {
            assert_eq!(s0, s1);
            let err = ((e1 - s1) as f64 - (e0 - s0) as f64).abs() / (e0 - s0) as f64;
            println!("{cc:?} flow {f}: exact {} ps, fast-forward {} ps, error {err:.4}", e0 - s0, e1 - s1);
            // Theorem 3 bounds a steady stretch's duration error by θ; the CC's drift between
            // windows (DCQCN's slow fairness convergence) can add about as much again.
            assert!(err < 2.0 * theta, "{cc:?} flow {f}: FCT error {err:.4}");
            sum += err;
        }
        let mean = sum / flows.len() as f64;
        assert!(mean < theta, "{cc:?}: mean FCT error {mean:.4} >= θ");
    }
}

/// §5.3 skip-back: a flow added while its partition is frozen (as `llmsim run` adds transfers
/// on the fly) ends the skip at its start time: its start is honoured, every flow finishes,
/// every byte is delivered once, none beats its line-rate bound. The FCT errors against the exact
/// run are printed, not asserted: here HPCC's incast shares are still drifting towards fairness
/// when the 400 us window looks steady (37.8/24.6/25.0 Gbit/s), and each freeze keeps them,
/// so flow 0 ends about 12% early (bench/HISTORY.md discusses this limit).
#[test]
fn a_flow_arriving_on_a_frozen_partition_skips_back() {
    let flows = scenario(3, 20_000_000, 0);
    let late = flow(9, 0, 5_000_000, 0, 200);
    let knobs = WormholeConfig {
        fast_forward: true,
        ..WormholeConfig::default()
    };
    let cc = CcMode::Hpcc;
    let t_add = SimTime::from_us(1500);
    let mut runs = Vec::new();
    for ww in [None, Some(knobs)] {
        let mut e = engine(cc, ww, &flows);
        e.run_until(t_add);
        let id = e.add_flow(FlowSpec { start: t_add, ..late }).expect("flow");
        e.run();
        assert_eq!(e.flow_done(id), Some(true));
        runs.push(e);
    }
    let (exact, fast) = (&runs[0], &runs[1]);
    let w = fast.wormhole_stats().expect("on");
    assert!(w.skip_backs >= 1, "the late flow found its partition frozen: {w:?}");
    let mut worst = 0.0f64;
    for (f, ((s0, e0), (s1, e1))) in fcts(exact).into_iter().zip(fcts(fast)).enumerate() {
        assert_eq!(s0, s1, "flow {f} starts when asked, not after the planned skip");
        let err = ((e1 - s1) as f64 - (e0 - s0) as f64).abs() / (e0 - s0) as f64;
        println!("flow {f}: exact {} ps, fast-forward {} ps, error {err:.4}", e0 - s0, e1 - s1);
        worst = worst.max(err);
    }
    println!("worst FCT error {worst:.4}");
    let total: u64 = flows.iter().map(|f| f.size).sum::<u64>() + late.size;
    assert_eq!(fast.stats().payload_delivered, total);
    for f in 0..fast.num_flows() as u32 {
        let r = fast.flow_result(f).unwrap();
        assert_eq!(fast.flow_done(f), Some(true));
        assert!(r.finish.as_ps() - r.start.as_ps() >= r.size * 8 * 10, "flow {f} beats 100 Gbit/s");
    }
}

/// Two identical waves: 2 senders into host 0 plus a pair in pod 2, the second wave starting
/// once the first is long done, on the same paths (topology routing, the same ECMP hash per
/// role): the same flow-conflict graph, on quiet links.
fn two_waves(size: u64, gap_us: u64) -> Vec<FlowSpec> {
    let mut v = Vec::new();
    for wave in 0..2u64 {
        let t = wave * gap_us;
        for (role, (src, dst)) in [(5u32, 0u32), (6, 0), (12, 14)].into_iter().enumerate() {
            v.push(FlowSpec {
                flow_hash: role as u64,
                ..flow(src, dst, size, t, wave * 10 + role as u64)
            });
        }
    }
    v
}

fn wave_engine(cc: CcMode, ww: Option<WormholeConfig>, flows: &[FlowSpec]) -> PacketEngine {
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let cfg = PacketConfig {
        routing: PacketRouting::Topology,
        ..ns3_cfg(cc)
    };
    let mut e = PacketEngine::new(t, Some(ids), cfg).expect("engine");
    if let Some(w) = ww {
        e.set_wormhole(w).expect("knobs");
    }
    for f in flows {
        e.add_flow(*f).expect("flow");
    }
    e
}

fn memo_knobs() -> WormholeConfig {
    WormholeConfig { memo: true, ..ff(0.05, 6) }
}

/// Runs `flows` exactly, fast-forwarded alone and with memo from an empty database; checks that
/// the memo run is safe and complete, and prints its Wormhole counters.
fn three_runs(cc: CcMode, flows: &[FlowSpec]) -> (PacketEngine, PacketEngine, PacketEngine) {
    let mut exact = wave_engine(cc, None, flows);
    exact.run();
    let mut plain = wave_engine(cc, Some(ff(0.05, 6)), flows);
    plain.run();
    let mut memo = wave_engine(cc, Some(memo_knobs()), flows);
    memo.run();
    assert_safe(&memo, flows, "memo");
    println!("{cc:?}: {:?}", memo.wormhole_stats().expect("on"));
    (exact, plain, memo)
}

/// Each pair `(a, b)` of `pairs` is the same flow of two identical partitions, one a copy of the
/// other's outcome (a mirrored twin, a replayed run): their FCTs are equal in the memo run. Under
/// HPCC (deterministic) neither is further from the exact run than the closer of the two, plus
/// however far the two differ in the exact run itself. (Under DCQCN ECN marks come from one
/// random stream for all ports, so the copy changes the draws the others see: only the copy is
/// checked.)
fn assert_copies(cc: CcMode, exact: &PacketEngine, memo: &PacketEngine, pairs: &[(usize, usize)]) {
    let (ex, me) = (fcts(exact), fcts(memo));
    let dur = |v: &[(u64, u64)], i: usize| (v[i].1 - v[i].0) as f64;
    let err = |i: usize| (dur(&me, i) - dur(&ex, i)).abs() / dur(&ex, i);
    for &(a, b) in pairs {
        assert_eq!(dur(&me, a), dur(&me, b), "{cc:?}: flow {b} finishes as flow {a} does");
        if cc != CcMode::Hpcc {
            continue;
        }
        let asym = (dur(&ex, a) - dur(&ex, b)).abs() / dur(&ex, a).min(dur(&ex, b));
        let best = err(a).min(err(b));
        for i in [a, b] {
            assert!(
                err(i) <= best + asym + 1e-9,
                "{cc:?} flow {i}: error {:.4} beyond its counterpart's {best:.4} + the exact asymmetry {asym:.4}",
                err(i)
            );
        }
    }
}

/// Every flow finishes, every byte is delivered once, none beats its payload at 100 Gbit/s.
fn assert_safe(e: &PacketEngine, flows: &[FlowSpec], what: &str) {
    for f in 0..e.num_flows() as u32 {
        assert_eq!(e.flow_done(f), Some(true), "{what}: flow {f} unfinished");
        let r = e.flow_result(f).unwrap();
        assert!(
            r.finish.as_ps() - r.start.as_ps() >= r.size * 8 * 10,
            "{what}: flow {f} beats 100 Gbit/s"
        );
    }
    let total: u64 = flows.iter().map(|f| f.size).sum();
    assert_eq!(e.stats().payload_delivered, total, "{what}: bytes delivered once");
}

/// §4 memoization: the second wave's partitions were seen in the first, so they skip their
/// transient (memo hits), the run stays safe and complete with memo on and off, and the
/// second wave's FCTs stay within the same 2θ band as fast-forwarding alone allows.
#[test]
fn a_repeated_wave_hits_the_memo_and_stays_close_to_exact() {
    let flows = two_waves(5_000_000, 3000);
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (exact, plain, memo) = three_runs(cc, &flows);
        assert_safe(&plain, &flows, "fast-forward");
        let w = memo.wormhole_stats().expect("on");
        assert!(w.memo_inserts >= 1, "{cc:?}: the first wave stored its episodes");
        assert!(w.memo_hits >= 1, "{cc:?}: the second wave hit");
        assert!(memo.stats().events < plain.stats().events, "{cc:?}: the hit skipped packet events");
        let theta = memo_knobs().theta;
        let (ex, me, pl) = (fcts(&exact), fcts(&memo), fcts(&plain));
        for f in 0..flows.len() {
            let err = |x: (u64, u64)| ((x.1 - x.0) as f64 - (ex[f].1 - ex[f].0) as f64).abs() / (ex[f].1 - ex[f].0) as f64;
            let (e_memo, e_ff) = (err(me[f]), err(pl[f]));
            println!(
                "{cc:?} flow {f}: exact {} ps, memo {} ps, error {e_memo:.4} (fast-forward alone {e_ff:.4})",
                ex[f].1 - ex[f].0,
                me[f].1 - me[f].0
            );
            if f < 3 {
                // The first wave misses: memo changes nothing there.
                assert_eq!(me[f], pl[f], "{cc:?} flow {f}: a miss runs as without memo");
            } else {
                // The second wave replays the first's transient (plus fast-forwarding's own error).
                assert!(e_memo < 2.0 * theta + err(pl[f - 3]), "{cc:?} flow {f}: FCT error {e_memo:.4}");
            }
        }
    }
}

/// A memo database saved to a file and loaded back gives the same run as handing the
/// in-memory database over.
#[cfg(feature = "memo-db")]
#[test]
fn a_memo_database_round_trips_through_a_file() {
    use llmsim_net::packet::MemoDb;
    let flows = two_waves(5_000_000, 3000);
    let cc = CcMode::Hpcc;
    let mut cold = wave_engine(cc, Some(memo_knobs()), &flows);
    cold.run();
    let db = cold.take_memo_db().expect("memo on");
    assert!(!db.is_empty());
    let dir = std::env::temp_dir().join(format!("llmsim-wormhole-memo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("memo.db");
    let _ = std::fs::remove_file(&path);
    let bytes = db.save(&path).expect("saved");
    assert!(bytes > 0);
    let loaded = MemoDb::load(&path).expect("loaded");
    assert_eq!(loaded.len(), db.len());
    let run = |db: MemoDb| {
        let mut e = wave_engine(cc, Some(memo_knobs()), &flows);
        e.set_memo_db(db).expect("memo on");
        e.run();
        assert_safe(&e, &flows, "warm");
        (fcts(&e), e.stats(), e.wormhole_stats().expect("on"))
    };
    let (a, sa, wa) = run(db);
    let (b, sb, wb) = run(loaded);
    assert_eq!(a, b, "same FCTs");
    assert_eq!(sa, sb, "same events");
    assert_eq!(wa, wb);
    // Warm, even the first wave hits.
    assert!(wa.memo_hits > 1, "{wa:?}");
    let _ = std::fs::remove_dir_all(&dir);
    let off = wave_engine(cc, None, &flows);
    assert!(off.memo_db().is_none());
}

/// A short flow ends before any window can call it steady: its episode ends in a completion,
/// and a lone flow with the same bytes left replays it from a checkpoint two RTTs in to a
/// round trip before the stored completion. Its FCT stays within 1% of the exact run (HPCC and
/// DCQCN: 0.05%); every flow stays safe.
#[test]
fn a_repeated_lone_short_flow_replays_its_completion() {
    let flows = two_waves(1_000_000, 1000);
    let lone = 5; // the second wave's pod-2 pair, alone in its partition
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (exact, plain, memo) = three_runs(cc, &flows);
        let w = memo.wormhole_stats().expect("on");
        assert!(w.memo_hits >= 1, "{cc:?}: the lone flow's completion was replayed");
        assert!(
            memo.stats().events < plain.stats().events,
            "{cc:?}: the replay skipped packet events"
        );
        let (ex, me) = (fcts(&exact), fcts(&memo));
        for f in 0..flows.len() {
            let err = ((me[f].1 - me[f].0) as f64 - (ex[f].1 - ex[f].0) as f64) / (ex[f].1 - ex[f].0) as f64;
            println!(
                "{cc:?} flow {f}: exact {} ps, memo {} ps, error {err:+.4}",
                ex[f].1 - ex[f].0,
                me[f].1 - me[f].0
            );
            if f == lone {
                assert!(err.abs() < 0.01, "{cc:?}: lone short flow replayed {err:+.4} off");
            }
        }
    }
}

/// §5.3 skip-back inside a replayed transient: a flow that joins the incast while the second
/// wave is frozen on a memo hit ends the skip at its start (the stored transient's bytes move
/// pro rata); every flow still finishes, once, never faster than its line rate. HPCC only:
/// a DCQCN incast stays in fast recovery to its end, never steady, so no transient is stored
/// (see `a_dcqcn_incast_in_fast_recovery_is_not_frozen`).
#[test]
fn a_flow_arriving_inside_a_replayed_transient_skips_back() {
    let mut flows = two_waves(5_000_000, 3000);
    flows.push(FlowSpec {
        flow_hash: 7,
        ..flow(9, 0, 2_000_000, 3030, 99)
    });
    {
        let cc = CcMode::Hpcc;
        let mut memo = wave_engine(cc, Some(memo_knobs()), &flows);
        memo.run();
        assert_safe(&memo, &flows, "memo");
        let w = memo.wormhole_stats().expect("on");
        println!("{cc:?}: {w:?}");
        assert!(w.memo_hits >= 1 && w.skip_backs >= 1, "{cc:?}: a hit, then a skip-back: {w:?}");
        let late = memo.flow_result(flows.len() as u32 - 1).unwrap();
        assert_eq!(late.start, SimTime::from_us(3030), "{cc:?}: the late flow starts when asked");
    }
}

/// Two identical incasts in different pods, starting together (in pod 0 into host 0 from its
/// ToR neighbour and from the pod's other ToR; the same in pod 2 into host 8), and optionally a
/// late flow into one of them.
fn twin_incasts(size: u64, late: Option<(u32, u64)>) -> Vec<FlowSpec> {
    let mut v = Vec::new();
    for (k, (a, b, dst)) in [(1u32, 2u32, 0u32), (9, 10, 8)].into_iter().enumerate() {
        for (j, src) in [a, b].into_iter().enumerate() {
            v.push(FlowSpec {
                flow_hash: j as u64,
                ..flow(src, dst, size, 0, (10 * k + j) as u64)
            });
        }
    }
    if let Some((dst, at_us)) = late {
        v.push(FlowSpec {
            flow_hash: 7,
            ..flow(if dst == 0 { 5 } else { 13 }, dst, size / 2, at_us, 99)
        });
    }
    v
}

/// Two identical incasts of long flows (5 MB, long enough to turn steady) start at the same
/// instant: the second mirrors the first from the start (the leader runs on packets and
/// fast-forwards as usual; the twin stays frozen and each of its flows finishes when its
/// counterpart does). With an empty database the run has fewer packet events than
/// fast-forwarding alone (there both incasts run their transients on packets), it is safe and
/// complete, the twin's FCTs are the leader's, and every flow lands within the same band of the
/// exact run as the memo hits of the repeated-wave test.
#[test]
fn a_long_partition_starting_with_an_identical_one_mirrors_it() {
    let flows = twin_incasts(5_000_000, None);
    let theta = memo_knobs().theta;
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (memo, plain_events, errs, exact) = twin_runs(cc, &flows);
        assert!(memo.stats().events < plain_events, "{cc:?}: the twin's transient ran on no packets");
        for (f, &(e_memo, e_ff)) in errs.iter().enumerate() {
            assert!(e_memo < 2.0 * theta + e_ff, "{cc:?} flow {f}: FCT error {e_memo:.4}");
        }
        assert_copies(cc, &exact, &memo, &[(0, 2), (1, 3)]);
    }
}

/// Two mirrored incasts of long flows; 200 us in, one more flow joins each incast at the same
/// instant, on corresponding links: the mirror takes it in (a DP ring meeting an all-to-all on
/// every rail), and the twin's three flows still finish as the leader's do, with fewer packet
/// events than fast-forwarding alone.
#[test]
fn flows_joining_both_mirrored_long_partitions_at_once_extend_the_mirror() {
    let mut flows = twin_incasts(5_000_000, None);
    for (k, (src, dst)) in [(3u32, 0u32), (11, 8)].into_iter().enumerate() {
        flows.push(FlowSpec {
            flow_hash: 7,
            ..flow(src, dst, 2_000_000, 200, 90 + k as u64)
        });
    }
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (memo, plain_events, _, exact) = twin_runs(cc, &flows);
        assert!(
            memo.stats().events < plain_events,
            "{cc:?}: {} events, {plain_events} alone",
            memo.stats().events
        );
        assert_copies(cc, &exact, &memo, &[(0, 2), (1, 3), (4, 5)]);
    }
}

/// Runs `flows` exactly, fast-forwarded alone and with memo from an empty database; checks that
/// the memo run is safe and complete and that one partition waited for (or mirrored) its twin. Returns the
/// memo run, the fast-forward-alone run's packet events, per flow the FCT error against the
/// exact run with memo and with fast-forwarding alone, and the exact run.
fn twin_runs(cc: CcMode, flows: &[FlowSpec]) -> (PacketEngine, u64, Vec<(f64, f64)>, PacketEngine) {
    let (exact, plain, memo) = three_runs(cc, flows);
    let w = memo.wormhole_stats().expect("on");
    assert_eq!(w.memo_deferred, 1, "{cc:?}: one twin waited");
    let (ex, me, pl) = (fcts(&exact), fcts(&memo), fcts(&plain));
    let err = |x: (u64, u64), f: usize| ((x.1 - x.0) as f64 - (ex[f].1 - ex[f].0) as f64).abs() / (ex[f].1 - ex[f].0) as f64;
    let errs: Vec<(f64, f64)> = (0..flows.len()).map(|f| (err(me[f], f), err(pl[f], f))).collect();
    for (f, (e_memo, e_ff)) in errs.iter().enumerate() {
        println!("{cc:?} flow {f}: memo error {e_memo:.4}, fast-forward alone {e_ff:.4}");
    }
    (memo, plain.stats().events, errs, exact)
}

/// A flow arriving 60 us in on either of two mirrored long incasts: on the twin it ends the
/// mirror there (the twin resumes where its leader stands: skip-back); on the leader it changes
/// the leader's partition with no counterpart on the twin, which releases the twin the same way.
/// Every flow finishes, once, never faster than its line rate. A mirror cut short is an
/// approximation: the twin resumes with its leader's bytes and CC state but none of its queue
/// or packets in flight. Under HPCC its flows
/// land 4-7% off here (60 us into a 0.9 ms incast); that is the bound checked. (DCQCN's incast is
/// 10-45% off with fast-forwarding alone, its fairness drift: only safety is checked there.)
#[test]
fn a_flow_arriving_on_a_waiting_twin_or_its_leader_releases_the_twin() {
    for dst in [0u32, 8] {
        let flows = twin_incasts(5_000_000, Some((dst, 60)));
        for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
            let (memo, _, errs, _) = twin_runs(cc, &flows);
            let late = memo.flow_result(flows.len() as u32 - 1).unwrap();
            assert_eq!(late.start, SimTime::from_us(60), "{cc:?}: the late flow starts when asked");
            if cc == CcMode::Hpcc {
                for (f, &(e_memo, _)) in errs.iter().enumerate().take(4) {
                    assert!(e_memo < 0.1, "{cc:?} late flow into {dst}, flow {f}: FCT error {e_memo:.4}");
                }
            }
        }
    }
}

#[test]
fn running_with_progress_reports_gives_the_same_results() {
    // `llmsim ns3 run` advances in slices of simulated time to update its progress bar; the
    // slices must not change a single event, with or without fast-forwarding.
    let Some(dir) = reference_run("ft16_incast_dcqcn") else { return };
    for knobs in [None, Some(ff(0.05, 8))] {
        let load = || {
            let mut x = Ns3Experiment::load_with(&dir.join("config.txt"), 1, Some(218)).expect("loads");
            if let Some(k) = knobs {
                x.engine.set_wormhole(k).expect("knobs");
            }
            x
        };
        let result = |mut x: Ns3Experiment| {
            let mut order = Vec::new();
            x.engine.drain_completed(&mut order);
            (fct_text(&x.engine, &order).unwrap(), x.engine.stats(), x.engine.now())
        };
        let mut whole = load();
        whole.run();
        let mut sliced = load();
        let mut reports = Vec::new();
        sliced.run_with_progress(SimTime::from_us(3), |done, total| reports.push((done, total)));
        let total = sliced.engine.stats().flows_done;
        assert!(reports.len() > 10, "reported {} times", reports.len());
        assert!(reports.windows(2).all(|w| w[0].0 <= w[1].0), "flows done never goes back");
        assert_eq!(reports.last().map(|r| r.0), Some(total), "the last report has every flow done");
        assert!(reports.iter().all(|r| r.1 == total), "the total is the number of flows");
        assert_eq!(result(sliced), result(whole), "same FCTs, same event counts, same end time");
    }
}

/// Mirrored twins: two identical incasts of short flows (1 MB, shorter than a sampling window
/// at line rate, so never steady) start together. The second freezes at once and each of its
/// flows finishes at the instant its counterpart in the leader does, with no packets of its
/// own. The run is safe and complete, the twin's FCTs are the leader's, and the run has fewer
/// packet events than fast-forwarding alone. Under HPCC (deterministic) the twin is as far from
/// the exact run as its leader is, plus however far the two incasts differ in the exact run
/// itself. Under DCQCN the leader itself moves: ECN marks are drawn from one random stream for
/// all ports, and the twin draws none, so the leader's marks differ from the exact run's (its
/// flows land 1-10% off here, as a different seed would put them); only the copy is checked.
#[test]
fn a_short_partition_starting_with_an_identical_one_mirrors_it() {
    let flows = twin_incasts(1_000_000, None);
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (memo, plain_events, _, exact) = twin_runs(cc, &flows);
        let w = memo.wormhole_stats().expect("on");
        assert_eq!(w.memo_hits, 1, "{cc:?}: the twin finished by mirroring");
        assert!(
            memo.stats().events * 10 < plain_events * 7,
            "{cc:?}: the twin ran no packets ({} events, {plain_events} alone)",
            memo.stats().events
        );
        // Flows 0-1 and 2-3 are the two incasts, in the same roles.
        assert_copies(cc, &exact, &memo, &[(0, 2), (1, 3)]);
    }
}

/// A flow joining the leader's partition, or arriving on the twin's links, mid-way ends the
/// mirror: the twin resumes on packets where its leader stands. Every flow still finishes,
/// once, never faster than its line rate. This is the approximation of a mirror cut short (as
/// for a deferred twin): the twin resumes with its leader's bytes and CC state but none of its
/// packets in flight, and 30 us into these 1 MB HPCC incasts its flows land 3-15% off (printed);
/// that cost is why `bench/wormhole.sh` reports the MoE run's p99 and worst transfer.
#[test]
fn a_flow_arriving_on_a_mirrored_twin_or_its_leader_ends_the_mirror() {
    for dst in [0u32, 8] {
        let flows = twin_incasts(1_000_000, Some((dst, 30)));
        for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
            let (memo, _, errs, _) = twin_runs(cc, &flows);
            let w = memo.wormhole_stats().expect("on");
            assert_eq!(w.memo_hits, 0, "{cc:?} late flow into {dst}: the mirror did not finish");
            let late = memo.flow_result(flows.len() as u32 - 1).unwrap();
            assert_eq!(late.start, SimTime::from_us(30), "{cc:?}: the late flow starts when asked");
            assert!(errs.iter().all(|e| e.0.is_finite()), "{cc:?}: every flow has an FCT");
        }
    }
}

/// Four identical incasts of long flows starting together: 5 MB into host 4p of pod p from
/// hosts 4p+1 and 4p+2, for the four pods of a k=4 fat-tree.
fn four_identical_incasts() -> Vec<FlowSpec> {
    let mut flows = Vec::new();
    for p in 0..4u32 {
        for (j, src) in [4 * p + 1, 4 * p + 2].into_iter().enumerate() {
            flows.push(FlowSpec {
                flow_hash: j as u64,
                ..flow(src, 4 * p, 5_000_000, 0, u64::from(10 * p) + j as u64)
            });
        }
    }
    flows
}

/// Four identical incasts of long flows (5 MB into host 4p of pod p from hosts 4p+1 and 4p+2)
/// start together: one leads, three mirror it. 100 us in, a short flow from a sender of pod
/// 2's incast into pod 3's incast's receiver joins both those twins' partitions at once: both
/// are released to packets. (Before, only the first twin of the merged partition was; the other
/// stayed frozen, parking the new flow's packets on its links until its leader's end, 800+ us
/// later; at 4,096 GPUs such waits chained into a stall until the 10 s watchdog.) The late
/// flow finishes within twice its exact FCT, every flow finishes safely, and no watchdog fired.
#[test]
fn a_flow_joining_two_mirrored_twins_releases_both() {
    let mut flows = four_identical_incasts();
    flows.push(FlowSpec {
        flow_hash: 7,
        ..flow(9, 12, 200_000, 100, 99)
    });
    let late = flows.len() - 1;
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (exact, _, memo) = three_runs(cc, &flows);
        let w = memo.wormhole_stats().expect("on");
        assert!(w.memo_deferred >= 3, "{cc:?}: three twins mirrored the leader");
        assert_eq!(w.watchdog_resumes, 0, "{cc:?}: no twin waited for the watchdog");
        let (ex, me) = (fcts(&exact)[late], fcts(&memo)[late]);
        println!(
            "{cc:?}: late flow FCT exact {} ns, memo {} ns",
            (ex.1 - ex.0) / 1000,
            (me.1 - me.0) / 1000
        );
        assert!(
            me.1 - me.0 < 2 * (ex.1 - ex.0),
            "{cc:?}: the late flow took {} ns, {} ns exact: held by a frozen twin",
            (me.1 - me.0) / 1000,
            (ex.1 - ex.0) / 1000
        );
    }
}

/// Four identical incasts of long flows (5 MB into host 4p of pod p from hosts 4p+1 and 4p+2)
/// start together: one leads, three mirror it. 60 us in, a flow from pod 0's other host into
/// pod 0's receiver joins the leader's partition only: the three twins, whose own partitions
/// did not change, are released to where their leader stands. They are released together and
/// are identical, so the episode check looks their partitions up: the first simulates the
/// transient and the other two wait for its outcome, frozen again at once (before, all three
/// ran on packets until a sample window looked steady). The run has fewer packet events than with fast-forwarding alone, every
/// flow finishes safely, and under HPCC each lands within 10% of its exact FCT (as a released
/// twin does in `a_flow_arriving_on_a_waiting_twin_or_its_leader_releases_the_twin`).
#[test]
fn twins_released_together_by_their_leader_look_up_and_defer_to_one() {
    let mut flows = four_identical_incasts();
    flows.push(FlowSpec {
        flow_hash: 7,
        ..flow(3, 0, 2_500_000, 60, 99)
    });
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (exact, plain, memo) = three_runs(cc, &flows);
        let w = memo.wormhole_stats().expect("on");
        assert!(
            w.memo_deferred >= 5,
            "{cc:?}: three mirrors, then two released twins deferred: {}",
            w.memo_deferred
        );
        // Two of the released twins froze again at their release (waiting for the third's
        // transient); run on packets, none would before a sample window had passed.
        let refrozen = (2..8)
            .filter(|&f| skips(&memo, f).iter().any(|r| r.start == SimTime::from_us(60)))
            .count();
        assert_eq!(refrozen, 4, "{cc:?}: flows of released twins frozen again at 60 us");
        assert!(
            memo.stats().events < plain.stats().events,
            "{cc:?}: {} events, {} with fast-forwarding alone",
            memo.stats().events,
            plain.stats().events
        );
        let (ex, me) = (fcts(&exact), fcts(&memo));
        for f in 0..flows.len() {
            let err = fct_err(me[f], ex[f]);
            println!("{cc:?} flow {f}: FCT error {err:.4}");
            if cc == CcMode::Hpcc {
                assert!(err < 0.1, "{cc:?} flow {f}: FCT error {err:.4}");
            }
        }
    }
}

/// Run entries: the first wave's 2-to-1 incast of short flows (1 MB, never steady) runs on
/// packets from its fresh start to its last completion with nothing joining, so the run is
/// stored: each flow's completion offset, under the graph weighted by the flow sizes. The
/// second wave's identical incast freezes at once and finishes each flow at its stored offset.
/// The run is safe and complete, the second wave's incast lasts exactly as long as the first's,
/// and the run has fewer packet events than fast-forwarding alone. Under HPCC the replayed
/// flows are as far from the exact run as the recorded ones, plus however far the exact run's
/// two waves differ.
#[test]
fn a_repeated_short_partition_replays_its_stored_run() {
    let flows = two_waves(1_000_000, 3000);
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (exact, plain, memo) = three_runs(cc, &flows);
        let w = memo.wormhole_stats().expect("on");
        assert!(w.memo_hits >= 1, "{cc:?}: the second incast replayed the first");
        // Its two flows moved all their bytes without packets (the lone pair's completion
        // replay moves part of its own on top).
        assert!(
            w.skipped_bytes >= 2 * 1_000_000,
            "{cc:?}: the replayed incast moved {} bytes",
            w.skipped_bytes
        );
        assert!(
            memo.stats().events * 10 < plain.stats().events * 9,
            "{cc:?}: the replayed incast ran no packets ({} events, {} alone)",
            memo.stats().events,
            plain.stats().events
        );
        // Flows 0-1 are the first wave's incast, 3-4 the second's, in the same roles.
        assert_copies(cc, &exact, &memo, &[(0, 3), (1, 4)]);
    }
}

/// Waves 3 ms apart of a 2-to-1 incast of 1 MB flows into host 0, each joined `join_us[w]`
/// later by a fresh 500 KB flow into host 0 from the other pod (same roles, same paths).
fn joined_waves(join_us: &[u64]) -> Vec<FlowSpec> {
    let mut v = Vec::new();
    for (wave, &j) in join_us.iter().enumerate() {
        let t = wave as u64 * 3000;
        for (role, (src, size, at)) in [(5u32, 1_000_000u64, t), (6, 1_000_000, t), (12, 500_000, t + j)]
            .into_iter()
            .enumerate()
        {
            v.push(FlowSpec {
                flow_hash: role as u64,
                ..flow(src, 0, size, at, wave as u64 * 10 + role as u64)
            });
        }
    }
    v
}

/// Joined runs: in the first wave a fresh flow joins the incast 10 us in; its run from the
/// join to the last completion is stored under the incast's history (its start key, then the
/// join: the joining flow's size and start offset). The second wave starts the same way (on
/// packets: the first wave's start was never stored as a clean run), so at its join it meets
/// the same key and freezes, finishing each flow at its stored offset from the join: its
/// three flows last exactly as long as the first wave's, with fewer packet events than
/// fast-forwarding alone. The third wave's flow joins 20 us in, another history: it runs on
/// packets (its joining flow does not copy the first's). Safe and complete throughout; under
/// HPCC the copies are as far from the exact run as the recorded flows, plus the exact run's
/// own difference between the waves.
#[test]
fn a_repeated_join_replays_its_stored_run_from_the_join() {
    let flows = joined_waves(&[10, 10, 20]);
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (exact, plain, memo) = three_runs(cc, &flows);
        assert!(
            memo.stats().events * 10 < plain.stats().events * 9,
            "{cc:?}: the second wave ran no packets after its join ({} events, {} alone)",
            memo.stats().events,
            plain.stats().events
        );
        // Flows 0-2 are the first wave, 3-5 the second, 6-8 the third, in the same roles.
        assert_copies(cc, &exact, &memo, &[(0, 3), (1, 4), (2, 5)]);
        let me = fcts(&memo);
        let dur = |i: usize| me[i].1 - me[i].0;
        assert_ne!(dur(8), dur(2), "{cc:?}: a join 20 us in is not the one 10 us in");
    }
}

/// A 16-host all-to-all with two QPs per pair (480 flows of 100 KB, one partition far too large
/// to memoize): as flows finish, the memo episode check does not recompute the partitions at
/// every completion instant (each recomputation walks every running flow's links); a sample
/// tick does. Every flow finishes, safely, with the FCTs of fast-forwarding alone (nothing here
/// is small enough to look up until the last few flows, which finish on packets either way).
#[test]
fn flows_leaving_a_huge_partition_do_not_repartition_at_every_completion() {
    let mut flows = Vec::new();
    for s in 0..16u32 {
        for d in (0..16u32).filter(|&d| d != s) {
            for q in 0..2u64 {
                flows.push(FlowSpec {
                    flow_hash: q,
                    ..flow(s, d, 100_000, 0, u64::from(s * 100 + d) * 2 + q)
                });
            }
        }
    }
    for cc in [CcMode::Hpcc, CcMode::Dcqcn] {
        let (_, plain, memo) = three_runs(cc, &flows);
        let w = memo.wormhole_stats().expect("on");
        let mut instants: Vec<u64> = (0..flows.len() as u32)
            .map(|f| memo.flow_result(f).unwrap().finish.as_ps())
            .collect();
        instants.sort_unstable();
        instants.dedup();
        assert!(
            (w.repartitions as usize) * 2 < instants.len(),
            "{cc:?}: {} repartitions for {} completion instants",
            w.repartitions,
            instants.len()
        );
        assert_eq!(fcts(&memo), fcts(&plain), "{cc:?}: the memo run is the fast-forward run");
    }
}

/// The shorter steadiness test for uncontended partitions (`uncontended_window`). Flow C runs
/// alone in pod 2 from the start, at line rate. Flow A in pod 3 shares its receiver's link with
/// a 1 MB flow for its first ~100 us and runs alone after it. Two long flows into host 0 share
/// that link to the end (contended). With `uncontended_window` 3 instead of `window` 8 (50 us
/// samples), C turns steady and is skipped sooner under both CCs, and so is A under HPCC, each
/// within the 2θ FCT band of the exact run, with fewer packet events. Under DCQCN, A leaves the
/// contention below line rate and recovers only at DCQCN's 300 us rate-increase timer, so it keeps
/// eq. 6's full window, as does the incast: both run exactly as with window 8 everywhere (same
/// FCTs, same skips). Safe and complete in every run.
#[test]
fn an_uncontended_partition_turns_steady_on_the_shorter_window() {
    let flows = vec![
        flow(12, 14, 20_000_000, 0, 1),
        flow(13, 14, 1_000_000, 0, 2),
        flow(8, 10, 20_000_000, 0, 3),
        flow(5, 0, 20_000_000, 0, 4),
        flow(6, 0, 20_000_000, 0, 5),
    ];
    let (a, c, incast) = (0usize, 2usize, [3usize, 4]);
    for cc in [CcMode::Dcqcn, CcMode::Hpcc] {
        let mut exact = engine(cc, None, &flows);
        exact.run();
        let runs: Vec<PacketEngine> = [8, 3]
            .into_iter()
            .map(|u| {
                let knobs = WormholeConfig {
                    fast_forward: true,
                    uncontended_window: u,
                    ..WormholeConfig::default()
                };
                ff_run(cc, knobs, &flows, &format!("{cc:?} uncontended_window {u}"))
            })
            .collect();
        let (eq6, short) = (&runs[0], &runs[1]);
        println!(
            "{cc:?}: packet events {} (window 8) / {} (uncontended 3) / {} exact",
            eq6.stats().events,
            short.stats().events,
            exact.stats().events
        );
        assert!(short.stats().events < eq6.stats().events, "{cc:?}: fewer packet events");
        let (e_fct, s_fct, q_fct) = (fcts(&exact), fcts(short), fcts(eq6));
        let sooner = if cc == CcMode::Hpcc { vec![a, c] } else { vec![c] };
        for &f in &sooner {
            let (t8, t3) = (first_skip(eq6, f), first_skip(short, f));
            let e3 = fct_err(e_fct[f], s_fct[f]);
            println!(
                "{cc:?} flow {f}: first skipped at {t8} (window 8), {t3} (uncontended 3); FCT error {e3:.4} (window 8: {:.4})",
                fct_err(e_fct[f], q_fct[f])
            );
            assert!(t3 < t8, "{cc:?} flow {f}: turns steady sooner ({t3} vs {t8})");
            assert!(e3 < 2.0 * 0.05, "{cc:?} flow {f}: FCT error {e3:.4}");
        }
        let unchanged = if cc == CcMode::Hpcc {
            incast.to_vec()
        } else {
            vec![a, incast[0], incast[1]]
        };
        for f in unchanged {
            assert_eq!(s_fct[f], q_fct[f], "{cc:?}: flow {f} keeps the full window");
            assert_eq!(skips(short, f), skips(eq6, f), "{cc:?}: flow {f} skips the same stretches");
        }
    }
}

/// A memo hit whose stored transient outlasts a flow. A 20 MB and a 10 MB flow start together
/// into host 0 and share its link; their episode is stored when they turn steady (6 samples 50
/// us apart), with the bytes each moved by then. A probe finds those bytes, X, for the second
/// flow. A second wave has the same graph (fresh flows, same paths) but a second flow of X
/// bytes: too short for the stored transient with its last stretch left to packets, so the
/// hit used to be refused and the wave ran on packets. Now it freezes and resumes pro rata
/// where that flow's last stretch is left to packets (over 90% of the transient). The second
/// wave's flows stay within 2θ of the exact run, the run is safe and complete, and it runs
/// fewer packet events than fast-forwarding alone. A second flow of X / 2 is refused. HPCC
/// only: the DCQCN incast never turns steady (it stays in fast recovery, see
/// `a_dcqcn_incast_in_fast_recovery_is_not_frozen`), so there is no stored transient.
#[test]
fn a_flow_shorter_than_the_stored_transient_resumes_it_pro_rata() {
    let knobs = WormholeConfig {
        sample_interval: SimTime::from_us(50),
        ..memo_knobs()
    };
    let wave = |t: u64, short: u64, tag: u64| -> Vec<FlowSpec> {
        [(5u32, 20_000_000u64), (6, short)]
            .into_iter()
            .enumerate()
            .map(|(role, (src, size))| FlowSpec {
                flow_hash: role as u64,
                ..flow(src, 0, size, t, tag + role as u64)
            })
            .collect()
    };
    {
        let cc = CcMode::Hpcc;
        // The probe: when the first wave froze, and what its second flow had moved by then.
        let first = wave(0, 10_000_000, 0);
        let mut probe = wave_engine(cc, Some(knobs), &first);
        probe.run();
        let t0 = probe
            .wormhole_log()
            .iter()
            .find(|r| r.flow == 1)
            .map(|r| r.start)
            .expect("the first wave turns steady and freezes");
        let mut probe = wave_engine(cc, Some(knobs), &first);
        probe.run_until(t0);
        let x = probe.flow_bytes_acked(1).unwrap();
        let mut flows = first.clone();
        flows.extend(wave(5_000, x, 10));
        let mut exact = wave_engine(cc, None, &flows);
        exact.run();
        let mut plain = wave_engine(cc, Some(WormholeConfig { memo: false, ..knobs }), &flows);
        plain.run();
        let mut memo = wave_engine(cc, Some(knobs), &flows);
        memo.run();
        assert_safe(&memo, &flows, "memo");
        let w = memo.wormhole_stats().expect("on");
        println!("{cc:?}: t0 {} ps, x {x} B, {w:?}", t0.as_ps());
        assert!(
            memo.wormhole_log()
                .iter()
                .any(|r| r.flow == 3 && r.start == SimTime::from_us(5_000)),
            "{cc:?}: the second wave froze at its start on the first wave's episode"
        );
        let (ex, me) = (fcts(&exact), fcts(&memo));
        let err = |i: usize| {
            let d = |v: &[(u64, u64)]| (v[i].1 - v[i].0) as f64;
            (d(&me) - d(&ex)).abs() / d(&ex)
        };
        for i in [2, 3] {
            assert!(err(i) < 0.10, "{cc:?} flow {i}: {:.4} off the exact run", err(i));
        }
        assert!(
            memo.stats().events * 10 < plain.stats().events * 9,
            "{cc:?}: the hit skipped the second wave's transient ({} events, {} alone)",
            memo.stats().events,
            plain.stats().events
        );
        // A second flow of X / 2 would cut the transient halfway, where pro rata bytes stand
        // in poorly for its course (a DCQCN start backs off from line rate): refused.
        let mut flows = first.clone();
        flows.extend(wave(5_000, x / 2, 10));
        let mut memo = wave_engine(cc, Some(knobs), &flows);
        memo.run();
        assert_safe(&memo, &flows, "memo, half");
        assert!(
            !memo
                .wormhole_log()
                .iter()
                .any(|r| r.flow == 3 && r.start == SimTime::from_us(5_000)),
            "{cc:?}: a hit that would stop halfway through the transient is refused"
        );
    }
}

/// Two 20 MB flows into host 0 sharing its link from the start (an incast of two) and a lone
/// 20 MB flow in pod 2 at line rate.
fn incast_and_lone() -> Vec<FlowSpec> {
    vec![
        flow(5, 0, 20_000_000, 0, 1),
        flow(6, 0, 20_000_000, 0, 2),
        flow(8, 10, 20_000_000, 0, 3),
    ]
}

/// The shorter steadiness test for contended partitions at their max-min fair shares
/// (`fair_window`), on [`incast_and_lone`]. With `fair_window` 4 instead of `window` 8 (50 us
/// samples), under HPCC the incast is steady on the full window as soon (the same run). The
/// uncontended lone flow is not concerned (the same skips). Safe and complete in every run.
/// (Under DCQCN the incast, once both flows held half the link, used to turn steady 200 us
/// sooner, with FCT errors of 7.7% and 10.9%: frozen in fast recovery. It is no longer frozen
/// there: `a_dcqcn_incast_in_fast_recovery_is_not_frozen`.)
#[test]
fn a_contended_partition_at_its_fair_shares_turns_steady_on_the_fair_window() {
    let flows = incast_and_lone();
    let (incast, lone) = ([0usize, 1], 2usize);
    {
        let cc = CcMode::Hpcc;
        let mut exact = engine(cc, None, &flows);
        exact.run();
        let runs: Vec<PacketEngine> = [8, 4]
            .into_iter()
            .map(|fw| {
                let knobs = WormholeConfig {
                    fast_forward: true,
                    uncontended_window: 3,
                    fair_window: fw,
                    ..WormholeConfig::default()
                };
                ff_run(cc, knobs, &flows, &format!("{cc:?} fair_window {fw}"))
            })
            .collect();
        let (eq6, fair) = (&runs[0], &runs[1]);
        println!(
            "{cc:?}: packet events {} (window 8) / {} (fair 4) / {} exact",
            eq6.stats().events,
            fair.stats().events,
            exact.stats().events
        );
        assert_eq!(fair.stats().events, eq6.stats().events, "{cc:?}: the same run");
        let (e_fct, f_fct, q_fct) = (fcts(&exact), fcts(fair), fcts(eq6));
        for f in incast {
            let (t8, t4) = (first_skip(eq6, f), first_skip(fair, f));
            let e4 = fct_err(e_fct[f], f_fct[f]);
            println!(
                "{cc:?} flow {f}: first skipped at {t8} (window 8), {t4} (fair 4); FCT error {e4:.4} (window 8: {:.4})",
                fct_err(e_fct[f], q_fct[f])
            );
            assert_eq!(t4, t8, "{cc:?} flow {f}: steady as soon on the full window");
            let e8 = fct_err(e_fct[f], q_fct[f]);
            assert!(e4 < e8 + 0.01, "{cc:?} flow {f}: FCT error {e4:.4} vs {e8:.4} on the full window");
        }
        assert_eq!(
            skips(fair, lone),
            skips(eq6, lone),
            "{cc:?}: the lone flow skips the same stretches"
        );
    }
}

/// Issue 29: a contended DCQCN partition is not frozen while a flow is in fast recovery (its
/// rate more than θ below its target: the next `RP_TIMER` halves the gap, overshoots the link,
/// and a cut follows). On [`incast_and_lone`] (50 us samples) the two incast flows hold half
/// of host 0's link each with targets above it, and were frozen there: 7.9% and 11.0% off the
/// exact run's FCTs on the full window, 7.7% and 10.9% with `fair_window` 4, since the cycle's
/// mean is not its flat stretch. Now, on the full window, they run on packets to their end
/// (the lone flow's skips in pod 2 share nothing with them: within 1%, measured 0). With
/// `fair_window` 4 they freeze later, once a cut left their targets within θ of their rates,
/// at their fair shares: 4.3% and 5.3% measured; the bound, 6%, is that plus a margin, below
/// the 10.9% of the freeze in fast recovery. The lone flow, at line rate, is still
/// fast-forwarded. Safe and complete.
#[test]
fn a_dcqcn_incast_in_fast_recovery_is_not_frozen() {
    let flows = incast_and_lone();
    let cc = CcMode::Dcqcn;
    let mut exact = engine(cc, None, &flows);
    exact.run();
    let e_fct = fcts(&exact);
    for fw in [8, 4] {
        let knobs = WormholeConfig {
            fast_forward: true,
            uncontended_window: 3,
            fair_window: fw,
            ..WormholeConfig::default()
        };
        let run = ff_run(cc, knobs, &flows, &format!("fair_window {fw}"));
        let f_fct = fcts(&run);
        for f in [0usize, 1] {
            let err = fct_err(e_fct[f], f_fct[f]);
            println!("fair_window {fw} flow {f}: {} skips, FCT error {err:.4}", skips(&run, f).len());
            if fw == 8 {
                assert!(skips(&run, f).is_empty(), "flow {f}: not frozen in fast recovery");
                assert!(err < 0.01, "flow {f}: FCT error {err:.4}");
            } else {
                assert!(err < 0.06, "fair_window {fw} flow {f}: FCT error {err:.4}");
            }
        }
        assert!(!skips(&run, 2).is_empty(), "fair_window {fw}: the lone flow is fast-forwarded");
    }
}

/// A DP ring of four 20 MB flows in pod 0 (0 -> 1 -> 2 -> 3 -> 0): each flow has its data path
/// to itself (line rate), but each one's ACKs leave its receiver on the next flow's data link.
/// A 5 MB flow from pod 2 into host 2 joins at 700 us, once the ring is frozen: it shares host
/// 2's link with flow 1 -> 2, and its ACKs leave on flow 2 -> 3's data link. Partitions are
/// made of data links, so those two resume and flow 0 -> 1 (its data links in edge switch 16
/// alone) stays frozen through the join; with partitions joined through ACK paths the whole
/// ring was one partition and resumed at the join (the 1,024-GPU example's DP rings, each
/// resumed by every pipeline send into one of its hosts, ran on packets for milliseconds).
/// Every flow stays within 2θ of the exact run's FCT (but the DCQCN newcomer, see below).
#[test]
fn a_flow_joining_one_ring_member_leaves_the_others_frozen() {
    let mut flows: Vec<FlowSpec> = (0..4u32).map(|h| flow(h, (h + 1) % 4, 20_000_000, 0, u64::from(h))).collect();
    let t_join = SimTime::from_us(700);
    flows.push(flow(8, 2, 5_000_000, 700, 10));
    let theta = 0.05;
    let knobs = WormholeConfig {
        fast_forward: true,
        ..WormholeConfig::default()
    };
    for cc in [CcMode::Dcqcn, CcMode::Hpcc] {
        let mut exact = engine(cc, None, &flows);
        exact.run();
        let fast = ff_run(cc, knobs, &flows, "ring");
        let spans = |f: usize| skips(&fast, f).iter().any(|r| r.start < t_join && r.end > t_join);
        assert!(
            skips(&fast, 0).iter().any(|r| r.start < t_join),
            "{cc:?}: the ring was frozen before the join: {:?}",
            skips(&fast, 0)
        );
        assert!(spans(0), "{cc:?}: flow 0 -> 1 stays frozen through the join: {:?}", skips(&fast, 0));
        assert!(!spans(1), "{cc:?}: flow 1 -> 2 shares its receiver's link with the newcomer");
        assert!(!spans(2), "{cc:?}: the newcomer's ACKs cross flow 2 -> 3's data link");
        println!(
            "{cc:?}: {} events against {} exact; {:?}",
            fast.stats().events,
            exact.stats().events,
            fast.wormhole_stats()
        );
        assert!(fast.stats().events < exact.stats().events, "{cc:?}: fewer events");
        for (f, (x, y)) in fcts(&exact).into_iter().zip(fcts(&fast)).enumerate() {
            let err = fct_err(x, y);
            println!(
                "{cc:?} flow {f}: exact {} ps, fast-forward {} ps, error {err:.4}",
                x.1 - x.0,
                y.1 - y.0
            );
            // Under DCQCN the newcomer's split of host 2's link with flow 1 -> 2 is a fairness
            // transient that its 4-sample window at the fair share freezes early: 16.3% short
            // here, and 16.4% with the whole ring resumed at the join (partitions joined through
            // ACK paths, before this test); exact runs over seeds 1-5 spread 7% (1.315-1.408 ms).
            let bound = if cc == CcMode::Dcqcn && f == 4 { 0.2 } else { 2.0 * theta };
            assert!(err < bound, "{cc:?} flow {f}: FCT error {err:.4}");
        }
    }
}
