//! The memory `llmsim run` estimates before a run is within 2x of the peak it then measures
//! (issue 29), on five scenario sizes: the analytical backend, whose memory grows with the
//! data-parallel collective plans (quadratic in DP), at 16k, 32k and 65k GPUs, and the flow
//! backend, which simulates every replica, at 1k and 4k GPUs. The peak is the process's own
//! `VmHWM` (Linux), which `llmsim run` prints beside the estimate when it ends.

#![cfg(target_os = "linux")]

use std::process::Command;

/// The number before `MiB` after `marker` in `line`.
fn mib_after(line: &str, marker: &str) -> Option<f64> {
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// (estimate MiB, peak MiB) of `llmsim run` on the GPT-3 175B example at `gpus` GPUs
/// (96 micro-batches per pipeline, as `bench/scale.sh`).
fn estimate_and_peak(gpus: u32, backend: &str) -> (f64, f64) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let gbs = gpus / 64 * 96;
    let o = Command::new(env!("CARGO_BIN_EXE_llmsim"))
        .current_dir(root)
        .args(["run", "examples/gpt3-175b-1024gpu.yaml", "--backend", backend])
        .args([
            "--set",
            &format!("cluster.gpus={gpus}"),
            "--set",
            &format!("training.global_batch_size={gbs}"),
        ])
        // The test machine's free memory is not the question here.
        .arg("--ignore-memory-estimate")
        .output()
        .expect("llmsim runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let est = stderr
        .lines()
        .find(|l| l.starts_with("llmsim: estimated before the run:"))
        .and_then(|l| mib_after(l, ": about "))
        .unwrap_or_else(|| panic!("no estimate line: {stderr}"));
    let peak_line = stderr
        .lines()
        .find(|l| l.starts_with("llmsim: peak memory "))
        .unwrap_or_else(|| panic!("no peak line: {stderr}"));
    let peak = mib_after(peak_line, "peak memory ").unwrap();
    // The peak line repeats the estimate it is compared with.
    assert_eq!(mib_after(peak_line, "before the run: "), Some(est), "{peak_line}");
    (est, peak)
}

#[test]
fn the_memory_estimate_is_within_2x_of_the_measured_peak() {
    let mut seen = Vec::new();
    for (gpus, backend) in [
        (16_384, "analytical"),
        (32_768, "analytical"),
        (65_536, "analytical"),
        (1_024, "flow"),
        (4_096, "flow"),
    ] {
        let (est, peak) = estimate_and_peak(gpus, backend);
        seen.push(format!("{gpus} {backend}: estimate {est} MiB, peak {peak} MiB"));
        let ratio = est / peak;
        assert!(
            (0.5..=2.0).contains(&ratio),
            "{gpus} GPUs, {backend}: estimate {est} MiB against a peak of {peak} MiB\n{seen:?}"
        );
    }
    // The sizes differ in what dominates: the largest run needs several times the smallest's
    // memory, so the check is not five copies of the fixed base.
    let peaks: Vec<f64> = seen.iter().map(|s| mib_after(s, "peak ").unwrap()).collect();
    let (lo, hi) = peaks.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &p| (lo.min(p), hi.max(p)));
    assert!(hi > 3.0 * lo, "{seen:?}");
}
