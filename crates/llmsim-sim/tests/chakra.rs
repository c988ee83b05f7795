//! Chakra round trip: a generated workload, exported as per-rank Chakra traces, read back and run
//! on the same cluster, gives the same report (every field but the simulator's wall time:
//! iteration time, throughput, MFU, memory, every stage's and rank's breakdown, every count). The
//! three golden scenarios cover TP/PP/DP on the flow backend, MoE with EP, and an interleaved
//! pipeline with CP.

use std::path::Path;

use llmsim_sim::{ImportedRun, Outcome, RunOptions, Scenario, generate, simulate, simulate_imported};
use llmsim_workload::chakra::{self, ImportOptions};
use serde_json::{Value, json};

/// The whole report but the simulator's own wall time, the folding note and account, and the
/// validation record (an imported trace does not say whether its model is dense or MoE, so it
/// has no class).
fn report(o: &Outcome) -> Value {
    let mut v = serde_json::to_value(&o.report).unwrap();
    let m = v.as_object_mut().unwrap();
    m.remove("sim_wall_s");
    m.remove("symmetry");
    m.remove("fold");
    m.remove("fidelity_class");
    m.remove("fidelity");
    assert!(m.len() > 20, "the report's fields");
    json!(m)
}

fn round_trip(name: &str, no_fold: bool) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    // Host-free: an imported trace runs without host dispatch (its segments have no op list),
    // so the original is compared on its GPU and network timing alone.
    let host_free = ["compute.host=null".to_string()];
    let s = Scenario::load(&dir.join(format!("{name}.yaml")), &host_free).expect("scenario");
    let opts = RunOptions {
        no_fold,
        ..RunOptions::default()
    };
    let original = simulate(&s, &opts, &mut |_, _| {}).expect("runs");

    let g = generate(&s).expect("generates");
    let e = chakra::export(&g.workload, g.layout, &g.seg_time, &g.info).expect("exports");
    assert_eq!(e.ranks.len() as u32, g.layout.units() * g.layout.tp);
    let traces: Vec<_> = e
        .ranks
        .iter()
        .enumerate()
        .map(|(r, b)| chakra::decode(b, &format!("{name}.{r}.et"), r as u32).expect("decodes"))
        .collect();
    // The groups go through their JSON text, as on disk.
    let groups = chakra::parse_comm_groups(&serde_json::to_string(&e.groups).unwrap(), "groups.json").expect("groups");
    let imp = chakra::import(&traces, &groups, &ImportOptions::default()).expect("imports");
    assert_eq!(
        imp.layout, g.layout,
        "{name}: the ranks fold back into the same tensor-parallel units"
    );

    let mut cluster = s.clone();
    cluster.model = None;
    let run = ImportedRun::from_chakra(imp, name);
    let back = simulate_imported(&cluster, run, &opts, &mut |_, _| {}).expect("imported trace runs");
    assert_eq!(report(&original), report(&back), "{name}: the imported trace's report differs");
}

#[test]
fn dense_tp_pp_dp_flow() {
    round_trip("dense-tp-pp-dp", false);
}

#[test]
fn moe_ep_flow() {
    round_trip("moe-ep", false);
}

#[test]
fn interleaved_cp_analytical_unfolded() {
    // Imported workloads never fold data-parallel replicas: compare with the unfolded run.
    round_trip("interleaved-cp", true);
}

mod errors {
    use std::collections::BTreeMap;

    use llmsim_sim::{ImportedRun, RunOptions, Scenario, SimError, simulate_imported};
    use llmsim_workload::chakra::pb::{self, AttributeProto, GlobalMetadata, node_type};
    use llmsim_workload::chakra::{self, ImportOptions};
    use prost::Message as _;

    fn et(nodes: &[pb::Node]) -> Vec<u8> {
        let mut b = Vec::new();
        GlobalMetadata::default().encode_length_delimited(&mut b).unwrap();
        for n in nodes {
            n.encode_length_delimited(&mut b).unwrap();
        }
        b
    }

    fn p2p(id: u64, ty: i32, peer_key: &str, peer: i64, deps: &[u64]) -> pb::Node {
        pb::Node {
            id,
            r#type: ty,
            data_deps: deps.to_vec(),
            attr: vec![AttributeProto::int(peer_key, peer), AttributeProto::int("comm_size", 1 << 20)],
            ..Default::default()
        }
    }

    fn run(ranks: &[Vec<pb::Node>]) -> Result<llmsim_sim::Outcome, SimError> {
        run_with(ranks, "")
    }

