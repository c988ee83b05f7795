//! `llmsim sweep` exit codes (issue 30): zero when points ran, non-zero when the spec itself is
//! at fault (an axis or filter over an unknown key, a malformed spec, every point failing alike),
//! so a script or CI job notices.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_llmsim");

const SCENARIO: &str = "\
model: gpt3-13b
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 8, pp: 1 }
cluster: { gpus: 16, gpus_per_node: 8 }
network: { backend: analytical }
";

fn sweep(name: &str, spec: &str) -> (Output, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sweep_exit").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("s.yaml"), SCENARIO).unwrap();
    std::fs::write(dir.join("sweep.yaml"), spec).unwrap();
    let o = Command::new(BIN)
        .args(["sweep", "sweep.yaml", "--out", "out", "-j", "1"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("run llmsim");
    (o, dir)
}

fn fails_naming(name: &str, spec: &str, expect: &[&str]) {
    let (o, _) = sweep(name, spec);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let code = o.status.code();
    assert!(
        code.is_some() && code != Some(0) && code != Some(101),
        "{name}: exit {code:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "{name}: stderr lacks {e:?}: {stderr}");
    }
}

#[test]
fn a_sweep_whose_points_run_exits_zero() {
    let (o, dir) = sweep("ok", "name: ok\nbase: s.yaml\ngrid:\n  parallel.tp: [4, 8]\n");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("ran 2 (2 ok, 0 failed)"), "stdout: {stdout}");
    assert!(dir.join("out").is_dir());
}

#[test]
fn a_spec_level_failure_exits_non_zero() {
    fails_naming(
        "axis-unknown-key",
        "name: a\nbase: s.yaml\ngrid:\n  parallel.tq: [4, 8]\n",
        &["parallel.tq", "same reason"],
    );
    fails_naming(
        "filter-unknown-key",
        "name: f\nbase: s.yaml\ngrid:\n  parallel.tp: [4, 8]\nfilter: parallel.tq > 1\n",
        &["parallel.tq", "filter"],
    );
    fails_naming(
        "samples-type",
        "name: t\nbase: s.yaml\nrandom: { samples: many, axes: {} }\n",
        &["random.samples", "many", "line 3"],
    );
    fails_naming(
        "axis-into-scalar",
        "name: s\nbase: s.yaml\ngrid:\n  model.num_hidden_layers: [4, 8]\n",
        &["model.num_hidden_layers", "`model` is a scalar"],
    );
    // Valid at expansion, fails alike when run: an unknown preset in every point.
    fails_naming(
        "all-fail-at-run",
        "name: r\nbase: s.yaml\nset: [model=gpt5-13b]\ngrid:\n  parallel.tp: [4, 8]\n",
        &["all 2 points failed for the same reason", "gpt5-13b"],
    );
}
