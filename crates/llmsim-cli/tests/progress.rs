//! A run whose stderr is not a terminal prints plain progress lines (issue 35: piped and logged
//! runs were silent for minutes), with the simulated time reached, the transfers done and the
//! memory in use (issue 29). The interval is shortened through the environment so a small
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

/// The lines come on a clock, not only when a step finishes: with a 0.5 s interval, no two
/// lines of a multi-second run are more than a few seconds apart (a loose bound: the machine
/// running the suite may be loaded), and the first arrives within a few seconds of the start.
#[test]
fn plain_progress_lines_come_on_a_clock() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmsim"))
        .current_dir(&root)
        .args(["run", "examples/gpt3-13b-128gpu.yaml", "--backend", "flow"])
        .args(["--set", "training.global_batch_size=2048"]) // a few seconds in a debug build
        .env("LLMSIM_PROGRESS_INTERVAL_S", "0.5")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let mut arrivals = vec![start];
    let mut simulated = Vec::new();
    for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("llmsim: simulating ") {
            arrivals.push(Instant::now());
            // Each line says how far the simulation got, not only how many nodes finished
            // (those stand still through a long collective).
            let t: f64 = line
                .split("; simulated ")
                .nth(1)
                .and_then(|r| r.split(" s, ").next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no simulated time in {line:?}"));
            assert!(line.contains(" transfers done"), "{line}");
            if cfg!(target_os = "linux") {
                assert!(line.contains(", RSS ") && line.ends_with(" MiB"), "{line}");
            }
            simulated.push(t);
        }
    }
    assert!(child.wait().unwrap().success());
    let wall = start.elapsed();
    eprintln!("{} progress lines in {wall:?}", arrivals.len() - 1);
    assert!(
        simulated.windows(2).all(|w| w[0] <= w[1]),
        "simulated time went back: {simulated:?}"
    );
    if wall < Duration::from_secs(2) {
        return; // too short a run on this machine to say anything
    }
    assert!(simulated.last().is_some_and(|&t| t > 0.0), "{simulated:?}");
    let gap = arrivals.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(arrivals.len() >= 3, "{} lines in {wall:?}", arrivals.len() - 1);
    assert!(
        gap <= Duration::from_secs(4),
        "a {gap:?} gap between progress lines in a {wall:?} run"
    );
}