    /// [`run`] with `extra` YAML added to the cluster scenario.
    fn run_with(ranks: &[Vec<pb::Node>], extra: &str) -> Result<llmsim_sim::Outcome, SimError> {
        let traces: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(r, n)| chakra::decode(&et(n), &format!("d.{r}.et"), r as u32).unwrap())
            .collect();
        let imp = chakra::import(&traces, &BTreeMap::new(), &ImportOptions::default()).unwrap();
        let y = format!(
            "cluster: {{ gpus: {}, gpus_per_node: 1 }}\nnetwork: {{ backend: flow }}\n{extra}",
            ranks.len()
        );
        let sc = Scenario::cluster_from_yaml(&y, &[], std::path::Path::new(".")).unwrap();
        let run = ImportedRun::from_chakra(imp, "d");
        simulate_imported(&sc, run, &RunOptions::default(), &mut |_, _| {})
    }

    #[test]
    fn unmatched_receive_stalls_with_a_named_node_not_a_hang() {
        // Both ranks receive first and send after: each waits for the other forever.
        let r0 = vec![
            p2p(1, node_type::COMM_RECV, "comm_src", 1, &[]),
            p2p(2, node_type::COMM_SEND, "comm_dst", 1, &[1]),
        ];
        let r1 = vec![
            p2p(1, node_type::COMM_RECV, "comm_src", 0, &[]),
            p2p(2, node_type::COMM_SEND, "comm_dst", 0, &[1]),
        ];
        let e = run(&[r0.clone(), r1.clone()]).err().expect("a stall").to_string();
        assert!(
            e.starts_with("simulation stalled after 0 of 4 nodes: ranks 0-0 (unit 0) wait forever at program node 0: CommRecv"),
            "{e}"
        );
        // Sends first: it runs.
        let r0 = vec![
            p2p(1, node_type::COMM_SEND, "comm_dst", 1, &[]),
            p2p(2, node_type::COMM_RECV, "comm_src", 1, &[1]),
        ];
        let r1 = vec![
            p2p(1, node_type::COMM_SEND, "comm_dst", 0, &[]),
            p2p(2, node_type::COMM_RECV, "comm_src", 0, &[1]),
        ];
        let o = run(&[r0, r1]).expect("runs");
        assert_eq!(o.report.nodes_executed, 4);
    }

    #[test]
    fn sends_that_wait_for_receives_posted_after_them_stall_with_the_rendezvous_named() {
        // Both ranks send 8 MiB, compute, then receive, all on the compute stream (blocking, as
        // llmsim's own export marks them; a foreign trace's sends and receives run on no
        // stream): NCCL moves the first 2 MiB (`collectives.p2p_eager`) and waits for the
        // receiver, which is still behind its own send. With the whole message eager it runs.
        let big = |mut n: pb::Node| {
            n.attr[1] = AttributeProto::int("comm_size", 8 << 20);
            n.attr.push(AttributeProto::int("llmsim_stream", 0));
            n
        };
        let comp = |id: u64, deps: &[u64]| pb::Node {
            id,
            r#type: node_type::COMP,
            duration_micros: 5,
            data_deps: deps.to_vec(),
            ..Default::default()
        };
        let rank = |peer: i64| {
            vec![
                big(p2p(1, node_type::COMM_SEND, "comm_dst", peer, &[])),
                comp(2, &[1]),
                big(p2p(3, node_type::COMM_RECV, "comm_src", peer, &[2])),
            ]
        };
        let e = run(&[rank(1), rank(0)]).err().expect("a stall").to_string();
        assert!(e.contains("wait forever at program node 0: CommSend"), "{e}");
        assert!(e.contains("2 blocking pipeline send(s) wait for their receivers to post"), "{e}");
        assert!(e.contains("collectives.p2p_eager"), "{e}");
        let o = run_with(&[rank(1), rank(0)], "collectives: { p2p_eager: 8MiB }\n").expect("runs");
        assert_eq!(o.report.nodes_executed, 6);
    }

    #[test]
    fn collective_a_member_never_joins_stalls() {
        let ar = pb::Node {
            id: 1,
            r#type: node_type::COMM_COLL,
            attr: vec![AttributeProto::int("comm_type", 0), AttributeProto::int("comm_size", 1024)],
            ..Default::default()
        };
        let comp = pb::Node {
            id: 1,
            r#type: node_type::COMP,
            duration_micros: 5,
            ..Default::default()
        };
        let e = run(&[vec![ar], vec![comp]]).err().expect("a stall").to_string();
        assert!(e.contains("ranks 0-0 (unit 0) wait forever at program node 0: CommColl"), "{e}");
    }
}

/// Random per-rank traces (compute, collectives on random groups, sends and receives, random
/// backward dependencies) either run or fail with an error; the engine never panics or hangs.
mod random_traces {
    use std::collections::BTreeMap;

