//! `llmsim sweep --engine` (issue 36): `auto` says how the points split between the batch
//! engine and the thread pool; `batch` refuses, naming the point and field, a sweep with points
//! it cannot take; `gpu` answers in one line where the GPU path is, as does a packet-level
//! (`ns3:`) sweep file.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_llmsim");

const SCENARIO: &str = "\
model: { preset: gpt3-13b, num_hidden_layers: 2 }
training: { seq_length: 1024, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 2, pp: 1 }
cluster: { gpus: 16, gpus_per_node: 8, topology: { kind: rail-fat-tree } }
network: { backend: flow }
";

const SPEC: &str = "name: e\nbase: s.yaml\ngrid:\n  parallel.pp: [1, 2]\n  cluster.topology.nic.bandwidth: [100Gbps, 400Gbps]\n";

fn sweep(name: &str, engine: &str) -> Output {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sweep_engine").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("s.yaml"), SCENARIO).unwrap();
    std::fs::write(dir.join("sweep.yaml"), SPEC).unwrap();
    Command::new(BIN)
        .args(["sweep", "sweep.yaml", "--out", "out", "-j", "1", "--engine", engine])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run llmsim")
}

#[test]
fn auto_says_how_the_points_split() {
    let o = sweep("auto", "auto");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("ran 4 (4 ok, 0 failed)"), "{stdout}");
    assert!(
        stdout.contains("engine: 1 groups on the batch engine, 2 points batched, 2 fell back to the thread pool"),
        "{stdout}"
    );
}

#[test]
fn batch_refuses_naming_the_point_and_field() {
    let o = sweep("batch", "batch");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code().is_some_and(|c| c != 0 && c != 101), "{stderr}");
    assert!(stderr.contains("2 of 4 points cannot run on the batch engine"), "{stderr}");
    assert!(
        stderr.contains("\"parallel.pp\":2") && stderr.contains("parallel.pp: pp=2"),
        "{stderr}"
    );
}

#[test]
fn gpu_points_at_the_python_module_in_one_line() {
    let o = sweep("gpu", "gpu");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code().is_some_and(|c| c != 0 && c != 101), "{stderr}");
    assert!(stderr.contains("llmsim.batch"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn an_ns3_sweep_points_at_the_python_package() {
    // A packet-level CC sweep (`ns3:` instead of `base:`) runs in the Python package; this binary
    // says so in one line instead of a schema error about `base`.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sweep_engine").join("ns3");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cc.yaml"),
        "name: cc\nns3: config.txt\ngrid:\n  rate_ai_bps: [5.0e+6, 2.0e+7]\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["sweep", "cc.yaml", "--out", "out"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run llmsim");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code().is_some_and(|c| c != 0 && c != 101), "{stderr}");
    assert!(
        stderr.contains("packet-level CC sweep") && stderr.contains("llmsim.batch"),
        "{stderr}"
    );
    assert!(stderr.contains("--engine gpu|batch|threads"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!dir.join("out").exists(), "nothing written");
}
