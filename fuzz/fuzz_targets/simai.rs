//! SimAI/AICB reader: any text, parsed and turned into a workload. Must return Ok or Err, never
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_workload::simai;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match simai::parse(&text, "fuzz.txt") {
        Ok(w) => {
            let _ = simai::to_workload(&w).map_err(|e| e.to_string());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