    use llmsim_sim::{ImportedRun, RunOptions, Scenario, simulate_imported};
    use llmsim_workload::chakra::pb::{self, AttributeProto, GlobalMetadata, node_type};
    use llmsim_workload::chakra::{self, ImportOptions};
    use prost::Message as _;

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    #[test]
    fn run_or_fail_cleanly() {
        let cases: u64 = std::env::var("LLMSIM_RANDOM_TRACES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(150);
        let mut rng = Lcg(7);
        let (mut ran, mut stalled, mut rejected) = (0, 0, 0);
        for case in 0..cases {
            let ranks = 2 + rng.next(3) as u32;
            let mut groups = BTreeMap::new();
            groups.insert("all".to_string(), (0..ranks).collect::<Vec<u32>>());
            groups.insert("pair".to_string(), vec![0, 1]);
            let sym = rng.next(2) == 0;
            let mut files = Vec::new();
            for r in 0..ranks {
                let mut g = if sym { Lcg(case) } else { Lcg(case * 31 + r as u64) };
                let n = 1 + g.next(8);
                let mut b = Vec::new();
                GlobalMetadata::default().encode_length_delimited(&mut b).unwrap();
                for id in 0..n {
                    let deps: Vec<u64> = if id > 0 && g.next(2) == 0 { vec![g.next(id)] } else { vec![] };
                    let (ty, attr) = match g.next(5) {
                        0 | 1 => (node_type::COMP, vec![]),
                        2 => {
                            let pg = if g.next(2) == 0 { "all" } else { "pair" };
                            let pg = if pg == "pair" && r > 1 { "all" } else { pg };
                            (
                                node_type::COMM_COLL,
                                vec![
                                    AttributeProto::int("comm_type", g.next(10) as i64),
                                    AttributeProto::int("comm_size", 1 << g.next(24)),
                                    AttributeProto::string("pg_name", pg),
                                ],
                            )
                        }
                        k => {
                            let peer = (r + 1 + g.next(ranks as u64 - 1) as u32) % ranks;
                            let send = k == 3;
                            (
                                if send { node_type::COMM_SEND } else { node_type::COMM_RECV },
                                vec![
                                    AttributeProto::int(if send { "comm_dst" } else { "comm_src" }, peer as i64),
                                    AttributeProto::int("comm_tag", g.next(2) as i64),
                                    AttributeProto::int("comm_size", 1 << g.next(20)),
                                ],
                            )
                        }
                    };
                    pb::Node {
                        id,
                        r#type: ty,
                        data_deps: deps,
                        duration_micros: g.next(50),
                        attr,
                        ..Default::default()
                    }
                    .encode_length_delimited(&mut b)
                    .unwrap();
                }
                files.push(chakra::decode(&b, &format!("r.{r}.et"), r).unwrap());
            }
            let imp = match chakra::import(&files, &groups, &ImportOptions::default()) {
                Ok(i) => i,
                Err(e) => {
                    let _ = e.to_string();
                    rejected += 1;
                    continue;
                }
            };
            for backend in ["analytical", "flow"] {
                let y = format!(
                    "cluster: {{ gpus: {ranks}, gpus_per_node: 1, topology: {{ kind: flat }} }}\nnetwork: {{ backend: {backend} }}\n"
                );
                let sc = Scenario::cluster_from_yaml(&y, &[], std::path::Path::new(".")).unwrap();
                let run = ImportedRun::from_chakra(imp.clone(), "r");
                match simulate_imported(&sc, run, &RunOptions::default(), &mut |_, _| {}) {
                    Ok(o) => {
                        assert!(o.report.iteration_time_s >= 0.0);
                        ran += 1;
                    }
                    Err(e) => {
                        assert!(e.to_string().contains("stalled"), "case {case}: {e}");
                        stalled += 1;
                    }
                }
            }
        }
        println!("{cases} random traces: {rejected} rejected by the importer; runs: {ran} finished, {stalled} stalled with a named node");
        assert!(ran > 20, "enough random traces ran to the end: {ran}");
    }
}

/// Through files: `write_export` then `import_prefix` (the CLI's path), parallel decoding.
#[test]
fn round_trip_through_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let s = Scenario::load(&dir.join("moe-ep.yaml"), &["compute.host=null".to_string()]).expect("scenario");
    let original = simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("runs");
    let g = generate(&s).unwrap();
    let e = chakra::export(&g.workload, g.layout, &g.seg_time, &g.info).unwrap();
    let out = std::env::temp_dir().join(format!("llmsim-chakra-files-{}", std::process::id()));
    chakra::write_export(&e, &out, "moe").unwrap();
    let text = std::fs::read_to_string(out.join("groups.json")).unwrap();
    let groups = chakra::parse_comm_groups(&text, "groups.json").unwrap();
    let imp = chakra::import_prefix(&out.join("moe"), &groups, &ImportOptions::default()).unwrap();
    let mut cluster = s.clone();
    cluster.model = None;
    let back = simulate_imported(
        &cluster,
        ImportedRun::from_chakra(imp, "moe"),
        &RunOptions::default(),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(report(&original), report(&back));
    let _ = std::fs::remove_dir_all(&out);
}
