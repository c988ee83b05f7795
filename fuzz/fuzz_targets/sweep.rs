//! Sweep spec (`llmsim sweep`): any text as a sweep YAML, parsed and, where its `base` is an
//! inline map, expanded into points (grid, zip, random draws, filters, each point's scenario).
//! A `base` naming a file is not expanded: it would read whatever path the input names.
//! Must return Ok or Err, never panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use llmsim_sweep::SweepSpec;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let spec = match SweepSpec::from_yaml(&text) {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    if !spec.base.is_mapping() {
        return;
    }
    let mut spec = spec;
    spec.base_dir = Some("/nonexistent-llmsim-fuzz".into());
    match spec.expand(Path::new("/nonexistent-llmsim-fuzz")) {
        Ok(plan) => {
            for p in &plan.points {
                let _ = p.scenario.as_ref().map_err(String::len);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
