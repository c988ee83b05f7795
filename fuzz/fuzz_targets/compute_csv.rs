//! Compute CSVs: any text parsed as the op-time database (`compute.database`) and as the
//! efficiency table (`compute.efficiency`). Must return Ok or Err, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_compute::{Efficiencies, OpDatabase};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = OpDatabase::from_csv_str(&text).map_err(|e| e.to_string());
    let _ = Efficiencies::from_csv_str(&text).map_err(|e| e.to_string());
});
