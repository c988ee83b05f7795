//! Traces written by MLCommons Chakra's own Python package (`mlc-chakra`, import name `chakra`)
//! run in llmsim. The test generates them itself: the package's trace generator
//! (`chakra.src.generator.generator`), and a two-rank pipeline written with the package's
//! protobuf classes and `protolib.encodeMessage` (send/recv with comm_src/comm_dst/comm_tag, a
//! collective with pg_name and a communicator-group JSON).
//!
//! Skips, printing why, when Python or the package is not importable. The interpreter is
//! `$LLMSIM_PYTHON` (default `python3`); `scripts/test.sh` points it at its venv, where it installs
//! `pip install --no-deps mlc-chakra protobuf` (the generator needs only protobuf).

use std::path::{Path, PathBuf};
use std::process::Command;

use llmsim_core::SimTime;
use llmsim_sim::{ImportedRun, RunOptions, Scenario, simulate_imported};
use llmsim_workload::chakra::{self, ImportOptions};

fn python() -> Command {
    Command::new(std::env::var_os("LLMSIM_PYTHON").unwrap_or_else(|| "python3".into()))
}

fn python_with_chakra() -> Result<(), String> {
    let out = python()
        .args(["-c", "import chakra.schema.protobuf.et_def_pb2, chakra.src.generator.generator"])
        .output()
        .map_err(|e| format!("python3 not runnable: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mlc-chakra not importable ({}); pip install --no-deps mlc-chakra protobuf",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default()
        ));
    }
    Ok(())
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("llmsim-mlc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cluster(gpus: u32) -> Scenario {
    let y = format!("name: c\ncluster: {{ gpu: H100, gpus: {gpus}, gpus_per_node: {gpus} }}\nnetwork: {{ backend: analytical }}\n");
    Scenario::cluster_from_yaml(&y, &[], Path::new(".")).unwrap()
}

fn run(prefix: &Path, groups_json: Option<&Path>, gpus: u32) -> Result<llmsim_sim::Outcome, String> {
    let traces = chakra::read_prefix(prefix).map_err(|e| e.to_string())?;
    let groups = match groups_json {
        Some(p) => chakra::parse_comm_groups(&std::fs::read_to_string(p).unwrap(), "groups.json").map_err(|e| e.to_string())?,
        None => Default::default(),
    };
    let imp = chakra::import(&traces, &groups, &ImportOptions::default()).map_err(|e| e.to_string())?;
    let run = ImportedRun::bare(imp.workload, imp.layout, prefix.display().to_string(), String::new());
    simulate_imported(&cluster(gpus), run, &RunOptions::default(), &mut |_, _| {}).map_err(|e| e.to_string())
}

