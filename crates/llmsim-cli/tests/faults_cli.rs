//! `llmsim topo --describe --links` names the links `faults:` takes, and `llmsim run` applies
//! faults given with `--set` or refuses them naming the field (issue 32 §2).

use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_llmsim");

fn llmsim(args: &[&str]) -> Output {
    Command::new(BIN).args(args).stdin(Stdio::null()).output().expect("run llmsim")
}

const SCENARIO: &str = "\
model: gpt3-13b
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 8, pp: 1 }
cluster: { gpus: 16, gpus_per_node: 8, topology: { kind: spine-leaf, hosts_per_leaf: 4, spines: 2 } }
network: { backend: flow }
";

#[test]
fn describe_lists_link_names_that_a_fault_takes() {
    let o = llmsim(&[
        "topo",
        "--topology",
        "spine-leaf",
        "--hosts-per-leaf",
        "4",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--describe",
        "--links",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("leaf0->spine0") && out.contains("gpu0->leaf0") && out.contains("fabric"),
        "{out}"
    );

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let s = dir.join("s.yaml");
    std::fs::write(&s, SCENARIO).unwrap();
    let s = s.to_str().unwrap();
    // A cable by the listed name: runs.
    let o = llmsim(&["run", s, "--ideal-comm", "--set", "faults=[{link: leaf0-spine0, action: down}]"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // An unknown name, a GPU out of range: a clean error naming the field.
    for (f, field) in [
        ("faults=[{link: leaf0-spine9, action: down}]", "faults[0].link"),
        ("faults=[{gpu: 16, slowdown: 1.2}]", "faults[0].gpu"),
    ] {
        let o = llmsim(&["run", s, "--set", f]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && o.status.code() != Some(101), "{f}: {err}");
        assert!(err.contains(field) && !err.contains("panicked"), "{f}: {err}");
    }
}
