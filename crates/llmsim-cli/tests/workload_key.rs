//! A scenario's `workload:` key (issue 31): `llmsim run` and `llmsim sweep` read a workload file
//! through it, the same run as `--workload FORMAT:PATH`, and a bad key names its field and fix.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_llmsim");
const EXAMPLE: &str = "examples/workload-simai-gpt3-13b-128gpu.yaml";
const TRACE: &str = "examples/interop/gpt3-13b-world_size128-tp2-pp1-ep1-gbs1024-mbs1-seq2048.txt";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn llmsim(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run llmsim")
}

/// The report as JSON without what names the run (scenario, workload label) or times it.
fn report(o: &Output) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("--json prints JSON");
    let m = v.as_object_mut().expect("a JSON object");
    for k in ["scenario", "model", "sim_wall_s"] {
        assert!(m.remove(k).is_some(), "the report has {k}");
    }
    v
}

#[test]
fn run_reads_the_workload_key_as_the_workload_flag_does() {
    let set = ["--set", "network.backend=analytical", "--json"];
    let key = llmsim(&root(), &[&["run", EXAMPLE][..], &set].concat());
    let flag_arg = format!("simai:{TRACE}");
    let flag = llmsim(
        &root(),
        &[
            &["run", "--workload", &flag_arg, "examples/interop/cluster-128xh100.yaml"][..],
            &set,
        ]
        .concat(),
    );
    let k: serde_json::Value = serde_json::from_slice(&key.stdout).unwrap_or_default();
    assert_eq!(
        k["model"], "simai:interop/gpt3-13b-world_size128-tp2-pp1-ep1-gbs1024-mbs1-seq2048.txt",
        "the report names the workload as the scenario wrote it"
    );
    assert_eq!(report(&key), report(&flag));
}

#[test]
fn a_sweep_over_the_cluster_runs_the_workload_file_at_every_point() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workload_key_sweep");
    let _ = std::fs::remove_dir_all(&out);
    let o = llmsim(
        &root(),
        &[
            "sweep",
            "examples/sweep-workload-nic.yaml",
            "--out",
            out.to_str().expect("utf-8 path"),
            "-j",
            "1",
        ],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("ran 3 (3 ok, 0 failed)"), "{stdout}");
    // Best first: more NIC bandwidth, a shorter iteration.
    let order: Vec<usize> = ["400Gbps", "200Gbps", "100Gbps"]
        .iter()
        .map(|b| stdout.find(&format!("\"cluster.topology.nic.bandwidth\":\"{b}\"")).expect(b))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{stdout}");
}

#[test]
fn a_bad_workload_key_names_its_field_and_the_fix() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workload_key_bad");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = root().join(TRACE);
    let cases: [(&str, String, &[&str]); 5] = [
        (
            "unknown-format",
            "format: astra, path: w.txt".into(),
            &[
                "workload.format: unknown workload format \"astra\"; valid: chakra (path: a trace prefix",
                "simai (path:",
            ],
        ),
        (
            "missing-path",
            "format: simai".into(),
            &["workload.path: missing; give a SimAI/AICB workload file"],
        ),
        (
            "missing-format",
            "path: w.txt".into(),
            &["workload.format: missing; give one of chakra"],
        ),
        (
            "no-such-file",
            "format: simai, path: nowhere.txt".into(),
            &[
                "workload.path: ",
                "nowhere.txt",
                "give a SimAI/AICB workload file, relative to the scenario file",
            ],
        ),
        (
            "groups-for-simai",
            format!("format: simai, path: {}, comm_groups: g.json", trace.display()),
            &["workload.comm_groups: simai has no communicator-group file"],
        ),
    ];
    for (name, workload, expect) in cases {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, format!("workload: {{ {workload} }}\ncluster: {{ gpus: 128 }}\n")).unwrap();
        let o = llmsim(&dir, &["run", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let code = o.status.code();
        assert!(
            code.is_some() && code != Some(0) && code != Some(101),
            "{name}: exit {code:?}: {stderr}"
        );
        for e in expect {
            assert!(stderr.contains(e), "{name}: stderr lacks {e:?}: {stderr}");
        }
    }
    // A workload file brings its own model.
    let file = dir.join("with-model.yaml");
    std::fs::write(
        &file,
        format!(
            "model: gpt3-13b\nworkload: {{ format: simai, path: {} }}\ncluster: {{ gpus: 128 }}\n",
            trace.display()
        ),
    )
    .unwrap();
    let stderr = String::from_utf8_lossy(&llmsim(&dir, &["run", file.to_str().unwrap()]).stderr).to_string();
    assert!(
        stderr.contains("workload: a workload file brings its own model; remove `model`/`dlrm`"),
        "{stderr}"
    );
}