#[test]
fn generator_traces_run() {
    if let Err(why) = python_with_chakra() {
        println!("SKIPPED generator_traces_run: {why}");
        return;
    }
    let dir = scratch("gen");
    let runtime_us = 7u64;
    let st = python()
        .args(["-m", "chakra.src.generator.generator", "--num_npus", "4", "--default_runtime"])
        .arg(runtime_us.to_string())
        .args(["--default_comm_size", "1048576"])
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "chakra generator failed");
    let us = |o: &llmsim_sim::Outcome| SimTime::from_ps((o.report.iteration_time_s * 1e12).round() as u64);

    // Compute nodes: duration_micros; the GPU runs one kernel at a time.
    let one = run(&dir.join("one_comp_node"), None, 4).unwrap();
    assert_eq!(us(&one), SimTime::from_us(runtime_us));
    for two in ["two_comp_nodes_dependent", "two_comp_nodes_independent"] {
        let o = run(&dir.join(two), None, 4).unwrap();
        assert_eq!(us(&o), SimTime::from_us(2 * runtime_us), "{two}");
    }
    // The four identical ranks fold into one unit of four lockstep ranks.
    let ar = run(&dir.join("ALL_REDUCE"), None, 4).unwrap();
    assert_eq!(ar.layout.tp, 4);
    assert_eq!(ar.report.collectives, 1);
    assert!(ar.report.iteration_time_s > 0.0);
    for coll in ["ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL", "BROADCAST", "BARRIER"] {
        let o = run(&dir.join(coll), None, 4).unwrap_or_else(|e| panic!("{coll}: {e}"));
        assert_eq!(o.report.collectives, 1, "{coll}");
    }
    for ok in [
        "one_metadata_node_all_types",
        "one_remote_mem_load_node",
        "one_remote_mem_store_node",
    ] {
        run(&dir.join(ok), None, 4).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    // The generator's send/recv nodes name no peer: a clear error, not a guess.
    let e = run(&dir.join("one_comm_send_node"), None, 4).err().expect("an error");
    assert!(
        e.contains("one_comm_send_node.0.et (rank 0)") && e.contains("without comm_dst"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const PIPELINE_PY: &str = r#"
import json, sys
from chakra.schema.protobuf.et_def_pb2 import (GlobalMetadata, Node, AttributeProto as A,
    COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE, ALL_REDUCE)
from chakra.src.third_party.utils.protolib import encodeMessage
out = sys.argv[1]
size = 4 << 20
# pipe: kernels + send/recv + all-reduce; pipe_x: send/recv alone; pipe_a: all-reduce alone.
for prefix, comp_us, p2p, coll in [("pipe", 20, True, True), ("pipe_x", 0, True, False), ("pipe_a", 0, False, True)]:
    for r in range(2):
        with open(f"{out}/{prefix}.{r}.et", "wb") as f:
            encodeMessage(f, GlobalMetadata(version="0.0.4"))
            nodes = []
            def comp(i, deps):
                c = Node(id=i, name="fwd", type=COMP_NODE, duration_micros=comp_us, data_deps=deps)
                c.attr.append(A(name="is_cpu_op", bool_val=False))
                return c
            def p2p_node(i, kind, deps):
                x = Node(id=i, name="p2p", type=kind, data_deps=deps)
                x.attr.extend([A(name="comm_src", int64_val=0), A(name="comm_dst", int64_val=1),
                               A(name="comm_tag", int64_val=5), A(name="comm_size", int64_val=size)])
                return x
            if comp_us and r == 0:
                nodes.append(comp(10, []))
            if p2p:
                deps = [n.id for n in nodes[-1:]]
                nodes.append(p2p_node(11, COMM_SEND_NODE if r == 0 else COMM_RECV_NODE, deps))
            if comp_us and r == 1:
                nodes.append(comp(21, [n.id for n in nodes[-1:]]))
            if coll:
                ar = Node(id=99, name="grad", type=COMM_COLL_NODE, data_deps=[n.id for n in nodes[-1:]])
                ar.attr.extend([A(name="comm_type", int64_val=ALL_REDUCE), A(name="comm_size", int64_val=size),
                                A(name="pg_name", string_val="7")])
                nodes.append(ar)
            for x in nodes:
                encodeMessage(f, x)
json.dump({"7": [0, 1]}, open(f"{out}/groups.json", "w"))
"#;

#[test]
fn protobuf_classes_pipeline_runs() {
    if let Err(why) = python_with_chakra() {
        println!("SKIPPED protobuf_classes_pipeline_runs: {why}");
        return;
    }
    let dir = scratch("pipe");
    let st = python().args(["-c", PIPELINE_PY]).arg(&dir).status().unwrap();
    assert!(st.success(), "writing the trace with mlc-chakra failed");
    let o = run(&dir.join("pipe"), Some(&dir.join("groups.json")), 2).unwrap();
    // Rank 1 waits for rank 0's 20 us kernel and the 4 MiB transfer, then runs its own kernel;
    // both then all-reduce over pg "7". Expected time from the parts, each measured alone.
    assert_eq!(o.layout.tp, 1, "asymmetric ranks stay one unit each");
    assert_eq!(o.report.collectives, 1);
    let ps = |o: &llmsim_sim::Outcome| (o.report.iteration_time_s * 1e12).round() as u64;
    let x = run(&dir.join("pipe_x"), Some(&dir.join("groups.json")), 2).unwrap();
    let a = run(&dir.join("pipe_a"), Some(&dir.join("groups.json")), 2).unwrap();
    assert!(ps(&x) > 0 && ps(&a) > 0);
    assert_eq!(
        ps(&o),
        SimTime::from_us(40).as_ps() + ps(&x) + ps(&a),
        "kernel, transfer, kernel, all-reduce in series"
    );
    // Rank 1 waits 20 us for rank 0's kernel (bubble), then for the transfer (PP), computes,
    // then all-reduces after its last kernel (DP).
    let r1 = &o.report.ranks.iter().find(|r| r.first_rank == 1).unwrap().breakdown;
    let close = |got: f64, want_ps: u64| (got * 1e12 - want_ps as f64).abs() < 1.0;
    assert!(close(r1.bubble_s, SimTime::from_us(20).as_ps()), "bubble {}", r1.bubble_s);
    assert!(close(r1.exposed_pp_s, ps(&x)), "pp {} vs {}", r1.exposed_pp_s, ps(&x));
    assert!(close(r1.exposed_dp_s, ps(&a)), "dp {} vs {}", r1.exposed_dp_s, ps(&a));
    assert!(close(r1.compute_s, SimTime::from_us(20).as_ps()));
    // Without the group JSON: one error naming the group and both ranks.
    let e = run(&dir.join("pipe"), None, 2).err().expect("an error");
    assert!(e.contains("pg_name \"7\" (used by ranks 0-1)"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
