//! Scenario loader (`llmsim run`): any text as scenario YAML; lines `#set KEY=VALUE` (YAML
//! comments, so the YAML itself is unchanged) are also passed as `--set` overrides. The text is
//! loaded both as a scenario and as a cluster file (ASTRA-sim network YAML included); what loads
//! is resolved (GPU count, model, parallel plan, memory check) as `llmsim run` does before
//! simulating. Must return Ok or Err, never panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use llmsim_sim::Scenario;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let sets: Vec<String> = text.lines().filter_map(|l| l.strip_prefix("#set ")).map(str::to_string).collect();
    // A folder with no files: relative paths (model config.json, CSVs) do not resolve.
    let base = Path::new("/nonexistent-llmsim-fuzz");
    match Scenario::from_yaml(&text, &sets, base) {
        Ok(s) => {
            let _ = s.gpus().map_err(|e| e.to_string());
            let _ = llmsim_sim::resolve(&s).map_err(|e| e.to_string());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    if let Ok(s) = Scenario::cluster_from_yaml(&text, &sets, base) {
        let _ = s.gpus().map_err(|e| e.to_string());
    }
});
