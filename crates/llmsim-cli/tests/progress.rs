//! A run whose stderr is not a terminal prints plain progress lines (issue 35: piped and logged
//! runs were silent for minutes). The interval is shortened through the environment so a small
//! run shows it; at the default 5 s a short run prints nothing.

use std::process::Command;

fn run(interval: Option<&str>) -> (bool, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut c = Command::new(env!("CARGO_BIN_EXE_llmsim"));
    c.current_dir(&root)
        .args(["run", "examples/gpt3-13b-128gpu.yaml", "--backend", "analytical"]);
    match interval {
        Some(v) => c.env("LLMSIM_PROGRESS_INTERVAL_S", v),
        None => c.env_remove("LLMSIM_PROGRESS_INTERVAL_S"),
    };
    let out = c.output().expect("runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn piped_runs_print_progress_lines() {
    let (ok, err) = run(Some("0"));
    assert!(ok, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("llmsim: simulating ")).collect();
    assert!(!lines.is_empty(), "no progress lines in {err:?}");
    assert!(lines.iter().all(|l| l.contains("program nodes") && l.contains("%)")), "{lines:?}");
    let (ok, err) = run(None);
    assert!(ok && !err.contains("llmsim: simulating"), "{err}");
}
